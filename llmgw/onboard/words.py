"""The words onboarding's step events are shown in, for people: a line per event, the fix under it.

``llmgw node add`` and ``node remove`` print these lines, and the console's
Add node dialog shows the same ones, so both say the same thing in the same
words. ``--json`` prints the events themselves instead (``StepEvent.line``).
"""

from __future__ import annotations

from rich.text import Text

from llmgw.onboard.events import StepEvent

# node add's steps, in order (the last event, "result", is none of them).
ADD_STEPS = ("connect", "doctor", "install", "packages", "user", "join", "register")

# Each status's mark and colour: running goes on, waiting waits on something else,
# kept found everything in place.
MARK = {
    "running": ("·", "dim"),
    "waiting": ("…", "yellow"),
    "ok": ("✓", "green"),
    "kept": ("=", "green"),
    "skipped": ("-", "dim"),
    "warn": ("!", "yellow"),
    "fail": ("✗", "bold red"),
}
# Wide enough for the longest step name, so the details line up.
STEP_WIDTH = 9


def event_rows(ev: StepEvent) -> list[tuple[Text, Text]]:
    """``ev`` as people read it, each line split in two: the mark and step, then the words.

    A step's line, then the fix under a warning or a failure. The result (the
    last event) is what onboarding did and how long it took, then the next
    step (or, after a failure, what to do about it), with nothing before them.
    """
    if ev.step == "result":
        style = "green" if ev.status == "ok" else "bold red"
        rows = [(Text(), Text(f"{ev.detail} ({ev.elapsed_s:.0f} s)", style=style))]
        if ev.fix:
            rows.append((Text(), Text(ev.fix)))
        return rows
    mark, style = MARK.get(ev.status, ("·", ""))
    what = f"{ev.item}: " if ev.item else ""
    loud = style if ev.status in ("warn", "fail") else ""
    rows = [(Text(f"{mark} {ev.step:<{STEP_WIDTH}}", style=style), Text(what + ev.detail, loud))]
    if ev.fix and ev.status in ("warn", "fail"):
        rows.append((Text(f"  {'':<{STEP_WIDTH}}"), Text(f"fix: {ev.fix}", style=style)))
    return rows


def event_lines(ev: StepEvent) -> list[Text]:
    """``ev`` as lines for a terminal (``llmgw node add``): each row's two parts joined."""
    lines = []
    for head, words in event_rows(ev):
        line = head.copy()
        if head.plain:
            line.append(" ")
        line.append_text(words)
        lines.append(line)
    return lines


def step_number(step: str) -> int:
    """``step``'s place among node add's steps, from 1 (0 for another: the result)."""
    return ADD_STEPS.index(step) + 1 if step in ADD_STEPS else 0
