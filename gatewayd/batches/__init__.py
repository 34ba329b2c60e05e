"""OpenAI's Files and Batch APIs: uploads kept under the data dir, batches run as replicas have room."""

from __future__ import annotations

import asyncio

from gatewayd.batches.book import BatchBook


def mount(server) -> None:
    """Serve ``/v1/files`` and ``/v1/batches`` on ``server.gateway`` and start the batch runner."""
    book = server.batches = BatchBook(server.store)
    server._tasks.append(asyncio.create_task(book.load(), name="batches"))
