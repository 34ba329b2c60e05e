"""A node fetching from two real mirror daemons, the first stopped while it sends the file.

The mirrors (mirrord, as ``llmgw mirror serve`` runs it) hold the same
revision; the node's progress sees the first mirror's bytes arrive, the
first mirror is stopped then (its connections cut mid-body), and the rest
must come from the second from the byte reached: progress never goes back,
as it would on a 200 that starts the file over.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets

from agentd.weights import WeightsFetcher
from agentd.weights.download import partial_path
from llmgw.mirror.config import MirrorServeConfig
from llmgw.paths import Paths
from mirrord.daemon import MirrorDaemon
from tests.mirrord.conftest import RunningMirror

# Far more than loopback's socket buffers hold: most of it is still to come when the cut lands.
WEIGHTS = b"GGUF" + os.urandom((48 << 20) - 4)
WEIGHTS_SHA = hashlib.sha256(WEIGHTS).hexdigest()


@contextlib.asynccontextmanager
async def two_mirrors(tmp_path):
    """Two mirror daemons on 127.0.0.1:0 taking one read token, as a cluster's mirrors do."""
    read_token = secrets.token_urlsafe(24)
    started: list[RunningMirror] = []
    try:
        for n in range(2):
            home = tmp_path / f"mirror{n}"
            cfg = MirrorServeConfig(listen="127.0.0.1:0", upstream="", data_dir=str(home / "data"))
            admin = secrets.token_urlsafe(24)
            daemon = MirrorDaemon(cfg, Paths.under(home), read_token=read_token, admin_token=admin)
            await daemon.start()
            started.append(RunningMirror(daemon, home, read_token, admin))
        yield started
    finally:
        for m in reversed(started):
            await m.daemon.stop()


async def test_a_node_finishes_a_file_from_the_second_real_mirror_when_the_first_stops(tmp_path):
    async with two_mirrors(tmp_path) as (first, second):
        await _fetch_across(tmp_path, first, second)


async def _fetch_across(tmp_path, first: RunningMirror, second: RunningMirror) -> None:
    revs = [m.put_model("org/gguf", {"model.gguf": WEIGHTS}) for m in (first, second)]
    assert revs[0].commit == revs[1].commit
    commit = revs[0].commit
    fetcher = WeightsFetcher(
        tmp_path / "weights", hf_base_url="http://127.0.0.1:9", retries=0, progress_every_s=0.0
    )
    dest = tmp_path / "weights" / "gemma" / "model.gguf"
    seen: list[int] = []
    switched_at: list[int] = []
    stopping: list[asyncio.Task] = []

    def progress(done: int, total: int) -> None:
        seen.append(done)
        if 0 < done < total and not stopping:
            stopping.append(asyncio.create_task(first.daemon.server.close()))

    def origin(label: str) -> None:
        if label == f"mirror 127.0.0.1:{second.port}":
            switched_at.append(partial_path(dest).stat().st_size)

    got = await fetcher.ensure(
        "gemma",
        f"hf:org/gguf@{commit}:model.gguf",
        sha256=WEIGHTS_SHA,
        mirror_urls=[first.url, second.url],
        mirror_token=first.read_token,
        on_progress=progress,
        on_origin=origin,
    )
    await asyncio.gather(*stopping)

    assert got.path.read_bytes() == WEIGHTS and got.sha256 == WEIGHTS_SHA
    (at,) = switched_at
    assert 0 < at < len(WEIGHTS), "the first mirror was stopped mid-file"
    assert seen == sorted(seen), "the second mirror went on from the byte reached (206)"
    assert at in seen
