"""What each scope spent this UTC day and month, read back from usage at start.

Budgets are counted in memory on the hot path (``BudgetTable``); after a
restart they are rebuilt from the usage rows, so a restart never hands a
scope its budget again.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gatewayd.gateway.policy.pricing import BudgetSnapshot
from gatewayd.gateway.policy.tenancy import ancestors, scope_of
from gatewayd.store import Store


async def spent_so_far(store: Store, now: datetime | None = None) -> BudgetSnapshot:
    now = now or datetime.now(UTC)
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month_start = day_start.replace(day=1)
    spent: dict[str, dict[str, int]] = {}
    periods = (
        (month_start, month_start.strftime("%Y-%m")),
        (day_start, day_start.date().isoformat()),
    )
    for start, period in periods:
        for row in await store.usage_groups(["key", "project"], start, now):
            if not row.cost_micros:
                continue
            key_id, project = row.group.get("key", ""), row.group.get("project", "")
            scopes = [f"key:{key_id}"] if key_id else []
            scopes += [scope_of(p) for p in ancestors(project)] if project else []
            for scope in scopes:
                by_period = spent.setdefault(scope, {})
                by_period[period] = by_period.get(period, 0) + row.cost_micros
    return BudgetSnapshot(spent=spent)
