"""Bars drawn in text: memory in use, a drain's progress, a download's.

Plain rich ``Text``, so a bar sits inside a line beside its figures and is
redrawn with that line; the colours are named ones the theme maps, so they
read on a dark terminal and a light one.
"""

from __future__ import annotations

from rich.text import Text

FULL, EMPTY = "█", "░"


def bar(done: float, total: float, width: int = 10, *, style: str = "") -> Text:
    """``width`` cells filled in proportion to ``done``/``total`` (empty when total is 0).

    Without a ``style``, memory colours: green, yellow past 75 %, red past 90 %.
    """
    share = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
    filled = round(share * width)
    if share > 0 and filled == 0:
        filled = 1  # something in use never reads as nothing
    if not style:
        style = "red" if share > 0.9 else "yellow" if share > 0.75 else "green"
    return Text.assemble((FULL * filled, style), (EMPTY * (width - filled), "dim"))


def gib(n: int) -> str:
    """Bytes as GiB, one decimal under 10 GiB ("1.5", "80")."""
    value = n / 2**30
    if value == 0:
        return "0"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def memory_bar(used_bytes: int, total_bytes: int, width: int = 10) -> Text:
    """A memory bar with its figures: "████░░░░░░ 32/80 GiB"."""
    line = bar(used_bytes, total_bytes, width)
    line.append(f" {gib(used_bytes)}/{gib(total_bytes)} GiB")
    return line


def progress(done: int, total: int, width: int = 10, *, unit: str = "") -> Text:
    """A progress bar with "done of total" after it: "███░░ 3 of 5 moved"."""
    line = bar(done, total, width, style="cyan")
    line.append(f" {done} of {total}{' ' + unit if unit else ''}")
    return line
