"""Admin RPCs for usage: sums over a period, and the requests themselves for export."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.store_errors import store_unavailable
from gatewayd.store import Store, UsageRecord, UsageSum
from gatewayd.store.usage_query import check_dimensions
from llmgw.errors import StoreError
from proto.llmgw.v1 import UsageGroup, UsageReply, UsageRequest, UsageRowView

# A sparkline of about this many points at most; 24 hours gives 48 half hours.
SERIES_MAX_POINTS = 60
# Steps a series may take: multiples of the 5-minute sums that divide an hour
# or a day, or whole days, so that each point reads whole buckets.
_DAY_S = 86400
SERIES_STEPS_S = (
    *(300, 600, 900, 1800),
    *(3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600),
    *(_DAY_S * d for d in (1, 2, 7, 14, 28, 91, 364)),
)


def parse_when(text: str, name: str) -> datetime | None:
    """An ISO date or time (UTC unless it says otherwise); None for ""."""
    if not text.strip():
        return None
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise GRPCError(
            Status.INVALID_ARGUMENT,
            f"{name} {text!r} is not a date or a time:"
            " write it like 2026-09-01 or 2026-09-01T13:30 (UTC unless an offset is given)",
        ) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def series_step_s(start: datetime, end: datetime) -> int:
    """The shortest step that draws [start, end) in at most SERIES_MAX_POINTS points."""
    span_s = (end - start).total_seconds()
    for step in SERIES_STEPS_S:
        if span_s / step <= SERIES_MAX_POINTS:
            return step
    return SERIES_STEPS_S[-1]


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds" if t.microsecond else "seconds")


def usage_group(s: UsageSum) -> UsageGroup:
    return UsageGroup(
        group=dict(s.group),
        requests=s.requests,
        errors=s.errors,
        prompt_tokens=s.prompt_tokens,
        cached_tokens=s.cached_tokens,
        completion_tokens=s.completion_tokens,
        cost_micros=s.cost_micros,
        latency_ms_avg=s.latency_ms_avg,
        ttft_ms_avg=s.ttft_ms_avg,
    )


def usage_row_view(r: UsageRecord) -> UsageRowView:
    return UsageRowView(
        at=_iso(r.at),
        key_id=r.key_id,
        project=r.project,
        model=r.model,
        served_model=r.served_model,
        replica=r.replica,
        prompt_tokens=r.prompt_tokens,
        cached_tokens=r.cached_tokens,
        completion_tokens=r.completion_tokens,
        cost_micros=r.cost_micros,
        latency_ms=r.latency_ms,
        # 0: no first token (the field cannot say "none").
        ttft_ms=r.ttft_ms or 0.0,
        status=r.status,
        profile=r.profile,
    )


class UsageAdmin:
    """Mixed into AdminService; reads usage from ``_store``."""

    _store: Store

    async def _usage_range(self, message: UsageRequest) -> tuple[datetime, datetime]:
        """The period asked for: "" from the first request recorded, "" to now."""
        end = parse_when(message.to, "to") or datetime.now(UTC)
        start = parse_when(message.from_, "from")
        if start is None:
            first = await self._store.usage_first_at(message.project, message.key_id)
            start = min(first, end) if first is not None else end
        if start > end:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"the period is backwards: from {_iso(start)} is after to {_iso(end)}",
            )
        return start, end

    async def usage(self, message: UsageRequest) -> UsageReply:
        try:
            by = check_dimensions(message.by)
        except ValueError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, str(e)) from None
        try:
            start, end = await self._usage_range(message)
            groups = await self._store.usage_groups(by, start, end, message.project, message.key_id)
            step = series_step_s(start, end)
            series = await self._store.usage_series(
                start, end, step, message.project, message.key_id
            )
        except StoreError as e:
            raise store_unavailable(e) from e
        return UsageReply(
            groups=[usage_group(g) for g in groups],
            from_=_iso(start),
            to=_iso(end),
            series=series,
            series_step_s=step,
        )

    async def export_usage(self, message: UsageRequest) -> AsyncIterator[UsageRowView]:
        """Every request of the period, oldest first; ``by`` is refused (export is per request)."""
        if message.by:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                "an export lists single requests and cannot be grouped;"
                " for sums by " + ",".join(message.by) + " ask Usage",
            )
        try:
            start, end = await self._usage_range(message)
            async for rec in self._store.usage_rows(start, end, message.project, message.key_id):
                yield usage_row_view(rec)
        except StoreError as e:
            raise store_unavailable(e) from e


__all__ = ["UsageAdmin", "parse_when", "series_step_s"]
