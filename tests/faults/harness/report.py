"""The fault suite's table: a row per fault, as the issue asks for it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.harness.load import Outcome, failures_by_reason


@dataclass
class FaultRow:
    fault: str
    outcomes: list[Outcome]
    usage_ok: int  # usage rows of the fault's key with status 200
    changes: list[str] = field(default_factory=list)  # "cp1 → cp2 in 10.4 s (expired)"
    handover_s: float | None = None
    back_s: float | None = None  # from the fault to full service again
    two_leaders_rounds: int = 0
    note: str = ""
    t0: float = 0.0  # when the fault began (wall clock)

    @property
    def sent(self) -> int:
        return len(self.outcomes)

    @property
    def answered(self) -> int:
        return sum(o.answered for o in self.outcomes)

    @property
    def failed(self) -> Counter[str]:
        return failures_by_reason(self.outcomes)

    @property
    def missing(self) -> int:
        return max(self.answered - self.usage_ok, 0)

    @property
    def doubled(self) -> int:
        return max(self.usage_ok - self.answered, 0)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def table(rows: list[FaultRow]) -> str:
    head = (
        f"{'fault':<34} {'sent':>5} {'answered':>8} {'failed':>6} {'usage':>6} "
        f"{'missing':>7} {'doubled':>7} {'handover':>9} {'back':>7}  leader changes"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.fault:<34} {r.sent:>5} {r.answered:>8} {sum(r.failed.values()):>6} "
            f"{r.usage_ok:>6} {r.missing:>7} {r.doubled:>7} {_s(r.handover_s):>9} "
            f"{_s(r.back_s):>7}  {'; '.join(r.changes) or 'none'}"
        )
        for reason, n in sorted(r.failed.items()):
            when = ", ".join(
                f"+{o.began - r.t0:.1f}…+{o.ended - r.t0:.1f} s"
                for o in r.outcomes
                if not o.answered and failures_by_reason([o]).get(reason)
            )
            lines.append(f"{'':<4}failed {n} × {reason} (sent…ended after the fault: {when})")
        if r.note:
            lines.append(f"{'':<4}{r.note}")
    return "\n".join(lines)


def write_table(rows: list[FaultRow], path: Path) -> str:
    text = table(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return text
