"""Engine doors: the one way into a replica's engine from off the node.

Every engine listens on loopback only. Beside each one the agent opens a
door on the node's engine address (agent.yaml ``engine_host``): a port that
takes the gateway's connections and relays them to the engine
(``relay.py``). From another machine a connection must be TLS with a client
certificate of a control plane (signed by the cluster CA, its CN
``control-plane:<id>``, a name no node id can take since a node id has no
':'); over loopback — a gateway on this same machine, as under ``llmgw up``
— plain HTTP is taken, as nothing crosses a wire. Either way each request
must carry one of the replica's keys (given by the control plane at start
and at a rotation), which the door swaps for the engine's own key: that one
is made here, given to the engine in its environment, and never leaves the
node. So neither prompts nor keys cross the network in clear, and a key seen
anywhere opens nothing without a control plane's certificate.

What each door holds (its port, the engine's port and key, the keys it
takes) is kept in a 0600 file, so that an agent restarted beside engines it
adopts opens their doors again on the same ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import secrets
import socket
import ssl
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentd.door.relay import RequestRewriter, relay
from llmgw.tls.pki import CONTROL_PLANE_CN_PREFIX
from llmgw.tls.tlsconf import peer_common_name

log = logging.getLogger(__name__)

# A TLS handshake that takes longer than this is given up (a half-open scan).
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass
class DoorRecord:
    """What one shard's door is, as kept on disk."""

    shard_id: str
    port: int  # the door's, on the node's engine address
    engine_port: int  # the engine's, on loopback
    engine_key: str  # the engine's own key (never sent off the node)
    keys: list[str] = field(default_factory=list)  # the replica keys taken now
    pid: int = 0  # the door's own process (agentd/door/keeper.py), once running
    engine_pid: int = 0  # the engine's, once started: the door ends some time after it


def read_record(path: Path) -> DoorRecord | None:
    try:
        return DoorRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_record(path: Path, record: DoorRecord) -> None:
    """Kept 0600 (it holds keys), written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(record), f)
    tmp.replace(path)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def new_engine_key() -> str:
    return secrets.token_urlsafe(32)


def door_context(ca_cert: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """The door's TLS side: the node's certificate, a control plane's required of the client."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca_cert))
    ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class Door:
    """One shard's door: its listening socket and the connections it carries."""

    def __init__(
        self,
        record: DoorRecord,
        host: str,
        tls: ssl.SSLContext | None,
        *,
        plain_over_loopback: bool = True,
    ):
        self.record = record
        self._host = host
        self._tls = tls
        self._plain_over_loopback = plain_over_loopback
        self._accepted: tuple[bytes, ...] = ()
        self.set_keys(record.keys)
        self._sock: socket.socket | None = None
        self._task: asyncio.Task | None = None
        self._conns: set[asyncio.Task] = set()

    def set_keys(self, keys: list[str]) -> None:
        self.record.keys = list(keys)
        self._accepted = tuple(f"Bearer {k}".encode() for k in keys if k)

    def accepted(self) -> tuple[bytes, ...]:
        return self._accepted

    async def open(self) -> int:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self._host, self.record.port))
        except OSError:
            if not self.record.port:
                sock.close()
                raise
            # The port kept from before is taken now: any free one (the control plane hears it).
            sock.bind((self._host, 0))
        sock.listen(512)
        sock.setblocking(False)
        self._sock = sock
        self.record.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._accept(), name=f"door-{self.record.shard_id}")
        return self.record.port

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._sock is not None:
            self._sock.close()
        for t in list(self._conns):
            t.cancel()
        for t in list(self._conns):
            with contextlib.suppress(BaseException):
                await t

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            conn, peer = await loop.sock_accept(self._sock)
            t = asyncio.create_task(self._serve(conn, peer[0]))
            self._conns.add(t)
            t.add_done_callback(self._conns.discard)

    async def _serve(self, conn: socket.socket, peer_host: str) -> None:
        loop = asyncio.get_running_loop()
        plain = self._plain_over_loopback and is_loopback(peer_host)
        if not plain and self._tls is None:
            log.warning("engine door: %s refused: this node has no certificate for TLS", peer_host)
            conn.close()
            return
        tls = None if plain else self._tls
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = asyncio.StreamReader(limit=2**20)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                conn,
                ssl=tls,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls else None,
            )
        except (OSError, ssl.SSLError) as e:
            log.info("engine door: a connection from %s failed its handshake: %s", peer_host, e)
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        if tls is not None:
            cn = peer_common_name(transport.get_extra_info("peercert")) or ""
            if not cn.startswith(CONTROL_PLANE_CN_PREFIX):
                log.warning(
                    "engine door: %s presented %r, not a control plane's certificate", peer_host, cn
                )
                writer.close()
                return
        rewriter = RequestRewriter(self.accepted, f"Bearer {self.record.engine_key}".encode())
        await relay(reader, writer, "127.0.0.1", self.record.engine_port, rewriter)


class Doors:
    """Every shard's door on this node, kept under ``state_dir`` (one 0600 file each)."""

    def __init__(
        self,
        state_dir: Path,
        host: str,
        tls: ssl.SSLContext | None,
        *,
        plain_over_loopback: bool = True,
    ):
        self.state_dir = state_dir
        self.host = host
        self.tls = tls
        self.plain_over_loopback = plain_over_loopback
        self._doors: dict[str, Door] = {}

    def record(self, shard_id: str) -> DoorRecord | None:
        """The kept record of a shard's door (its engine's port and key), or None."""
        door = self._doors.get(shard_id)
        if door is not None:
            return door.record
        return read_record(self._file(shard_id))

    def prepare(self, shard_id: str, engine_port: int, keys: list[str]) -> DoorRecord:
        """A new record for a shard about to start: its engine's port and a fresh key."""
        return DoorRecord(shard_id, 0, engine_port, new_engine_key(), list(keys))

    async def open(self, record: DoorRecord) -> int:
        """Open (or open again, after an agent restart) a shard's door; its port."""
        await self.close(record.shard_id, forget=False)
        door = Door(record, self.host, self.tls, plain_over_loopback=self.plain_over_loopback)
        port = await door.open()
        self._doors[record.shard_id] = door
        self._keep(record)
        return port

    def set_keys(self, shard_id: str, keys: list[str]) -> bool:
        """The keys a shard's door takes from now on; False when it has no door here."""
        door = self._doors.get(shard_id)
        if door is None:
            return False
        door.set_keys(keys)
        self._keep(door.record)
        return True

    async def close(self, shard_id: str, *, forget: bool = True) -> None:
        door = self._doors.pop(shard_id, None)
        if door is not None:
            await door.close()
        if forget:
            with contextlib.suppress(FileNotFoundError):
                self._file(shard_id).unlink()

    async def close_all(self) -> None:
        """Close every door, keeping their records (engines left running are adopted)."""
        for shard_id in list(self._doors):
            await self.close(shard_id, forget=False)

    def _file(self, shard_id: str) -> Path:
        return self.state_dir / f"{shard_id}.json"

    def _keep(self, record: DoorRecord) -> None:
        write_record(self._file(record.shard_id), record)
