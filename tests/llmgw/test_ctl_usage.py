"""`llmgw ctl usage`'s own reading of periods and its figures for people (no server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llmgw.catalog.price import format_micros as money
from llmgw.cli.ctl.usage import period
from llmgw.errors import UsageError
from llmgw.present.usagefmt import sparkline

NOW = datetime(2026, 9, 10, 12, 30, tzinfo=UTC)


def test_the_default_period_is_the_last_24_hours():
    assert period("", "", NOW) == ("2026-09-09T12:30:00+00:00", "2026-09-10T12:30:00+00:00")
    # Only --to: the 24 hours before it.
    assert period("", "2026-09-01", NOW) == (
        "2026-08-31T00:00:00+00:00",
        "2026-09-01T00:00:00+00:00",
    )


def test_from_takes_a_date_a_time_or_an_age():
    assert period("2026-09-01", "2026-10-01", NOW)[0] == "2026-09-01T00:00:00+00:00"
    assert period("2026-09-01T08:15", "", NOW)[0] == "2026-09-01T08:15:00+00:00"
    assert period("2026-09-01T08:15+02:00", "", NOW)[0] == "2026-09-01T06:15:00+00:00"
    assert period("7d", "", NOW)[0] == "2026-09-03T12:30:00+00:00"
    with pytest.raises(UsageError, match="--from 'yesterday' is not a date"):
        period("yesterday", "", NOW)


def test_money_and_sparklines_for_people():
    assert money(2_500_000) == "2.50" and money(1_234_567) == "1.234567" and money(0) == "0.00"
    assert sparkline([0, 1, 8, 4]) == "▁▂█▅"
    assert sparkline([0, 0]) == "▁▁" and sparkline([]) == ""
