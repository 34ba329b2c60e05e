"""Rate limits: requests and tokens a minute for a key, its project, its team and its organization.

A scope is named as the store names it, ``kind:path``: ``key:k_7f3a``,
``project:Acme/ml/search``, ``team:Acme/ml``, ``org:Acme``. Each level only
narrows what is above it (``resolve``), and each level's own allowance is
shared by all the traffic beneath it: a project's 60 requests a minute are
60 for all of its keys together (``LimitTable.admit``).

Money budgets are set here beside the rates, so that one ``Limits`` says all a
level may do, and are kept by ``gatewayd.gateway.policy.pricing.BudgetTable``.

Everything here runs on every request, so it stays small: a dict lookup and a
little float arithmetic per scope, no I/O, no awaits (nothing can slip
between a check and its take on the one event loop). The clock is read once
per admission and once per settlement, not once per bucket: four levels of
two limits each had it read twenty times a request, a fifth of the gateway's
own time in a profile.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveInt

Clock = Callable[[], float]
"""Seconds from any fixed point; ``time.monotonic`` unless a test brings a fake."""

LimitName = Literal["rpm", "tpm", "budget_day", "budget_month"]

# A bucket not used for 10 minutes, and owing nothing, is forgotten: a new one
# starts full, which is exactly what the old one would be by then. 10 minutes
# rather than 1 keeps a scope that sends every few minutes from being made
# again and again.
IDLE_S = 600.0


class Limits(BaseModel):
    """What one level of the tree (key, project, team, organization) may do; None is unlimited.

    Budgets are in micro-units of money (a millionth of the currency the prices
    are written in), per calendar day and per calendar month in UTC; a level
    may have either, both or neither. Two fields rather than an amount and a
    period, so that the strictest of a chain is a plain minimum per field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rpm: PositiveInt | None = None
    tpm: PositiveInt | None = None
    budget_day_micros: NonNegativeInt | None = None
    budget_month_micros: NonNegativeInt | None = None


UNLIMITED = Limits()


def resolve(chain: Sequence[Limits]) -> Limits:
    """The limits that apply through a chain of levels: the strictest set value of each field."""
    values: dict[str, int | None] = {}
    for name in Limits.model_fields:
        set_values = [v for v in (getattr(level, name) for level in chain) if v is not None]
        values[name] = min(set_values) if set_values else None
    return Limits(**values)


def scope_label(scope: str) -> str:
    """How a scope is named to people: ``project:Acme/ml/search`` → ``project Acme/ml/search``."""
    kind, sep, path = scope.partition(":")
    return f"{kind} {path}" if sep else scope


def retry_after_s(wait_s: float) -> int:
    """Whole seconds for a ``Retry-After`` header: rounded up, and at least 1.

    Up, because a client that comes back a fraction too early is refused
    again; the nanosecond of slack keeps float noise (2.0000000001) from
    adding a whole second.
    """
    return max(1, math.ceil(wait_s - 1e-9))


class Refusal(BaseModel):
    """Why a request is turned away (HTTP 429), and when to send it again.

    ``retry_after_s`` is None when waiting will not help soon — a spent
    monthly budget — and the ``Retry-After`` header is then left out, which
    is what tells clients like ``llmgw-kb`` not to retry.
    """

    model_config = ConfigDict(frozen=True)

    scope: str
    limit: LimitName
    message: str
    retry_after_s: int | None
    status: int = 429
    # The exact wait behind ``retry_after_s`` (a rate's; 0 where none is known).
    wait_s: float = 0.0


