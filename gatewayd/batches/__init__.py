"""OpenAI's Files and Batch APIs: files kept in the store, batches run as replicas have room.

``mount`` wires them into a started gatewayd: the routes on its gateway (on
every control plane: files' bytes and batches are the shared store's), the
batch book as ``server.batches`` (the admin RPCs read it) and the runner as
one of its background tasks (the leader's alone). See docs/batches.md.
"""

from __future__ import annotations

import asyncio
import logging

from gatewayd.batches.batches_api import BatchesApi
from gatewayd.batches.book import BatchBook
from gatewayd.batches.files_api import FilesApi
from gatewayd.batches.filestore import FileStore, import_disk_files
from gatewayd.batches.headroom import Headroom
from gatewayd.batches.runner import BatchRunner

# Under the data dir: where an earlier llmgw kept files, one per id; moved into the
# store at start.
FILES_DIR = "files"
# A failed move into the store is tried again this often.
IMPORT_RETRY_S = 5.0

log = logging.getLogger(__name__)


def mount(server) -> None:
    """Serve ``/v1/files`` and ``/v1/batches`` on ``server.gateway`` and run the batch runner (on the leader)."""
    book = server.batches = BatchBook(
        server.store, server.cfg.batches, runs_here=lambda: server.batch_runner.running
    )
    legacy = server.paths.server_data_dir / FILES_DIR
    files = FileStore(server.store, legacy_dir=legacy if legacy.is_dir() else None)
    if files.legacy_dir is not None:
        server._tasks.append(asyncio.create_task(_import(files, server.store), name="files-import"))
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
        # One runner for the cluster: the leader's (a standby's would send the same
        # requests twice; the store would refuse its commits). A new leader takes the
        # batches up from the store where the old one stopped.
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


async def _import(files: FileStore, store) -> None:
    """Move the files an earlier llmgw kept on this machine's disk into the store."""
    while True:
        try:
            await import_disk_files(store, files.legacy_dir)
            break
        except Exception as e:  # noqa: BLE001 - the store away, a file unreadable: again
            log.warning("moving files from %s into the store: %s; trying again", files.legacy_dir, e)
            await asyncio.sleep(IMPORT_RETRY_S)
    files.imported.set()
