"""The sync between control planes: write our running totals, read the others', every second.

``CounterSync.step`` is one round: this run's budget and rate totals that
changed are written to the store (one statement), the other runs' rows
changed since the last round are read back (one statement) and counted
against the same scopes in memory. ``run`` repeats it every ``interval_s``;
it is the only part that waits on the store: the hot path never does.

A round that fails (the store down or cut off) changes nothing: what was not
written is written at the next round that works, as whole totals, so nothing
is lost or counted twice; meanwhile each control plane keeps counting what it
serves itself, as a single control plane does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta

from gatewayd.gateway.policy.cluster.budgets import SharedBudgetTable
from gatewayd.gateway.policy.cluster.rates import SharedLimitTable
from gatewayd.store import Store
from llmgw.aio import within
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# 1 s: a spent key is refused everywhere about a second after it is spent, for
# two small statements a second per control plane.
SYNC_INTERVAL_S = 1.0
# Rows are read again from this far before the last read's clock: a row stamped
# just before that read but committed just after it is still seen. Seen twice
# is harmless (only growth counts).
LOOKBACK_S = 10.0
# A round that takes longer is given up and tried again: a store cut off must
# not hold the sync for a TCP timeout.
STORE_TIMEOUT_S = 5.0
PRUNE_EVERY_S = 60.0


class CounterSync:
    """Shares one control plane run's budgets and rate counts with the others through the store."""

    def __init__(
        self,
        store: Store,
        writer: str,
        budgets: SharedBudgetTable,
        limits: SharedLimitTable,
        *,
        demand=None,
        interval_s: float = SYNC_INTERVAL_S,
        lookback_s: float = LOOKBACK_S,
        timeout_s: float = STORE_TIMEOUT_S,
        prune_every_s: float = PRUNE_EVERY_S,
    ) -> None:
        self.store = store
        self.writer = writer
        self.budgets = budgets
        self.limits = limits
        # On-demand models' request counts (gatewayd/gateway/routing/demand.py), or None.
        self.demand = demand
        self.interval_s = interval_s
        self._lookback = timedelta(seconds=lookback_s)
        self._timeout_s = timeout_s
        self._prune_every_s = prune_every_s
        self._next_prune_at = time.monotonic() + prune_every_s
        self._since: datetime | None = None
        # Until the first read works, the others' totals are what they had charged
        # before we started: the usage rows the budgets were loaded from hold those.
        self._baselined = False
        self._failing = False
        self.rounds = 0  # rounds that worked, for tests and figures

    async def start(self) -> None:
        """Note the others' totals as they stand (one read); a store down now is retried later."""
        try:
            await self._read()
        except StoreError as e:
            log.warning("budgets and limits of other control planes not read yet: %s", e)

    async def step(self) -> None:
        """One round: write what changed here, count what changed elsewhere. Raises StoreError."""
        budget_rows = self.budgets.pending(self.writer)
        rate_rows = self.limits.pending(self.writer)
        demand_rows = self.demand.pending(self.writer) if self.demand is not None else []
        try:
            await self._call(self.store.publish_counters(budget_rows + rate_rows + demand_rows))
        except BaseException:
            self.budgets.unsent(budget_rows)
            self.limits.unsent(rate_rows)
            if self.demand is not None:
                self.demand.unsent(demand_rows)
            raise
        await self._read()
        if time.monotonic() >= self._next_prune_at:
            self._next_prune_at = time.monotonic() + self._prune_every_s
            await self._call(self.store.prune_counters())
        self.rounds += 1

    async def _read(self) -> None:
        reading = await self._call(
            self.store.read_counters(since=self._since, exclude_writer=self.writer)
        )
        first = not self._baselined
        self.budgets.absorb(reading.rows, count=not first)
        self.limits.absorb(reading.rows, first=first)
        if self.demand is not None:
            self.demand.absorb(reading.rows, first=first)
        self._baselined = True
        self._since = reading.now - self._lookback

    async def _call(self, coro):
        try:
            return await within(coro, self._timeout_s)
        except TimeoutError as e:
            raise StoreError(
                f"the store did not answer within {self._timeout_s:g} s",
                hint="budgets and limits are shared again once it answers",
            ) from e

    async def run(self) -> None:
        """A round every ``interval_s`` until cancelled; the last totals are written on the way out."""
        try:
            while True:
                await asyncio.sleep(self.interval_s)
                await self._round()
        except asyncio.CancelledError:
            # A clean stop: the others learn of the last second's charges now,
            # not from usage rows they never read.
            rows = self.budgets.pending(self.writer) + self.limits.pending(self.writer)
            if self.demand is not None:
                rows += self.demand.pending(self.writer)
            if rows:
                try:
                    await self._call(self.store.publish_counters(rows))
                except (StoreError, asyncio.CancelledError):
                    pass
            raise

    async def _round(self) -> None:
        try:
            await self.step()
        except StoreError as e:
            if not self._failing:
                log.warning("budgets and limits not shared with other control planes: %s", e)
                self._failing = True
            return
        except Exception:
            log.exception("sharing budgets and limits failed; trying again")
            return
        if self._failing:
            log.info("budgets and limits shared with other control planes again")
            self._failing = False
