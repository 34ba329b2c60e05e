"""OpenAI's Files and Batch APIs: uploads kept under the data dir, batches run as replicas have room."""

from __future__ import annotations


def mount(server) -> None:
    """Serve ``/v1/files`` and ``/v1/batches`` on ``server.gateway`` and start the batch runner."""
