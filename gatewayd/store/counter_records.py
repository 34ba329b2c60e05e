"""What control planes tell each other through the store: their running totals per scope.

Budgets and rate limits are counted in memory on each control plane's hot
path; ``gatewayd.gateway.policy.cluster`` writes each run's own totals as
``SharedCounter`` rows about once a second and reads the others' back, so
that N control planes together hold one budget and one rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# What a counter counts: money charged (micro-units), requests taken, tokens taken.
COUNTER_KINDS = ("spend", "rpm", "tpm")


@dataclass(frozen=True, slots=True)
class SharedCounter:
    """One control plane run's running total for a scope, a kind and a period.

    ``writer`` names the run ("<control plane id>/<run id>"): a restarted
    control plane counts afresh under a new one, so a total never goes back.
    ``period`` is a UTC day ("2026-11-05") or month ("2026-11") for spend, a
    minute window ("m29384756") for rates. ``amount`` is the whole total so
    far, not an increment; tokens may go down when an answer used less than
    its estimate. ``rate_per_min`` is the limit the writer counted against
    (0 for spend). ``updated_at`` is the store's clock at the write (None on
    a row not yet written).
    """

    writer: str
    scope: str
    kind: str
    period: str
    amount: int
    expires_at: datetime
    rate_per_min: int = 0
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CounterReading:
    """The other runs' rows changed since a moment, and the store's clock when read."""

    rows: list[SharedCounter]
    now: datetime
