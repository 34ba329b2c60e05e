"""Protection of company MCP servers: a rate per caller and a breaker per server.

``RateBuckets`` holds a token bucket per (key, server): a server set to
``--rate 60`` takes 60 calls a minute from each key, refilled at one a
second, and a quiet key may spend its whole minute at once. ``Breakers``
holds a breaker per server: after ``failures`` transport failures in a row
(no connection, no answer in time) its tools are off for ``open_s``; then
exactly one call is let through as a trial, whose success closes the breaker
and whose failure opens it again.

Both run on every ``tools/call``, so they stay small: dictionary lookups and
float arithmetic, no I/O and no awaits (nothing can slip between a check and
its take on the one event loop). The clock is injected so that tests move
time themselves.

The replicas' breakers (``gatewayd.gateway.routing.breaker``) are not reused:
they open for 2, 4, 8 … s by fixed constants and keep no reason, while an MCP
server's breaker opens after ``mcp.breaker_failures`` for ``mcp.breaker_open_s``
as server.yaml says, and ``mcp list`` shows why it opened. The rates are the
gateway's own ``LimitTable``, so they are shared between control planes as
key limits are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gatewayd.gateway.policy.limits import IDLE_S, Limits, LimitTable, Refusal

Clock = Callable[[], float]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

# What a caller is told to wait while another call is the half-open trial: the
# trial's answer decides within about its timeout, and a second is the
# shortest wait a JSON-RPC hint in whole seconds can say.
TRIAL_OUT_WAIT_S = 1.0


class RateBuckets:
    """The rate of every (key, server) seen lately: one ``rpm`` scope each in a ``LimitTable``.

    Alone, a table of its own. Once the gateway's limits are shared between
    control planes (gatewayd/gateway/policy/cluster), ``share`` puts the calls
    into that table: a server's ``--rate`` then holds for the whole cluster as a
    key's limits do, its takes written and read back by the same sync.
    """

    def __init__(self, clock: Clock = time.monotonic, idle_s: float = IDLE_S) -> None:
        self._table = LimitTable(clock, idle_s)
        # One Limits per rate in use: made once, not on every call.
        self._limits: dict[int, Limits] = {}

    def __len__(self) -> int:
        """Buckets held (tests see idle ones go)."""
        return len(self._table)

    def share(self, table: LimitTable) -> None:
        """Count calls in ``table`` from now on (the gateway's, shared with the others)."""
        self._table = table

    def take(self, key_id: str, server: str, rate_per_minute: int) -> float:
        """Take one call from the key's allowance at the server: 0.0 if admitted, else the wait.

        The wait is the seconds until a token is back; nothing is taken when
        refused, so a caller retrying too early is not pushed further back.
        A rate of 0 (or less) is no limit. A changed rate applies at once,
        keeping what was spent in the last minute.
        """
        if rate_per_minute <= 0:
            return 0.0
        limits = self._limits.get(rate_per_minute)
        if limits is None:
            limits = self._limits[rate_per_minute] = Limits(rpm=rate_per_minute)
        outcome = self._table.admit(((rate_scope(key_id, server), limits),), 0)
        return outcome.wait_s if isinstance(outcome, Refusal) else 0.0

    def forget_server(self, server: str) -> None:
        """Drop every key's bucket at a server (it was removed)."""
        suffix = f"@{server}"
        self._table.forget(lambda scope: scope.startswith(SCOPE_PREFIX) and scope.endswith(suffix))


SCOPE_PREFIX = "mcp:"


def rate_scope(key_id: str, server: str) -> str:
    """The limit scope of a key's calls to a server: ``mcp:key_1a2b@hr``."""
    return f"{SCOPE_PREFIX}{key_id}@{server}"


@dataclass(slots=True)
class _Breaker:
    failures: int = 0  # transport failures in a row
    reason: str = ""  # the last failure's, in plain words
    until: float = 0.0  # open until this time; 0 while closed
    trial_at: float | None = None  # when the half-open trial was let through; None: none out


class Breakers:
    """A breaker per company MCP server, by server name.

    A server that never failed has no entry: the usual ``admit`` is one
    dictionary miss. Failures are transport failures and timeouts (an
    ``UpstreamError``); a JSON-RPC error or an ``isError`` result is an
    answer, and counts as a success.
    """

    def __init__(self, failures: int, open_s: float, clock: Clock = time.monotonic) -> None:
        if failures < 1 or open_s <= 0:
            raise ValueError(
                f"a breaker needs at least 1 failure and an open time above 0,"
                f" not {failures} and {open_s} s"
            )
        self._failures = failures
        self._open_s = open_s
        self._clock = clock
        self._states: dict[str, _Breaker] = {}

    def admit(self, server: str) -> float:
        """0.0 if a call may go to the server now; else the seconds until one may.

        Open: the seconds until the trial. Half-open: the first caller is the
        trial (0.0) and every other waits for its verdict. A trial that never
        came back with one (its caller left) is presumed lost after
        ``open_s``, and another is let through, so a breaker cannot stay
        half-open for ever.
        """
        if not self._states:
            return 0.0
        st = self._states.get(server)
        if st is None or not st.until:
            return 0.0
        now = self._clock()
        if now < st.until:
            return st.until - now
        if st.trial_at is not None and now - st.trial_at < self._open_s:
            return TRIAL_OUT_WAIT_S
        st.trial_at = now
        return 0.0

    def success(self, server: str) -> None:
        """The server answered: its breaker closes and its count starts again."""
        if self._states:
            self._states.pop(server, None)

    def failure(self, server: str, reason: str) -> None:
        """A call to the server failed in transport or timed out; ``reason`` says how."""
        now = self._clock()
        st = self._states.get(server)
        if st is None:
            st = self._states[server] = _Breaker()
        st.failures += 1
        st.reason = reason
        if st.until and now < st.until:
            return  # already open: a call that began before it opened
        half_open = bool(st.until)
        if half_open or st.failures >= self._failures:
            st.until = now + self._open_s
            st.trial_at = None

    def release(self, server: str) -> None:
        """A call ended with no verdict (its caller left): if it was the trial, another may be."""
        st = self._states.get(server)
        if st is not None:
            st.trial_at = None

    def state(self, server: str) -> tuple[str, str]:
        """("closed" | "open" | "half_open", why it opened: the last failure's reason).

        The reason is "" while closed, as McpServerView.breaker_reason says: a
        failure or two below the threshold is no reason to show.
        """
        st = self._states.get(server)
        if st is None or not st.until:
            return CLOSED, ""
        return (OPEN if self._clock() < st.until else HALF_OPEN), st.reason

    def forget(self, server: str) -> None:
        """Drop the server's breaker (it was removed, or changed: new address, new credentials)."""
        self._states.pop(server, None)
