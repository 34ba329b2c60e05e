"""Circuit breakers: a replica or an outside key that keeps failing is left alone for a while.

A breaker per target counts failures in a row (a connection that failed
before an answer, a 5xx or a 429 before any byte was relayed). After
``FAILURES_TO_OPEN`` of them it opens: the router leaves the target out for
``OPEN_BASE_S``, then twice as long each time it opens again in a row, at
most ``OPEN_MAX_S``. Some answers open it at once — an outside key answering
429 (its limit is spent) or 401 (it is refused). Once the wait has passed
the breaker is half-open: one request is let through as a trial; its success
closes the breaker, its failure opens it again for longer.

Pure and in memory, and cheap on the hot path: a target that never failed
has no entry at all, so the usual check is one dictionary miss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"

# Three in a row: one dropped connection (an engine restarting, a keep-alive
# connection the engine had closed) is not a reason to take a replica out.
FAILURES_TO_OPEN = 3
# 2, 4, 8 … seconds, at most a minute: a replica back from a restart gets
# traffic again within seconds; a dead one costs one trial a minute.
OPEN_BASE_S = 2.0
OPEN_MAX_S = 60.0
# A provider's Retry-After is believed up to this long.
RETRY_AFTER_MAX_S = 300.0


@dataclass(slots=True)
class _State:
    failures: int = 0  # in a row
    opened: int = 0  # times opened in a row: the backoff's exponent
    until: float = 0.0  # open until this time; 0 while closed
    trial: bool = False  # the half-open trial request is out


class Breakers:
    """The breakers of every target, keyed by whatever identifies a target."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._states: dict[Hashable, _State] = {}

    def __len__(self) -> int:
        return len(self._states)

    def usable(self, key: Hashable, now: float | None = None) -> bool:
        """Whether a request may go to the target now."""
        if not self._states:
            return True
        st = self._states.get(key)
        if st is None or not st.until:
            return True
        if (self._clock() if now is None else now) < st.until:
            return False
        return not st.trial  # half-open: one trial at a time

    def state(self, key: Hashable, now: float | None = None) -> str:
        st = self._states.get(key)
        if st is None or not st.until:
            return CLOSED
        return OPEN if (self._clock() if now is None else now) < st.until else HALF_OPEN

    def reopens_at(self, key: Hashable) -> float:
        """When the target may be tried again (0: now)."""
        st = self._states.get(key)
        return st.until if st is not None else 0.0

    def begin(self, key: Hashable) -> None:
        """A request goes to the target: if half-open, it is the trial."""
        st = self._states.get(key)
        if st is not None and st.until and self._clock() >= st.until:
            st.trial = True

    def release(self, key: Hashable) -> None:
        """The request ended without a verdict (the client left): another may be the trial."""
        st = self._states.get(key)
        if st is not None:
            st.trial = False

    def success(self, key: Hashable) -> None:
        """The target answered: its breaker closes and its count starts again."""
        if self._states:
            self._states.pop(key, None)

    def failure(
        self, key: Hashable, *, at_once: bool = False, retry_after_s: float | None = None
    ) -> float:
        """The target failed; the seconds its breaker is now open for (0: still closed).

        ``at_once`` opens it without waiting for ``FAILURES_TO_OPEN``;
        ``retry_after_s`` (a provider's Retry-After) sets how long, capped.
        """
        now = self._clock()
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _State()
        st.failures += 1
        st.trial = False
        if st.until and now < st.until:
            return st.until - now  # already open (a request that began before it opened)
        half_open = bool(st.until)
        if not (at_once or half_open or st.failures >= FAILURES_TO_OPEN):
            return 0.0
        st.opened += 1
        wait = min(OPEN_BASE_S * 2 ** (st.opened - 1), OPEN_MAX_S)
        if retry_after_s is not None and retry_after_s > 0:
            wait = min(max(wait, retry_after_s), RETRY_AFTER_MAX_S)
        st.until = now + wait
        return wait

    def open_now(self) -> dict[Hashable, float]:
        """Targets whose breaker is open or half-open, and when each may be tried again."""
        return {k: st.until for k, st in self._states.items() if st.until}

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop the breakers of targets that are gone."""
        for key in [k for k in self._states if not keep(k)]:
            del self._states[key]
