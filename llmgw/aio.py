"""Running a daemon's event loop: uvloop where it is installed.

uvloop's TLS transport keeps a small read buffer per connection where the
standard library's allocates 256 KiB: at a thousand agents gatewayd held
154 MiB instead of 399 MiB, at the same CPU (benchmarks/agents.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main)
        return
    uvloop.run(main)
