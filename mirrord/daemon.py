"""MirrorDaemon: one mirror — its store, pulls, uploads, peers and server — started and stopped.

    d = MirrorDaemon(cfg, paths, read_token=…, admin_token=…)
    await d.start()          # bound: d.url answers
    …
    await d.stop()

The tokens are given, not read here (mirrord.main reads their files), so tests
make a daemon with tokens of their own. The config is served as it is given:
``llmgw mirror serve`` hands over mirror.yaml with the machine's TLS files
filled in (mirrord.main.serving_config), so a mirror serves HTTPS unless told
plain_http; a config naming no certificate, as tests give, serves HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from pathlib import Path
from typing import Self

import llmgw
from llmgw.config import split_host_port
from llmgw.mirror.config import MirrorServeConfig
from llmgw.paths import Paths
from mirrord.api.app import MirrorApp
from mirrord.api.context import MirrorContext
from mirrord.http.auth import Auth
from mirrord.http.server import HttpServer
from mirrord.peers import PeerSync
from mirrord.pull import Puller, PullJobs, Uploads
from mirrord.store import MirrorStore

log = logging.getLogger(__name__)


def data_dir_of(cfg: MirrorServeConfig, paths: Paths) -> Path:
    return Path(cfg.data_dir) if cfg.data_dir else paths.mirror_data_dir


def ssl_context_of(cfg: MirrorServeConfig) -> ssl.SSLContext | None:
    """HTTPS when the config names a certificate; client certificates read with client_ca."""
    if not cfg.tls.cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cfg.tls.cert, cfg.tls.key)
    if cfg.tls.client_ca:
        ctx.load_verify_locations(cafile=cfg.tls.client_ca)
        # Optional: a client without a certificate still reads with the read token.
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class MirrorDaemon:
    def __init__(
        self,
        cfg: MirrorServeConfig,
        paths: Paths,
        *,
        read_token: str,
        admin_token: str,
        upstream_token: str = "",
        peer_token: str = "",
    ) -> None:
        self.cfg = cfg
        self.paths = paths
        self.data_dir = data_dir_of(cfg, paths)
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.store = MirrorStore(self.data_dir, max_bytes=cfg.max_bytes)
        self.puller = Puller(self.store, upstream=cfg.upstream, upstream_token=upstream_token)
        self.peers = PeerSync(
            self.store,
            None,
            peers=list(cfg.peers),
            token=peer_token or read_token,
            interval_s=cfg.sync_interval_s,
            data_dir=self.data_dir,
            tls=cfg.tls,
        )
        self.jobs = PullJobs(self.store, self.puller, on_done=lambda rev: self.peers.notify())
        self.uploads = Uploads(self.store)
        self.auth = Auth(read_token, admin_token)
        self.ctx = MirrorContext(
            store=self.store,
            auth=self.auth,
            version=llmgw.__version__,
            upstream=cfg.upstream,
            jobs=self.jobs,
            uploads=self.uploads,
            peers=self.peers,
        )
        self.app = MirrorApp(self.ctx)
        host, port = split_host_port(cfg.listen)
        self.server = HttpServer(self.app, host, port, ssl_context=ssl_context_of(cfg))
        self._sync_task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        """Where this machine reaches the mirror (a wildcard listen is reached on loopback)."""
        host = self.server.host
        if host in ("0.0.0.0", "", "*"):
            host = "127.0.0.1"
        elif host == "::":
            host = "[::1]"
        elif ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.server.ssl_context else "http"
        return f"{scheme}://{host}:{self.server.port}"

    async def start(self) -> None:
        """Collect what no revision refers to, bind, and start syncing with the peers."""
        freed = await asyncio.to_thread(self.store.gc)
        if freed:
            log.info("collected %d bytes no revision refers to", freed)
        await self.server.start()
        self._sync_task = asyncio.create_task(self.peers.run(), name="mirror peer sync")
        log.info(
            "mirror %s serving %s at %s (data %s, upstream %s, %d peers)",
            self.store.mirror_id,
            "HTTPS" if self.server.ssl_context else "HTTP",
            self.url,
            self.data_dir,
            self.cfg.upstream or "none",
            len(self.peers.peers()),
        )

    async def stop(self) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sync_task
            self._sync_task = None
        await self.server.close()
        await self.jobs.close()
        await self.peers.aclose()
        await self.puller.aclose()
        log.info("mirror %s stopped", self.store.mirror_id)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
