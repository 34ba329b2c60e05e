"""Which endpoint answers a request: a model's replicas (or outside keys), in the order to try.

A request names a routing profile in ``x-llmgw-profile``:

- ``chat`` (the default): a session (the request's ``user`` or the
  ``x-llmgw-session`` header) goes first to the replica rendezvous hashing
  gives it, so its prompt cache stays warm and a replica joining or leaving
  moves only the sessions it must; the others follow by a score of their
  smoothed time to first token, their queue, their KV cache and what this
  gateway has in flight to them.
- ``batch``: the shortest queue first.
- ``long-context``: the most free KV cache first.

The keys of an outside provider (``external:MODEL#1``, ``#2`` …) share the
traffic by their weights instead; a session keeps to one key by weighted
rendezvous hashing.

Targets whose breaker is open are left out (``breaker.py``) — unless every
one is, then all are tried, soonest to reopen first: a breaker never makes a
model unanswerable by itself. Everything here is in memory and synchronous:
it runs on every request.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.routing.breaker import Breakers

if TYPE_CHECKING:
    from gatewayd.gateway.metering.scrape import EngineStats

log = logging.getLogger(__name__)

PROFILES = ("chat", "batch", "long-context")
PROFILE_HEADER = "x-llmgw-profile"

# A replica's time to first token, smoothed: each answer moves it this far
# toward what it measured.
TTFT_ALPHA = 0.3
# Forgotten after five minutes without an answer: a replica found slow and
# then given nothing would otherwise never be tried again.
TTFT_FORGET_S = 300.0
# Replicas come and go; what is remembered of gone ones is swept past this many.
TTFT_PRUNE_AT = 4096
# How much each measure counts in the chat score (they add up to 1).
W_TTFT, W_QUEUE, W_IN_FLIGHT, W_KV = 0.35, 0.25, 0.25, 0.15


@dataclass(frozen=True)
class Target:
    """One place a request can go: a replica, or one key of an outside provider."""

    replica_id: str
    base_url: str
    # Outside providers: the provider's name of the model, sent in the body.
    upstream_model: str = ""
    # The whole authorization header value: an outside provider's key, or the replica's own.
    authorization: str = field(default="", repr=False)
    # Share of the traffic beside the model's other targets (outside keys).
    weight: int = 1
    external: bool = False
    # The engine a replica runs ("llama.cpp", "vllm", "sglang", "sim"); "" when not known.
    engine: str = ""
    # The model's vocabulary size (0: not known): token ids past it are refused.
    vocab_size: int = 0
    # A replica behind a TLS door: the CN its node's certificate must carry (its node id).
    peer_name: str = ""


def parse_profile(value: str) -> str:
    """The profile an ``x-llmgw-profile`` header names ("chat" when empty); 400 if unknown."""
    value = value.strip()
    if not value:
        return "chat"
    if value not in PROFILES:
        raise ApiError(
            400,
            f"{PROFILE_HEADER} {value!r} is not a routing profile; use one of: "
            + ", ".join(PROFILES),
            code="invalid_profile",
            param=PROFILE_HEADER,
        )
    return value


def _hash_unit(session: str, replica_id: str) -> float:
    """A number in (0, 1) fixed by the session and the target."""
    h = hashlib.blake2b(f"{session}|{replica_id}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") + 1) / (2**64 + 2)


def _rendezvous(session: str, target: Target) -> float:
    return _hash_unit(session, target.replica_id)


def _weighted_rendezvous(session: str, target: Target) -> float:
    # Highest -w / ln(u) wins: a target of weight 2 wins twice as many sessions.
    return -max(target.weight, 1) / math.log(_hash_unit(session, target.replica_id))


class Router:
    """Orders a model's targets for each request and keeps what answers taught it.

    ``ready(model)`` gives the model's targets (the controller's replicas or
    the provider's keys); ``stats(replica_id)`` what the scraper last read of
    an engine, or None.
    """

    def __init__(
        self,
        ready: Callable[[str], list[Target]],
        stats: Callable[[str], EngineStats | None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._ready = ready
        self._stats = stats or (lambda _rid: None)
        self._clock = clock
        self._rng = rng
        self.in_flight: dict[str, int] = {}
        self.breakers = Breakers(clock)
        # replica id -> (smoothed time to first token in seconds, when last measured)
        self._ttft: dict[str, tuple[float, float]] = {}
        # Endpoint ("external:MODEL#2") -> how often its key was refused (401).
        self.key_refusals: dict[str, int] = {}

    # ---- ordering ------------------------------------------------------------

    def candidates(self, model: str, session: str = "", profile: str = "chat") -> list[Target]:
        """The model's targets in the order to try them; ValueError for an unknown profile."""
        if profile not in PROFILES:
            raise ValueError(f"unknown routing profile {profile!r}")
        targets = self._ready(model)
        if not targets:
            return []
        breakers = self.breakers
        now = self._clock()
        usable = [t for t in targets if breakers.usable(t, now)] if len(breakers) else targets
        if not usable:
            return sorted(targets, key=breakers.reopens_at)
        if len(usable) == 1:
            return list(usable)
        if usable[0].external:
            return self._by_weight(usable, session)
        if profile == "batch":
            return self._shuffled_sort(usable, self._queue_key)
        if profile == "long-context":
            return self._shuffled_sort(usable, self._kv_key)
        return self._chat(usable, session, now)

    def _chat(self, targets: list[Target], session: str, now: float) -> list[Target]:
        first = None
        if session:
            first = max(targets, key=lambda t: _rendezvous(session, t))
        fastest = None
        ttfts = {}
        for t in targets:
            m = self._ttft.get(t.replica_id)
            if m is not None and now - m[1] <= TTFT_FORGET_S:
                ttfts[t.replica_id] = m[0]
                fastest = m[0] if fastest is None else min(fastest, m[0])

        def score(t: Target) -> float:
            ttft = ttfts.get(t.replica_id)
            # The fastest 1, one twice as slow 0.5, one not yet measured 1.
            s_ttft = 1.0 if ttft is None or ttft <= 0 else (fastest or ttft) / ttft
            st = self._stats(t.replica_id)
            waiting = st.waiting if st is not None else 0.0
            kv = st.kv_usage if st is not None and st.kv_usage is not None else 0.0
            return (
                W_TTFT * s_ttft
                + W_QUEUE / (1.0 + waiting)
                + W_IN_FLIGHT / (1.0 + self.in_flight.get(t.replica_id, 0))
                + W_KV * (1.0 - kv)
            )

        rest = [t for t in targets if t is not first]
        ordered = self._shuffled_sort(rest, lambda t: -score(t))
        return [first, *ordered] if first is not None else ordered

    def _queue_key(self, t: Target) -> tuple:
        # What this gateway has in flight on the replica first: it is live, where the
        # engine's scraped queue is up to a scrape old, and ordering by it alone sent
        # every request of a second to the replica that had looked idle (a batch then
        # ran at one replica's rate). The scraped queue breaks ties.
        st = self._stats(t.replica_id)
        waiting = st.waiting if st is not None else 0.0
        return (self.in_flight.get(t.replica_id, 0), waiting)

    def _kv_key(self, t: Target) -> tuple:
        st = self._stats(t.replica_id)
        used = st.kv_usage if st is not None and st.kv_usage is not None else 0.0
        return (used, self.in_flight.get(t.replica_id, 0))

    def _shuffled_sort(self, targets: list[Target], key) -> list[Target]:
        # Ties go in random order, so equal replicas share the traffic.
        rng = self._rng
        return [t for _, _, t in sorted(((key(t), rng(), t) for t in targets), key=_first_two)]

    def _by_weight(self, targets: list[Target], session: str) -> list[Target]:
        if session:
            return sorted(targets, key=lambda t: _weighted_rendezvous(session, t), reverse=True)
        rng = self._rng

        # A weighted random order (Efraimidis–Spirakis): u ** (1 / w), highest first.
        def draw(t: Target) -> float:
            return max(rng(), 1e-12) ** (1.0 / max(t.weight, 1))

        return sorted(targets, key=draw, reverse=True)

    # ---- what requests teach it ----------------------------------------------

    def begin(self, target: Target) -> None:
        self.in_flight[target.replica_id] = self.in_flight.get(target.replica_id, 0) + 1
        if len(self.breakers):
            self.breakers.begin(target)

    def end(self, target: Target) -> None:
        n = self.in_flight.get(target.replica_id, 1) - 1
        if n <= 0:
            self.in_flight.pop(target.replica_id, None)
        else:
            self.in_flight[target.replica_id] = n
        if len(self.breakers):
            self.breakers.release(target)

    def succeeded(self, target: Target) -> None:
        """The target answered (any answer that is not a failure): its breaker closes."""
        if len(self.breakers):
            self.breakers.success(target)

    def failed(
        self, target: Target, status: int = 0, *, retry_after_s: float | None = None
    ) -> float:
        """The target failed (``status`` 0: no answer at all); seconds its breaker is open for.

        An outside key answering 429 or 401 is passed over at once: its
        limit is spent or it is refused, and asking again will not help.
        """
        at_once = target.external and status in (401, 429)
        if status == 401 and target.external:
            self.key_refusals[target.replica_id] = self.key_refusals.get(target.replica_id, 0) + 1
        return self.breakers.failure(target, at_once=at_once, retry_after_s=retry_after_s)

    def observe_ttft(self, target: Target, seconds: float) -> None:
        """A streamed answer's time to its first token, smoothed into the target's."""
        if seconds < 0:
            return
        now = self._clock()
        prev = self._ttft.get(target.replica_id)
        if prev is None or now - prev[1] > TTFT_FORGET_S:
            value = seconds
        else:
            value = prev[0] + TTFT_ALPHA * (seconds - prev[0])
        self._ttft[target.replica_id] = (value, now)
        if len(self._ttft) > TTFT_PRUNE_AT:
            for rid in [r for r, (_, at) in self._ttft.items() if now - at > TTFT_FORGET_S]:
                del self._ttft[rid]

    def ttft(self, replica_id: str) -> float | None:
        """The smoothed time to first token of a target, if measured lately."""
        m = self._ttft.get(replica_id)
        if m is None or self._clock() - m[1] > TTFT_FORGET_S:
            return None
        return m[0]

    def breaker_state(self, target: Target) -> str:
        """The target's breaker: closed, open or half-open."""
        return self.breakers.state(target)


def _first_two(item: tuple) -> tuple:
    return item[0], item[1]
