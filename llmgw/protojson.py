"""Admin replies as plain JSON-able dicts: snake_case keys, every field present."""

from __future__ import annotations

from typing import Any

import betterproto2


def to_plain(message: betterproto2.Message) -> dict[str, Any]:
    """The message as a dict with snake_case keys, defaults included, ints as ints."""
    return message.to_dict(
        output_format=betterproto2.OutputFormat.PYTHON,
        casing=betterproto2.Casing.SNAKE,
        include_default_values=True,
    )
