"""etcd for the fault suite: deploy/etcd/etcd.conf.yml, one member on loopback ports."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.faults.harness.deploy_files import load_yaml, write_yaml
from tests.faults.harness.procs import (
    HarnessError,
    Proc,
    free_port,
    require_binaries,
    wait_until,
)

ETCD = "/usr/bin/etcd"
READY_TIMEOUT_S = 30.0


@dataclass
class Etcd:
    """A running etcd: ``hosts`` is what Patroni's etcd3 section takes."""

    proc: Proc
    client_port: int
    config_path: Path

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"http://{self.hosts}"

    async def healthy(self) -> bool:
        async with httpx.AsyncClient(timeout=2.0) as client:
            r = await client.get(f"{self.url}/health")
        return r.status_code == 200 and r.json().get("health") == "true"


def render_etcd_config(root: Path, client_port: int, peer_port: int) -> Path:
    """deploy/etcd/etcd.conf.yml with one member on loopback, data under ``root``."""
    doc = load_yaml("etcd/etcd.conf.yml")
    name = doc["name"]
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    doc |= {
        "data-dir": str(root / "data"),
        "listen-client-urls": client,
        "advertise-client-urls": client,
        "listen-peer-urls": peer,
        "initial-advertise-peer-urls": peer,
        "initial-cluster": f"{name}={peer}",
    }
    return write_yaml(root / "etcd.conf.yml", doc)


@contextlib.asynccontextmanager
async def etcd_server(root: Path) -> AsyncIterator[Etcd]:
    """Start etcd under ``root`` (a fresh folder), yield it once healthy, stop and remove it."""
    require_binaries(ETCD)
    root.mkdir(parents=True, exist_ok=True)
    client_port, peer_port = free_port(), free_port()
    config = render_etcd_config(root, client_port, peer_port)
    proc = Proc("etcd", [ETCD, "--config-file", str(config)], root / "etcd.log")
    await proc.start()
    etcd = Etcd(proc, client_port, config)
    try:

        async def up() -> bool:
            if not proc.running:
                raise HarnessError(f"etcd exited:\n{proc.log_tail()}")
            return await etcd.healthy()

        await wait_until(up, timeout_s=READY_TIMEOUT_S, what="etcd answering /health")
        yield etcd
    finally:
        await proc.stop()
        shutil.rmtree(root / "data", ignore_errors=True)
