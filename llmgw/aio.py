"""Running a daemon's event loop: uvloop where it is installed.

uvloop's TLS transport keeps a small read buffer per connection where the
standard library's allocates 256 KiB: at a thousand agents gatewayd held
154 MiB instead of 399 MiB, at the same CPU (benchmarks/agents.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main)
        return
    uvloop.run(main)


async def within(aw: Awaitable[T], seconds: float | None) -> T:
    """What ``aw`` gives, or TimeoutError once ``seconds`` have passed (None: no limit).

    ``asyncio.wait_for`` in Python 3.11 swallows a cancel that arrives just as
    the awaited call finishes: a loop told to stop goes on, and whoever waits
    for it waits for ever. ``asyncio.timeout`` has no such gap.
    """
    async with asyncio.timeout(seconds):
        return await aw
