"""The Usage and ExportUsage admin RPCs over a real store (the handlers, without gRPC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.usage import UsageAdmin, parse_when, series_step_s
from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store import Store
from proto.llmgw.v1 import UsageRequest

T0 = datetime(2026, 9, 1, tzinfo=UTC)


class Admin(UsageAdmin):
    def __init__(self, store: Store) -> None:
        self._store = store


def _row(at: datetime, **changes) -> UsageRow:
    fields = {"key_id": "key_a", "project": "Acme/ml/search", "model": "chat", "latency_ms": 10.0}
    fields.update(changes)
    return UsageRow(at=at, **fields)


def test_dates_and_times_are_read_as_utc_unless_they_say_otherwise():
    assert parse_when("2026-09-01", "from") == T0
    assert parse_when("2026-09-01T13:30", "from") == T0 + timedelta(hours=13, minutes=30)
    assert parse_when("2026-09-01T13:30+02:00", "to") == T0 + timedelta(hours=11, minutes=30)
    assert parse_when("", "to") is None
    with pytest.raises(GRPCError) as e:
        parse_when("last tuesday", "from")
    assert e.value.status is Status.INVALID_ARGUMENT and "2026-09-01" in e.value.message


def test_the_sparkline_step_keeps_to_sixty_points():
    assert series_step_s(T0, T0 + timedelta(hours=24)) == 1800
    assert series_step_s(T0, T0 + timedelta(hours=2)) == 300
    assert series_step_s(T0, T0 + timedelta(days=30)) == 43200
    assert series_step_s(T0, T0 + timedelta(days=3650)) == 91 * 86400


async def test_usage_sums_groups_over_the_period_with_a_series(store: Store):
    await store.record_usage(
        [
            _row(T0 + timedelta(hours=1)),
            _row(T0 + timedelta(hours=2), project="Acme/web/site", status=500),
            _row(T0 + timedelta(days=2)),  # after the period
        ]
    )
    reply = await Admin(store).usage(
        UsageRequest(by=["org", "status"], from_="2026-09-01", to="2026-09-02")
    )
    assert [(g.group, g.requests, g.errors) for g in reply.groups] == [
        ({"org": "Acme", "status": "200"}, 1, 0),
        ({"org": "Acme", "status": "500"}, 1, 1),
    ]
    assert (reply.from_, reply.to) == ("2026-09-01T00:00:00+00:00", "2026-09-02T00:00:00+00:00")
    assert reply.series_step_s == 1800 and len(reply.series) == 48 and sum(reply.series) == 2


async def test_an_open_start_begins_at_the_first_request(store: Store):
    first = T0 + timedelta(hours=3, minutes=7)
    await store.record_usage([_row(first), _row(first + timedelta(days=1))])
    reply = await Admin(store).usage(UsageRequest(to="2026-09-03"))
    assert reply.from_ == "2026-09-01T03:07:00+00:00"
    assert [g.requests for g in reply.groups] == [2]


async def test_bad_groupings_and_backwards_periods_are_invalid_arguments(store: Store):
    admin = Admin(store)
    with pytest.raises(GRPCError) as e:
        await admin.usage(UsageRequest(by=["model", "colour"]))
    assert e.value.status is Status.INVALID_ARGUMENT and "'colour'" in e.value.message
    with pytest.raises(GRPCError) as e:
        await admin.usage(UsageRequest(from_="2026-09-02", to="2026-09-01"))
    assert e.value.status is Status.INVALID_ARGUMENT and "backwards" in e.value.message


async def test_the_export_streams_every_request_of_the_period_oldest_first(store: Store):
    await store.record_usage(
        [
            _row(T0 + timedelta(minutes=5), ttft_ms=None),
            _row(T0 + timedelta(minutes=1), ttft_ms=9.5),
        ]
    )
    admin = Admin(store)
    rows = [r async for r in admin.export_usage(UsageRequest(from_="2026-09-01"))]
    assert [(r.at, r.ttft_ms) for r in rows] == [
        ("2026-09-01T00:01:00+00:00", 9.5),
        ("2026-09-01T00:05:00+00:00", 0.0),
    ]
    with pytest.raises(GRPCError) as e:
        [r async for r in admin.export_usage(UsageRequest(by=["model"]))]
    assert e.value.status is Status.INVALID_ARGUMENT