class TokenBucket:
    """A rate per minute, spent in tokens; it holds at most one minute's worth.

    Starts full, so a quiet scope may send a minute's allowance at once. It
    may go below zero: a request larger than a whole minute's allowance
    passes when the bucket is full (else it could never pass, while
    ``Retry-After`` promised it would), and an answer that used more than its
    estimate is charged in full; either debt holds back what comes next.
    """

    __slots__ = ("_clock", "_rate_per_s", "_tokens", "_touched_at", "capacity")

    def __init__(self, rate_per_min: float, clock: Clock = time.monotonic) -> None:
        if rate_per_min <= 0:
            raise ValueError(f"a rate must be above 0 a minute, not {rate_per_min}")
        self._clock = clock
        self._rate_per_s = rate_per_min / 60.0
        self.capacity = float(rate_per_min)
        self._tokens = self.capacity
        self._touched_at = clock()

    @property
    def rate_per_min(self) -> float:
        return self.capacity

    @property
    def touched_at(self) -> float:
        """When the bucket was last used, on its clock."""
        return self._touched_at

    @property
    def tokens(self) -> float:
        """What is in the bucket now (negative while it is in debt)."""
        return self._refill()

    def level_at(self, now: float) -> float:
        """What the bucket will hold at ``now`` if nothing else is taken, without touching it."""
        elapsed = max(0.0, now - self._touched_at)
        return min(self.capacity, self._tokens + elapsed * self._rate_per_s)

    def _refill(self, now: float | None = None) -> float:
        if now is None:
            now = self._clock()
        # level_at, inline: this runs for every bucket of every request.
        elapsed = now - self._touched_at
        if elapsed > 0:
            tokens = self._tokens + elapsed * self._rate_per_s
            self._tokens = min(self.capacity, tokens)
            self._touched_at = now
        return self._tokens

    def wait_s(self, n: float, now: float | None = None) -> float | None:
        """None if ``n`` may be taken now, else seconds until it may; takes nothing.

        ``now``: the clock's reading, when the caller has just read it.
        """
        tokens = self._refill(now)
        need = min(n, self.capacity)
        if tokens >= need:
            return None
        return (need - tokens) / self._rate_per_s

    def try_take(self, n: float) -> float | None:
        """Take ``n`` if the bucket allows it (None), else take nothing and say how long to wait."""
        wait = self.wait_s(n)
        if wait is None:
            self._tokens -= n
        return wait

    def charge(self, n: float, now: float | None = None) -> None:
        """Take ``n`` whatever the bucket holds: what an answer used beyond its estimate."""
        self._refill(now)
        self._tokens -= n

    def refund(self, n: float, now: float | None = None) -> None:
        """Give back ``n`` that an estimate took and the answer did not use; never past full."""
        self._tokens = min(self.capacity, self._refill(now) + n)

    def set_rate(self, rate_per_min: float) -> None:
        """Follow a changed limit, keeping what was spent in the last minute.

        A limit lowered from 100 to 2 after 2 requests leaves none: it is
        what was sent that counts, not what was left of the old allowance.
        """
        if rate_per_min <= 0:
            raise ValueError(f"a rate must be above 0 a minute, not {rate_per_min}")
        spent = self.capacity - self._refill()
        self._rate_per_s = rate_per_min / 60.0
        self.capacity = float(rate_per_min)
        self._tokens = self.capacity - spent


class Ticket:
    """A request let through; ``settle`` it with the answer's token count once it is known."""

    __slots__ = ("_clock", "_settled", "_tpm", "estimate")

    def __init__(self, tpm: list[TokenBucket], estimate: int, clock: Clock | None = None) -> None:
        self._tpm = tpm
        self._settled = False
        self.estimate = estimate
        # The buckets' clock, read once for all of them; None: each reads its own.
        self._clock = clock

    def settle(self, actual_tokens: int) -> None:
        """Correct every tokens-a-minute bucket from the estimate to what was used.

        Only the first call counts: a path that settles twice (a retry, an
        error handler after a finally) must not charge twice. A request that
        never reached a model settles with 0, which gives its estimate back.
        """
        if self._settled:
            return
        self._settled = True
        diff = max(0, actual_tokens) - self.estimate
        if not diff or not self._tpm:
            return
        now = self._clock() if self._clock is not None else None
        if diff > 0:
            for bucket in self._tpm:
                bucket.charge(diff, now)
        else:
            for bucket in self._tpm:
                bucket.refund(-diff, now)


