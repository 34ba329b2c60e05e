"""Pulls running in the background: started at once, followed, listed when finished.

``start`` checks the request and answers with the pull at once (the
management API's 202); the pull runs as a task of its own. The same thing
asked again while it is pulled is that pull, not a second one writing the same
partial files. A pull that failed leaves its partial files in incoming/: the
same add again resumes from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from llmgw.mirror.wire import ErrorDetail, Pull, PullRequest, Revision
from mirrord.pull.errors import PullError, code_of
from mirrord.pull.progress import PullJob
from mirrord.pull.puller import Puller, pull_key

log = logging.getLogger(__name__)

# Finished pulls kept for list() and get(): the last this many.
KEEP_FINISHED = 50
# A follower hears at least this often while a pull runs.
FOLLOW_TICK_S = 0.5


class PullJobs:
    """The pulls of one mirror, running and finished."""

    def __init__(
        self,
        store,
        puller: Puller,
        *,
        keep: int = KEEP_FINISHED,
        on_done: Callable[[Revision], None] | None = None,
    ) -> None:
        self.store = store
        self.puller = puller
        self.keep = keep
        # Told of every revision a pull put (the peers sync at once).
        self.on_done = on_done
        self._jobs: OrderedDict[str, PullJob] = OrderedDict()
        self._running: dict[str, tuple[PullJob, asyncio.Task]] = {}

    def start(
        self,
        req: PullRequest,
        *,
        refs: list[str] | None = None,
        added_unix: float | None = None,
    ) -> Pull:
        """The pull of ``req``: a new one, or the one already pulling the same thing.

        ``refs`` and ``added_unix`` are a peer's, for a revision it holds: kept as they are.
        """
        key = pull_key(req)  # refuses what cannot be pulled before any task starts
        if key in self._running:
            return self._running[key][0].snapshot()
        job = PullJob(secrets.token_hex(6), req.source)
        self._jobs[job.pull_id] = job
        run = self._run(key, job, req, refs, added_unix)
        task = asyncio.create_task(run, name=f"pull {job.pull_id}")
        self._running[key] = (job, task)
        return job.snapshot()

    def get(self, pull_id: str) -> Pull | None:
        job = self._jobs.get(pull_id)
        return job.snapshot() if job else None

    def list(self) -> list[Pull]:
        """Running pulls first, then finished ones, newest first."""
        pulls = [j.snapshot() for j in reversed(self._jobs.values())]
        return sorted(pulls, key=lambda p: p.state in ("done", "failed"))

    async def follow(self, pull_id: str) -> AsyncIterator[Pull]:
        """The pull at each change and at least every 0.5 s; the last one is done or failed."""
        job = self._jobs.get(pull_id)
        if job is None:
            raise PullError(
                f"no pull {pull_id!r} on this mirror",
                hint="see the pulls with: llmgw ctl mirror pulls",
                code="not_found",
            )
        while True:
            seen = job.version
            yield job.snapshot()
            if job.finished:
                return
            await job.wait_change(seen, FOLLOW_TICK_S)

    async def wait(self, pull_id: str) -> Pull:
        """The pull once it has finished."""
        last = None
        async for last in self.follow(pull_id):
            pass
        assert last is not None  # follow yields at least once
        return last

    async def close(self) -> None:
        """Stop the running pulls (their partial files stay for the next add)."""
        tasks = [t for _, t in self._running.values()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _run(self, key: str, job: PullJob, req: PullRequest, refs, added_unix) -> None:
        try:
            if refs is None and added_unix is None:
                rev = await self.puller.pull(req, job)
            else:
                rev = await self.puller.pull(req, job, refs=refs, added_unix=added_unix)
        except asyncio.CancelledError:
            job.update(
                state="failed",
                error=ErrorDetail(
                    code="unavailable",
                    message="the mirror stopped during the pull",
                    hint="add it again: it resumes from the bytes held",
                ),
            )
            raise
        except Exception as e:  # every failure is the pull's answer, not the mirror's end
            if code_of(e) == "internal" and not isinstance(e, PullError):
                log.exception("pull %s of %s failed", job.pull_id, req.source)
            else:
                log.info("pull %s of %s failed: %s", job.pull_id, req.source, e)
            job.update(
                state="failed",
                file="",
                error=ErrorDetail(
                    code=code_of(e),
                    message=str(e) or type(e).__name__,
                    hint=getattr(e, "hint", "") or "",
                ),
            )
        else:
            job.update(state="done", file="")
            if self.on_done is not None:
                try:
                    self.on_done(rev)
                except Exception:
                    log.exception("telling of %s@%s failed", rev.repo, rev.commit[:12])
        finally:
            self._running.pop(key, None)
            self._trim()

    def _trim(self) -> None:
        finished = [i for i, j in self._jobs.items() if j.finished]
        for pull_id in finished[: max(0, len(finished) - self.keep)]:
            del self._jobs[pull_id]
