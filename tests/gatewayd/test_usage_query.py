"""How a period is cut into sums and raw rows, and how a batch becomes sums (no database)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store.usage_query import (
    RAW,
    batch_sums,
    ceil_to,
    check_dimensions,
    cover,
    floor_to,
    series_windows,
)

T0 = datetime(2025, 3, 1, tzinfo=UTC)
WIDTHS = {86400, 3600, 300}

# Microsecond times over ~5 days: enough to cross days, hours and 5-minute marks.
times = st.integers(min_value=0, max_value=5 * 86400 * 10**6).map(
    lambda us: T0 + timedelta(microseconds=us)
)


def test_a_whole_day_is_read_from_one_daily_sum():
    assert [(s.width_s, s.start, s.end) for s in cover(T0, T0 + timedelta(days=1))] == [
        (86400, T0, T0 + timedelta(days=1))
    ]


def test_ragged_edges_use_finer_sums_and_only_the_sub_five_minute_bits_raw_rows():
    start = T0 + timedelta(hours=22, minutes=57, seconds=30)
    end = T0 + timedelta(days=2, hours=1, minutes=12, seconds=5)
    got = [
        (s.width_s, s.start.strftime("%d %H:%M:%S"), s.end.strftime("%d %H:%M:%S"))
        for s in cover(start, end)
    ]
    assert got == [
        (RAW, "01 22:57:30", "01 23:00:00"),
        (3600, "01 23:00:00", "02 00:00:00"),
        (86400, "02 00:00:00", "03 00:00:00"),
        (3600, "03 00:00:00", "03 01:00:00"),
        (300, "03 01:00:00", "03 01:10:00"),
        (RAW, "03 01:10:00", "03 01:12:05"),
    ]


@given(times, times)
def test_the_segments_cover_the_period_exactly_once_with_aligned_sums(a, b):
    start, end = min(a, b), max(a, b)
    segments = cover(start, end)
    if start == end:
        assert segments == []
        return
    assert segments[0].start == start and segments[-1].end == end
    for prev, nxt in itertools.pairwise(segments):
        assert prev.end == nxt.start
    for s in segments:
        assert s.start < s.end
        if s.width_s != RAW:
            assert s.width_s in WIDTHS
            assert floor_to(s.start, s.width_s) == s.start == ceil_to(s.start, s.width_s)
            assert floor_to(s.end, s.width_s) == s.end
        else:
            # Raw rows are only read where no whole 5-minute bucket fits.
            assert ceil_to(s.start, 300) + timedelta(minutes=5) > s.end
    assert sum(1 for s in segments if s.width_s == RAW) <= 2


@given(times, times, st.sampled_from([300, 900, 1800, 3600, 7200, 86400, 7 * 86400]))
def test_series_windows_are_cut_on_the_steps_grid(a, b, step_s):
    start, end = min(a, b), max(a, b)
    windows = series_windows(start, end, step_s)
    if start == end:
        assert windows == []
        return
    assert windows[0][0] == start and windows[-1][1] == end
    step = timedelta(seconds=step_s)
    for i, (lo, hi) in enumerate(windows):
        assert lo < hi <= lo + step
        assert floor_to(lo, step_s) == floor_to(hi - timedelta(microseconds=1), step_s)
        if 0 < i < len(windows) - 1:
            assert hi - lo == step


def test_a_series_step_off_the_five_minute_grid_is_refused():
    with pytest.raises(ValueError, match="multiple of 300"):
        series_windows(T0, T0 + timedelta(hours=1), 90)


def test_a_batch_becomes_one_sum_per_bucket_width_and_key():
    at = T0 + timedelta(hours=5, minutes=3)
    rows = [
        UsageRow(key_id="k", project="A/b/c", model="m", status=200, prompt_tokens=3, at=at),
        UsageRow(key_id="k", project="A/b/c", model="m", status=200, ttft_ms=5.0, at=at),
        UsageRow(key_id="k", project="A/b/c", model="m", status=503, latency_ms=2.5, at=at),
    ]
    # (width, start, key, project id, project, model, served, replica, status, *sums)
    sums = {(s[0], s[8]): s[9:] for s in batch_sums(rows)}
    assert set(sums) == {(w, st_) for w in WIDTHS for st_ in (200, 503)}
    for w in WIDTHS:
        assert sums[(w, 200)] == (2, 0, 3, 0, 0, 0, 0.0, 5.0, 1)
        assert sums[(w, 503)] == (1, 1, 0, 0, 0, 0, 2.5, 0.0, 0)
    # Sorted by key: concurrent writers lock sum rows in the same order.
    assert batch_sums(rows) == sorted(batch_sums(rows), key=lambda s: s[:9])


def test_unknown_dimensions_are_named_and_the_known_ones_listed():
    assert check_dimensions(["model", " org ", "model", ""]) == ["model", "org"]
    with pytest.raises(ValueError, match=r"'colour'.*use any of project, team, org, key"):
        check_dimensions(["model", "colour"])
