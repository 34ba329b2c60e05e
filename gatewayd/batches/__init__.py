"""OpenAI's Files and Batch APIs: uploads kept under the data dir, batches run as replicas have room.

``mount`` wires them into a started gatewayd: the routes on its gateway, the
batch book as ``server.batches`` (the admin RPCs read it) and the runner as
one of its background tasks.
"""

from __future__ import annotations

import asyncio

from gatewayd.batches.batches_api import BatchesApi
from gatewayd.batches.book import BatchBook
from gatewayd.batches.files_api import FilesApi
from gatewayd.batches.filestore import FileStore
from gatewayd.batches.headroom import Headroom
from gatewayd.batches.runner import BatchRunner

# Under the data dir: one file per id (uploads, and batches' output and error files).
FILES_DIR = "files"


def mount(server) -> None:
    """Serve ``/v1/files`` and ``/v1/batches`` on ``server.gateway`` and run the batch runner (on the leader)."""
    book = server.batches = BatchBook(server.store)
    files = FileStore(server.paths.server_data_dir / FILES_DIR)
    server.gateway.add_route("/v1/files", FilesApi(server.store, files, server.cfg.files).handle)
    server.gateway.add_route("/v1/batches", BatchesApi(book).handle)
    server.batch_headroom = Headroom(
        server.cfg.batches.headroom_sigmas, server.gateway.clients_in_flight
    )
    runner = server.batch_runner = BatchRunner(
        book,
        files,
        server.store,
        server.gateway,
        server.keys,
        server.cfg.batches,
        server.cfg.files,
        room=lambda model: _room(server, model),
    )
    roles = getattr(server, "roles", None)
    if roles is not None:
        # One runner for the cluster: the leader's (a standby's would run the same
        # batches twice, and their files are kept under the leader's data dir).
        roles.leader_only("batches", runner.run)
    else:
        server._tasks.append(asyncio.create_task(runner.run(), name="batches"))


def _room(server, model: str) -> int | None:
    """Slots of ``model``'s ready replicas that no request holds or waits for (None: the
    model's requests are not held back, e.g. an outside provider's)."""
    capacity = server._capacity(model)
    if capacity <= 0:
        return None
    return capacity - server.gateway.bands.held(model) - server.batch_headroom.margin(model)
