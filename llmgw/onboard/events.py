"""What onboarding reports: one ``StepEvent`` per step's progress, and the failure type.

``llmgw node add --json`` prints each event as one line of JSON (NDJSON); the
console's Add node dialog shows the same events. Step names are stable:
``connect``, ``doctor``, ``install``, ``packages``, ``join``, ``register``
(``node remove``: ``connect``, ``drain``, ``stop``, ``revoke``, ``forget``),
and the last event is ``result``.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from llmgw.errors import ExitCode, LlmgwError

# running: the step goes on (progress); waiting: it waits on something else
# (another apt-get); ok/warn/fail: how the step, or one check in it, ended;
# kept: the step found everything in place and changed nothing.
StepStatus = Literal["running", "waiting", "ok", "warn", "fail", "kept", "skipped"]


class StepEvent(BaseModel):
    """One line of onboarding's progress."""

    step: str
    status: StepStatus
    detail: str = ""
    # The next step in plain words when something is wrong; "" otherwise.
    fix: str = ""
    # Seconds since this step began (for "result": since onboarding began).
    elapsed_s: float = 0.0
    # A check's name, a package's, … when the event is about one thing of the step.
    item: str = ""
    # Only on the last event: what onboarding did, for scripts.
    result: dict[str, Any] | None = Field(default=None)

    def line(self) -> str:
        """The event as one NDJSON line (no result key until the end)."""
        return self.model_dump_json(exclude_none=True)


def result_event(
    status: str, detail: str, fix: str, total: Clock, code: ExitCode, **fields: Any
) -> StepEvent:
    """The last event of ``node add`` or ``node remove``: how it ended, for scripts too."""
    return StepEvent(
        step="result",
        status=status,  # type: ignore[arg-type]
        detail=detail,
        fix=fix,
        elapsed_s=total.elapsed(),
        result={"ok": status == "ok", "exit_code": int(code), **fields},
    )


class OnboardError(LlmgwError):
    """A step failed: ``message`` says what, ``hint`` what to do about it."""

    exit_code = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str = "", exit_code: ExitCode | None = None):
        super().__init__(message, hint=hint)
        if exit_code is not None:
            self.exit_code = exit_code


class Clock:
    """Seconds since something began, rounded for people and scripts alike."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 3)