class LimitTable:
    """The rate buckets of every scope seen lately, one per scope and limit."""

    def __init__(self, clock: Clock = time.monotonic, idle_s: float = IDLE_S) -> None:
        self._clock = clock
        self._idle_s = idle_s
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        # Sweeping looks at every bucket, so it runs a few times per idle
        # period rather than on every request.
        self._next_sweep_at = clock() + idle_s / 4

    def __len__(self) -> int:
        """How many buckets are held (for metrics, and to see that idle ones go)."""
        return len(self._buckets)

    def _bucket(self, scope: str, kind: str, rate_per_min: int) -> TokenBucket:
        bucket = self._buckets.get((scope, kind))
        if bucket is None:
            bucket = self._buckets[(scope, kind)] = TokenBucket(rate_per_min, self._clock)
        elif bucket.capacity != rate_per_min:
            bucket.set_rate(rate_per_min)
        return bucket

    def admit(
        self, scopes: Sequence[tuple[str, Limits]], est_tokens: int, requests: int = 1
    ) -> Refusal | Ticket:
        """Let a request through every scope's limits, or refuse it taking nothing from any.

        ``scopes`` are the request's levels, the key first and the
        organization last, each with its own limits (not resolved: a team's
        rate is the team's, shared by all its projects). ``est_tokens`` is
        the prompt's estimate plus what the answer may use; the ticket
        corrects it afterwards. ``requests``: what the request counts for in
        requests a minute (one asking for ``n`` answers counts ``n``).

        All or nothing: a request refused by its team must not spend its
        key's allowance, or a busy team would lock its quiet keys out. When
        several limits refuse, the one that holds longest is named, so that a
        client waiting ``Retry-After`` is not refused again by another.
        """
        now = self._clock()
        if now >= self._next_sweep_at:
            self._sweep(now)
        est = max(0, est_tokens)
        rpm_buckets: list[TokenBucket] = []
        tpm_buckets: list[TokenBucket] = []
        worst_wait = -1.0
        worst: tuple[str, LimitName, int] | None = None
        for scope, limits in scopes:
            rpm, tpm = limits.rpm, limits.tpm
            if rpm is not None:
                bucket = self._bucket(scope, "rpm", rpm)
                wait = bucket.wait_s(requests, now)
                if wait is not None and wait > worst_wait:
                    worst_wait, worst = wait, (scope, "rpm", rpm)
                rpm_buckets.append(bucket)
            if tpm is not None:
                bucket = self._bucket(scope, "tpm", tpm)
                wait = bucket.wait_s(est, now)
                if wait is not None and wait > worst_wait:
                    worst_wait, worst = wait, (scope, "tpm", tpm)
                tpm_buckets.append(bucket)
        if worst is not None:
            return _refusal(*worst, worst_wait)
        # Every bucket was brought up to ``now`` by wait_s: charging is a subtraction.
        for bucket in rpm_buckets:
            bucket._tokens -= requests
        for bucket in tpm_buckets:
            bucket._tokens -= est
        return Ticket(tpm_buckets, est, self._clock)

    def forget(self, scope_is: Callable[[str], bool]) -> None:
        """Drop the buckets of the scopes ``scope_is`` picks (what they limit is gone)."""
        for key in [k for k in self._buckets if scope_is(k[0])]:
            del self._buckets[key]

    def _sweep(self, now: float) -> None:
        self._next_sweep_at = now + self._idle_s / 4
        idle = [
            key
            for key, bucket in self._buckets.items()
            if now - bucket.touched_at >= self._idle_s and bucket.level_at(now) >= bucket.capacity
        ]
        for key in idle:
            del self._buckets[key]


def _refusal(scope: str, limit: LimitName, rate: int, wait_s: float) -> Refusal:
    after = retry_after_s(wait_s)
    unit = "requests" if limit == "rpm" else "tokens"
    return Refusal(
        scope=scope,
        limit=limit,
        message=f"{scope_label(scope)}: {rate:,} {unit} per minute reached; try again in {after} s",
        retry_after_s=after,
        wait_s=wait_s,
    )
