"""A pool connection's release that fails after its caller is gone is one log line, not a traceback.

asyncpg releases under ``asyncio.shield``: a caller cancelled (a store timeout while
the store was frozen, in the fault suite's SIGSTOP row) leaves the release running
alone, and when its reset then fails, asyncio logged "Task exception was never
retrieved" with a traceback in gatewayd's log, as for a bug.
"""

from __future__ import annotations

import asyncio
import gc
import logging

from gatewayd.store.postgres.connect import quiet_shielded_releases


class PoolConnectionHolder:
    """Named as asyncpg's: its ``release`` is what the handler recognises."""

    async def release(self) -> None:
        raise TimeoutError


async def _orphan(coro) -> None:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0.01)
    assert task.done()
    del task
    gc.collect()
    await asyncio.sleep(0)


async def test_an_orphaned_release_that_failed_is_one_warning_and_other_errors_are_left_alone(
    caplog,
):
    loop = asyncio.get_running_loop()
    gc.collect()  # what earlier tests left for the collector goes before the handler is in
    seen: list[dict] = []

    def ours(context: dict) -> bool:
        task = context.get("future")
        coro = task.get_coro() if hasattr(task, "get_coro") else None
        return getattr(coro, "__qualname__", "").endswith(("release", "something_else"))

    loop.set_exception_handler(lambda _loop, context: ours(context) and seen.append(context))
    try:
        quiet_shielded_releases(loop)
        quiet_shielded_releases(loop)  # once is enough: not wrapped twice
        with caplog.at_level(logging.WARNING, logger="gatewayd.store.postgres.connect"):
            await _orphan(PoolConnectionHolder().release())
        assert seen == []
        assert "could not be made ready again" in caplog.text and "TimeoutError" in caplog.text

        async def something_else() -> None:
            raise ValueError("a real bug")

        await _orphan(something_else())
        assert len(seen) == 1 and isinstance(seen[0]["exception"], ValueError)
    finally:
        loop.set_exception_handler(None)
