"""A pull's progress as it runs: what the puller writes and followers read.

The rate is taken over the last few seconds, not since the start, so a pull
that stalled shows a rate falling to 0 and an ETA that stops meaning
anything (0: unknown) rather than the average of better times.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from llmgw.mirror.wire import Pull, PullState

# The window the rate is measured over.
RATE_WINDOW_S = 3.0
FINISHED: tuple[PullState, ...] = ("done", "failed")


class RateWindow:
    """Bytes per second over a sliding window of (time, bytes so far) samples."""

    def __init__(
        self, window_s: float = RATE_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, total: int) -> None:
        now = self._clock()
        self._samples.append((now, total))
        self._trim(now)

    def reset(self) -> None:
        self._samples.clear()

    def rate(self) -> float:
        now = self._clock()
        self._trim(now)
        if not self._samples:
            return 0.0
        t0, b0 = self._samples[0]
        _, last = self._samples[-1]
        span = now - t0
        return max(0.0, (last - b0) / span) if span > 0 else 0.0

    def _trim(self, now: float) -> None:
        # One sample older than the window stays as the measure's start.
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()


class PullJob:
    """One pull's state. The puller calls ``update``/``add_bytes``; followers ``snapshot``.

    Changes of state, file or counts wake followers at once; bytes alone do not
    (a download makes thousands a second): followers see them at their tick.
    """

    def __init__(
        self,
        pull_id: str,
        source: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = RATE_WINDOW_S,
    ) -> None:
        self._pull = Pull(pull_id=pull_id, source=source, started_unix=time.time())
        self._rate = RateWindow(window_s, clock)
        self._changed = asyncio.Event()
        # Counts changes: a follower that was busy when one came sees it was missed.
        self.version = 0

    @property
    def pull_id(self) -> str:
        return self._pull.pull_id

    @property
    def state(self) -> PullState:
        return self._pull.state

    @property
    def finished(self) -> bool:
        return self._pull.state in FINISHED

    def update(self, **fields) -> None:
        """Set fields of the Pull (state, repo, commit, file, totals, ...) and wake followers."""
        for name, value in fields.items():
            setattr(self._pull, name, value)
        if self.finished and not self._pull.finished_unix:
            self._pull.finished_unix = time.time()
        self._wake()

    def add_bytes(self, n: int) -> None:
        """``n`` more bytes are done (negative: a file started over)."""
        self._pull.bytes_done = max(0, self._pull.bytes_done + n)
        if n < 0:
            self._rate.reset()
        self._rate.add(self._pull.bytes_done)

    def file_done(self) -> None:
        self.update(files_done=self._pull.files_done + 1)

    def snapshot(self) -> Pull:
        """The Pull as it stands, with the rate and the time left worked out now."""
        pull = self._pull.model_copy()
        if self.finished:
            pull.rate_bytes_s, pull.eta_s = 0.0, 0.0
            return pull
        rate = self._rate.rate()
        left = max(0, pull.bytes_total - pull.bytes_done)
        pull.rate_bytes_s = rate
        pull.eta_s = left / rate if rate > 0 and left else 0.0
        return pull

    async def wait_change(self, seen_version: int, timeout_s: float) -> None:
        """Return at once if a change came after ``seen_version``; else at the next, or the timeout."""
        if self.version != seen_version:
            return
        event = self._changed
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass

    def _wake(self) -> None:
        # Every waiter holds the event it started on; a fresh one for the next change.
        self.version += 1
        event, self._changed = self._changed, asyncio.Event()
        event.set()
