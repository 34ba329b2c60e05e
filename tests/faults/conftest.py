"""Module-wide fixtures of the fault suite: one etcd and one Patroni cluster per test module.

A Patroni cluster takes seconds to make, so a module's tests share one. A
test that moves the primary leaves the cluster whole again (every member
running, replicas streaming) for the next; tests use ``loop_scope="module"``
so the fixtures' processes and the tests share one event loop.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.faults.harness import Etcd, PatroniCluster, etcd_server, patroni_cluster
from tests.faults.harness.etcd import ETCD
from tests.faults.harness.haproxy import HAPROXY
from tests.faults.harness.patroni import PATRONI, PATRONICTL
from tests.faults.harness.procs import require_binaries


@pytest.fixture(scope="module")
def ha_root() -> Iterator[Path]:
    """A folder for the module's servers: under /tmp and traversable, since Patroni runs
    as the postgres user (pytest's own temporary folders are private to root)."""
    require_binaries(ETCD, PATRONI, PATRONICTL, HAPROXY)
    root = Path(tempfile.mkdtemp(prefix="llmgw-faults-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def etcd(ha_root: Path) -> AsyncIterator[Etcd]:
    async with etcd_server(ha_root / "etcd") as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def patroni(ha_root: Path, etcd: Etcd) -> AsyncIterator[PatroniCluster]:
    """Two PostgreSQL members under Patroni, database ``llmgw`` made on the primary."""
    async with patroni_cluster(ha_root / "pg", etcd, members=2) as cluster:
        yield cluster
