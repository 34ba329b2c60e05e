"""What every console screen shares: errors on the status line, and following the Watch.

Screens do no network work in their own methods: workers call the admin
client and post past-tense messages; ``follow_watch`` is the one loop that
keeps a screen live, reopening a cut watch and re-reading what it missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from textual.message import Message
from textual.message_pump import MessagePump
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from llmgw.admin_client import AdminClient
from llmgw.errors import AdminUnauthenticated, AdminUnreachable, LlmgwError
from proto.llmgw.v1 import WatchEvent

log = logging.getLogger(__name__)

# A cut watch is reopened after 0.5 s, then 1, 2, 4 … up to 10 s: quick enough to
# ride over a gatewayd restart, slow enough not to hammer one that is down.
WATCH_RETRY_FIRST_S = 0.5
WATCH_RETRY_MAX_S = 10.0


class AdminFailed(Message):
    """An admin call failed; ``retry_in_s`` is set when a worker will try again by itself."""

    def __init__(self, error: LlmgwError, *, retry_in_s: float | None = None) -> None:
        super().__init__()
        self.error = error
        self.retry_in_s = retry_in_s


class Refused(Message):
    """gatewayd refused a change the screen asked for, or could not be asked; each screen
    names its own kind (``class CancelRefused(Refused)``) so its handler is its own."""

    def __init__(self, error: LlmgwError) -> None:
        super().__init__()
        self.error = error


class Answered(Message):
    """An admin call a screen's worker made was answered: ``reply`` is what it returned.

    One class for every screen's "loaded", "changed", "tested"…: ``action`` is the
    screen's own word for what it asked (``"load"``, ``"grant"``), so one
    ``on_answered`` handler tells the answers apart without a Message class for each.
    """

    def __init__(self, action: str, reply: object) -> None:
        super().__init__()
        self.action = action
        self.reply = reply


def describe(error: LlmgwError, retry_in_s: float | None = None) -> str:
    """An admin error as one status line: what happened, what to do, and what happens next."""
    text = error.message
    if error.hint:
        text += f" — {error.hint}"
    if retry_in_s is not None:
        text += f" (trying again in {retry_in_s:g} s)"
    return text


def show_worker_error(status: Static, event: Worker.StateChanged) -> None:
    # Workers run with exit_on_error=False so a bug in one never takes the console
    # down; without this it would also fail silently.
    if event.state is WorkerState.ERROR:
        log.error("worker %s failed", event.worker.name, exc_info=event.worker.error)
        status.update(f"internal error in {event.worker.name}: {event.worker.error!r}")
        status.set_class(True, "-error")


def _admin_failed(error: LlmgwError, retry_in_s: float | None) -> Message:
    return AdminFailed(error, retry_in_s=retry_in_s)


async def follow_watch(
    target: MessagePump,
    client: AdminClient,
    topics: list[str],
    *,
    resync: Callable[[], Awaitable[Message]],
    on_event: Callable[[WatchEvent], Awaitable[Message | None]],
    failed: Callable[[LlmgwError, float | None], Message] | None = None,
) -> None:
    """Follow the admin ``Watch`` on ``topics`` for as long as the calling worker runs.

    Each event becomes the message ``on_event`` makes, posted to ``target``.
    Each time the watch is open and following (its first, empty event),
    ``resync`` reads the whole list again: what changed before then — while the
    caller read its first list, or while the watch was cut — never arrives as
    an event. A cut watch is reopened after 0.5, 1, 2 … 10 s. A refused token ends it: the same token would be
    refused again, and r tries once it is sorted. ``failed`` makes the message
    that says so (``AdminFailed`` unless given).
    """
    say = failed or _admin_failed

    delay_s = WATCH_RETRY_FIRST_S
    while True:
        try:
            async for event in client.watch(topics, opened=True):
                delay_s = WATCH_RETRY_FIRST_S  # it works again: the next cut retries quickly
                if not event.topic:
                    # The watch follows now: a list read from here on misses no change.
                    # Also on the first open: the caller's own read came before it.
                    target.post_message(await resync())
                    continue
                message = await on_event(event)
                if message is not None:
                    target.post_message(message)
                # Events already read arrive without a pause: let a key press in between.
                await asyncio.sleep(0)
            error: LlmgwError = AdminUnreachable(
                f"gatewayd at {client.address} ended the live updates",
                hint="it may be restarting",
            )
        except AdminUnauthenticated as e:
            target.post_message(say(e, None))
            return
        except LlmgwError as e:
            error = e
        log.info("%s watch cut (%s); reopening in %s s", ",".join(topics), error, delay_s)
        target.post_message(say(error, delay_s))
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, WATCH_RETRY_MAX_S)
