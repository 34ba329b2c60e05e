"""Usage rows and their sums in the store, on SQLite and on a real PostgreSQL alike.

What matters most: a question over any period gets exactly the totals of
the rows in it, however the period falls across 5-minute, hourly and daily
buckets.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store import Store, UsageRecord, usage_query

T0 = datetime(2025, 3, 1, tzinfo=UTC)
SUMMED = (
    "requests",
    "errors",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cost_micros",
    "ttft_count",
)


def _row(at: datetime, **changes) -> UsageRow:
    fields = {
        "key_id": "key_a",
        "project": "Acme/ml/search",
        "model": "chat",
        "served_model": "chat",
        "replica": "chat-r1",
        "prompt_tokens": 100,
        "cached_tokens": 20,
        "completion_tokens": 30,
        "cost_micros": 1234,
        "latency_ms": 250.0,
        "ttft_ms": 40.0,
        "status": 200,
        "profile": "chat",
    }
    fields.update(changes)
    return UsageRow(at=at, **fields)


def _value(dim: str, r: UsageRow) -> str:
    parts = r.project.split("/")
    return {
        "project": r.project,
        "team": "/".join(parts[:2]),
        "org": parts[0],
        "key": r.key_id,
        "model": r.model,
        "served_model": r.served_model,
        "replica": r.replica,
        "status": str(r.status),
    }[dim]


def _expected(rows, by, start, end) -> dict[tuple, dict]:
    """What summing the rows themselves gives, per group."""
    out: dict[tuple, dict] = {}
    for r in rows:
        if not start <= r.at < end:
            continue
        acc = out.setdefault(
            tuple(_value(d, r) for d in by), dict.fromkeys(SUMMED, 0) | {"latency": 0.0}
        )
        acc["requests"] += 1
        acc["errors"] += r.status >= 400
        acc["prompt_tokens"] += r.prompt_tokens
        acc["cached_tokens"] += r.cached_tokens
        acc["completion_tokens"] += r.completion_tokens
        acc["cost_micros"] += r.cost_micros
        acc["ttft_count"] += r.ttft_ms is not None
        acc["latency"] += r.latency_ms
    return out


def _got(groups, by) -> dict[tuple, dict]:
    return {
        tuple(g.group[d] for d in by): {c: getattr(g, c) for c in SUMMED}
        | {"latency": g.latency_ms_sum}
        for g in groups
    }


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert {c: got[k][c] for c in SUMMED} == {c: want[k][c] for c in SUMMED}, k
        assert got[k]["latency"] == pytest.approx(want[k]["latency"])


async def test_rows_are_kept_without_any_text_and_read_back_in_time_order(store: Store):
    late = _row(T0 + timedelta(minutes=7), ttft_ms=None, status=502, replica="gpu-api")
    early = _row(T0 + timedelta(minutes=1, microseconds=5))
    await store.record_usage([late, early])

    got = [r async for r in store.usage_rows(T0, T0 + timedelta(hours=1))]

    assert got == [
        UsageRecord(**{f: getattr(r, f) for f in usage_query.ROW_COLUMNS}) for r in (early, late)
    ]
    assert got[1].ttft_ms is None and got[0].at.tzinfo is not None


async def test_sums_across_bucket_edges_equal_the_sums_of_the_rows(store: Store):
    # Every 7 minutes 13 seconds for two and a half days: rows on both sides
    # of every kind of boundary, with a mix of projects, statuses and TTFTs.
    rows = [
        _row(
            T0 + timedelta(seconds=433 * i, microseconds=i),
            project=["Acme/ml/search", "Acme/ml/chat", "Acme/web/site", "Beta/x/y"][i % 4],
            status=[200, 200, 429, 500, 200][i % 5],
            ttft_ms=None if i % 3 == 0 else float(i % 50),
            latency_ms=0.5 + i,
            key_id=f"key_{i % 3}",
        )
        for i in range(500)
    ]
    await store.record_usage(rows[:300])
    await store.record_usage(rows[300:])  # a second batch adds to the same sums

    edges = [
        (T0, T0 + timedelta(days=3)),
        (T0 + timedelta(hours=3, seconds=1), T0 + timedelta(days=2, hours=1, minutes=2)),
        (T0 + timedelta(minutes=4, seconds=59), T0 + timedelta(minutes=5, seconds=1)),
        (T0 + timedelta(hours=23, minutes=59), T0 + timedelta(days=1, minutes=11)),
        (T0 + timedelta(days=1), T0 + timedelta(days=2)),
    ]
    for start, end in edges:
        for by in ([], ["project"], ["org", "status"], ["team", "key"], ["status"]):
            groups = await store.usage_groups(by, start, end)
            _same(_got(groups, by), _expected(rows, by, start, end))


async def test_groups_come_with_averages_and_most_requests_first(store: Store):
    await store.record_usage(
        [
            _row(T0, model="a", latency_ms=100.0, ttft_ms=10.0),
            _row(T0, model="b", latency_ms=300.0, ttft_ms=None, status=500),
            _row(T0, model="b", latency_ms=100.0, ttft_ms=30.0),
        ]
    )
    b, a = await store.usage_groups(["model"], T0, T0 + timedelta(minutes=1))
    assert (b.group, b.requests, b.errors) == ({"model": "b"}, 2, 1)
    assert b.latency_ms_avg == 200.0 and b.ttft_ms_avg == 30.0
    assert (a.group, a.ttft_ms_avg) == ({"model": "a"}, 10.0)


async def test_a_project_filter_takes_the_path_and_everything_beneath_it(store: Store):
    await store.record_usage(
        [
            _row(T0, project="Acme/ml/search"),
            _row(T0, project="Acme/ml/chat"),
            _row(T0, project="Acme/mlops/x"),
            _row(T0, project="Acme_ml/x/y"),
            _row(T0, project="Other/ml/search", key_id="key_b"),
        ]
    )
    end = T0 + timedelta(days=1)

    def requests(groups):
        return {g.group["project"]: g.requests for g in groups}

    assert requests(await store.usage_groups(["project"], T0, end, project="Acme/ml")) == {
        "Acme/ml/search": 1,
        "Acme/ml/chat": 1,
    }
    assert requests(await store.usage_groups(["project"], T0, end, project="Acme/ml/chat")) == {
        "Acme/ml/chat": 1
    }
    (only,) = await store.usage_groups(["key"], T0, end, key_id="key_b")
    assert (only.group, only.requests) == ({"key": "key_b"}, 1)
    rows = [r async for r in store.usage_rows(T0, end, project="Acme")]
    assert sorted(r.project for r in rows) == ["Acme/ml/chat", "Acme/ml/search", "Acme/mlops/x"]


async def test_an_empty_period_or_an_unknown_dimension(store: Store):
    await store.record_usage([_row(T0)])
    assert await store.usage_groups([], T0, T0) == []
    assert await store.usage_groups(["model"], T0 + timedelta(days=1), T0 + timedelta(days=2)) == []
    with pytest.raises(ValueError, match="'colour'"):
        await store.usage_groups(["colour"], T0, T0 + timedelta(days=1))


async def test_the_series_counts_requests_per_window_on_the_steps_grid(store: Store):
    at = [T0 + timedelta(minutes=m, seconds=10) for m in (0, 1, 29, 30, 31, 64, 95, 119)]
    await store.record_usage([_row(t) for t in at])
    start = T0 + timedelta(minutes=1)  # the first window is partial: [00:01, 00:30)
    end = T0 + timedelta(minutes=119, seconds=30)  # and the last: [01:30, 01:59:30)

    series = await store.usage_series(start, end, 1800)

    assert series == [2, 2, 1, 2]
    assert sum(series) == sum(1 for t in at if start <= t < end)
    assert await store.usage_series(T0, T0 + timedelta(days=1), 86400) == [8]


async def test_the_first_request_is_found_per_project(store: Store):
    assert await store.usage_first_at() is None
    first = T0 + timedelta(hours=5, microseconds=3)
    await store.record_usage(
        [
            _row(first + timedelta(days=1)),
            _row(first, project="Beta/a/b"),
            _row(first + timedelta(hours=1)),
        ]
    )
    assert await store.usage_first_at() == first
    assert await store.usage_first_at(project="Acme") == first + timedelta(hours=1)
    assert await store.usage_first_at(project="Nobody") is None


async def test_an_export_pages_through_rows_that_share_a_time(store: Store, monkeypatch):
    # Regression guard: paging by time alone would skip or repeat rows that
    # share the time a page ends on.
    monkeypatch.setattr(usage_query, "EXPORT_PAGE_ROWS", 3)
    rows = [_row(T0 + timedelta(seconds=i // 4), cost_micros=i) for i in range(14)]
    await store.record_usage(rows)
    got = [r.cost_micros async for r in store.usage_rows(T0, T0 + timedelta(minutes=1))]
    assert got == list(range(14))


_example = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    offsets=st.lists(
        st.tuples(
            st.integers(0, 3 * 86400 * 10**6),  # microseconds after T0
            st.sampled_from(["t1/p1", "t1/p2", "t2/p1"]),
            st.sampled_from([200, 400, 503]),
            st.one_of(st.none(), st.floats(0, 5000, allow_nan=False)),
        ),
        max_size=25,
    ),
    a=st.integers(0, 3 * 86400 * 10**6),
    b=st.integers(0, 3 * 86400 * 10**6),
    by=st.lists(st.sampled_from(["project", "team", "org", "status", "model"]), unique=True),
)
async def test_any_period_sums_to_exactly_its_rows(store: Store, offsets, a, b, by):
    # Each example writes under an org of its own and asks only about it,
    # so examples sharing the store do not see each other's rows.
    org = f"org{next(_example)}"
    rows = [
        _row(
            T0 + timedelta(microseconds=us),
            project=f"{org}/{path}",
            status=status,
            ttft_ms=ttft,
            prompt_tokens=us % 997,
        )
        for us, path, status, ttft in offsets
    ]
    await store.record_usage(rows)
    start, end = T0 + timedelta(microseconds=min(a, b)), T0 + timedelta(microseconds=max(a, b))

    groups = await store.usage_groups(by, start, end, project=org)

    _same(_got(groups, by), _expected(rows, by, start, end))
