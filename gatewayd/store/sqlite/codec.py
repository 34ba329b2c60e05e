"""How SQLite holds what it has no type for: datetimes as UTC ISO text, JSON as text."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def _to_text(dt: datetime) -> str:
    if dt.tzinfo is None:
        # A naive datetime is ambiguous (local time or UTC?); storing a guess
        # would shift every timestamp by the machine's offset.
        raise ValueError(f"datetime {dt.isoformat()} has no timezone; the store needs aware ones")
    # Microseconds always written: fixed width keeps text order equal to time order.
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def _from_text(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).astimezone(UTC)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
