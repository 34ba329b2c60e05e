"""The agent's local status socket, which the node console (``sudo llmgw``) reads.

One unix socket under the run dir (``Paths.agent_status_socket``), mode 0600,
answering ``GET /status`` with one JSON ``AgentStatus`` (framing and schema in
``llmgw.agent_status``, shared with the console). It is read-only: nothing
sent to it changes the agent, so it needs no token.

Three pieces:

- ``StatusBoard`` keeps what the agent knows that nothing else keeps: its
  state and since when, each control plane's last success and last error,
  the warnings of the last hour, and what each shard was started for.
- ``StatusView`` reads a running agent (the board, its inventory, engines,
  shards, disks) into an ``AgentStatus``; it never changes anything.
- ``StatusServer`` serves that view on the socket. Failing to bind is a
  warning, never fatal: the node runs its engines with or without a console.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import logging
import os
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from llmgw import __version__
from llmgw.agent_status import (
    STATUS_TARGET,
    AgentState,
    AgentStatus,
    AgentWarning,
    ControlPlaneState,
    DiskReport,
    EngineReport,
    SettingInForce,
    ShardReport,
    error_body,
    http_response,
    unix_address,
)
from llmgw.aio import within

log = logging.getLogger(__name__)

# "Warnings from the last hour", as the node console shows them.
WARNING_WINDOW_S = 3600.0
# Distinct warnings kept; a repeated one is counted, not stored again.
MAX_WARNINGS = 200
# A request is one line and a few headers; a client gets this long to send it.
REQUEST_LIMIT_BYTES = 8192
REQUEST_TIMEOUT_S = 2.0
SOCKET_MODE = 0o600

# The board of the agent whose task is running: several agents in one process
# (tests) each keep their own warnings, since tasks inherit the context.
_CURRENT_BOARD: contextvars.ContextVar[StatusBoard | None] = contextvars.ContextVar(
    "llmgw_agent_status_board", default=None
)


@dataclass
class _Plane:
    last_success_unix: float | None = None
    last_error: str = ""
    last_error_unix: float | None = None


@dataclass
class _ShardMeta:
    model: str
    engine: str
    gpu_indexes: list[int]


@dataclass
class _Warning:
    text: str
    first_unix: float
    last_unix: float
    count: int = 1


class StatusBoard:
    """What the agent records for its node console as things happen."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.started_unix = clock()
        self.state: AgentState = "starting"
        self.state_since_unix = self.started_unix
        self._ever_connected = False
        self._planes: dict[str, _Plane] = {}
        self._shards: dict[str, _ShardMeta] = {}
        self._warnings: deque[_Warning] = deque(maxlen=MAX_WARNINGS)
        # Warnings are also logged from worker threads (NVML, hashing).
        self._warnings_lock = threading.Lock()

    # -- written by the agent ---------------------------------------------------

    def set_state(self, state: AgentState) -> None:
        if state != self.state:
            self.state, self.state_since_unix = state, self._clock()

    def dialing(self, address: str) -> None:
        """The agent is about to dial ``address``."""
        self._planes.setdefault(address, _Plane())
        self.set_state("reconnecting" if self._ever_connected else "connecting")

    def connected(self, address: str) -> None:
        """``address`` accepted the agent's registration."""
        self._planes.setdefault(address, _Plane()).last_success_unix = self._clock()
        self._ever_connected = True
        self.set_state("connected")

    def lost(self, address: str, error: str) -> None:
        """The session with ``address`` ended (or never began) because of ``error``."""
        plane = self._planes.setdefault(address, _Plane())
        plane.last_error, plane.last_error_unix = error, self._clock()
        self.set_state("reconnecting" if self._ever_connected else "connecting")

    def shard_started(self, shard_id: str, model: str, engine: str, gpu_indexes: list[int]) -> None:
        """What a StartShard asked for, which ShardStatus does not repeat."""
        self._shards[shard_id] = _ShardMeta(model, engine, list(gpu_indexes))

    def warn(self, text: str, at_unix: float | None = None) -> None:
        """Keep ``text`` among the last hour's warnings (a repeat is counted)."""
        at = self._clock() if at_unix is None else at_unix
        with self._warnings_lock:
            for w in self._warnings:
                if w.text == text:
                    self._warnings.remove(w)
                    w.last_unix, w.count = at, w.count + 1
                    self._warnings.append(w)
                    return
            self._warnings.append(_Warning(text, at, at))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Keep agentd's logged warnings on this board while inside (one per agent task)."""
        handler = _WarningHandler(self)
        logger = logging.getLogger("agentd")
        token = _CURRENT_BOARD.set(self)
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            _CURRENT_BOARD.reset(token)

    # -- read by the view -------------------------------------------------------

    def planes(
        self, from_yaml: list[str], current: list[str], connected_to: str | None
    ) -> list[ControlPlaneState]:
        """Every control plane the agent dials: agent.yaml's first, then the cluster's."""
        out = []
        seen: set[str] = set()
        for source, addresses in (("agent.yaml", from_yaml), ("cluster", current)):
            for address in addresses:
                if address in seen:
                    continue
                seen.add(address)
                plane = self._planes.get(address, _Plane())
                out.append(
                    ControlPlaneState(
                        address=address,
                        source=source,
                        connected=address == connected_to,
                        last_success_unix=plane.last_success_unix,
                        last_error=plane.last_error,
                        last_error_unix=plane.last_error_unix,
                    )
                )
        return out

    def shard_meta(self, shard_id: str) -> _ShardMeta | None:
        return self._shards.get(shard_id)

    def warnings(self) -> list[AgentWarning]:
        since = self._clock() - WARNING_WINDOW_S
        out = []
        with self._warnings_lock:
            kept = list(self._warnings)
        for w in kept:
            if w.last_unix < since:
                continue
            text = w.text if w.count == 1 else f"{w.text} ({w.count} times)"
            out.append(AgentWarning(at_unix=w.last_unix, text=text))
        return sorted(out, key=lambda w: w.at_unix)


class _WarningHandler(logging.Handler):
    def __init__(self, board: StatusBoard) -> None:
        super().__init__(logging.WARNING)
        self._board = board

    def emit(self, record: logging.LogRecord) -> None:
        owner = _CURRENT_BOARD.get()
        if owner is not None and owner is not self._board:
            return  # another agent's, in the same process
        try:
            text = record.getMessage()
        except (TypeError, ValueError):
            text = str(record.msg)
        self._board.warn(text, record.created)


def _disk(what: str, path: Path) -> DiskReport:
    """Free space on the filesystem ``path`` will be on (it may not exist yet)."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as e:
        return DiskReport(what=what, path=str(path), error=e.strerror or str(e))
    return DiskReport(what=what, path=str(path), free_bytes=usage.free, total_bytes=usage.total)


class StatusView:
    """A read-only view of one running agent, as an ``AgentStatus``.

    ``agent`` is an ``agentd.agent.Agent`` (anything with the same
    attributes): its config, inventory, control planes, shards and engines
    are read, never changed.
    """

    def __init__(self, agent, board: StatusBoard) -> None:
        self._agent = agent
        self._board = board

    async def snapshot(self) -> AgentStatus:
        status = self.in_memory()
        status.disks = await asyncio.to_thread(self.disks)
        return status

    def in_memory(self) -> AgentStatus:
        """Everything but the disks (statvfs can block on a sick filesystem)."""
        agent, board = self._agent, self._board
        host = agent.inventory.host if agent.inventory is not None else None
        return AgentStatus(
            node_id=agent.cfg.node_id,
            hostname=(host.hostname if host else "") or socket.gethostname(),
            version=__version__,
            pid=os.getpid(),
            state=board.state,
            state_since_unix=board.state_since_unix,
            started_unix=board.started_unix,
            connected_to=agent.connected_to or "",
            probe=host.probe if host else "",
            gpu_note=host.gpu_note if host else "",
            control_planes=board.planes(
                list(agent.cfg.control_planes), list(agent.control_planes), agent.connected_to
            ),
            engines=self.engines(),
            shards=self.shards(),
            warnings=board.warnings(),
            mem_bandwidth_gbs=getattr(agent, "mem_bandwidth_gbs", 0.0)
            or (host.mem_bandwidth_gbs if host else 0.0),
            gpus=list(agent.inventory.gpus) if agent.inventory is not None else [],
            **self.settings(),
        )

    def settings(self) -> dict:
        """The live settings in force, each with where it comes from (agentd/live_settings.py)."""
        live = getattr(self._agent, "live", None)
        if live is None:
            return {}
        return {
            "settings": [
                SettingInForce(key=s.key, value=str(s.value), source=s.source)
                for s in live.sources()
            ],
            "settings_version": live.version,
        }

    def engines(self) -> list[EngineReport]:
        manager = getattr(self._agent.engines, "manager", None)
        states = manager.states() if manager is not None else []
        out = [
            EngineReport(
                engine=s.engine,
                version=s.version,
                variant=s.variant,
                state=s.state,
                message=s.message,
            )
            for s in states
        ]
        if not any(e.engine == "sim" for e in out):
            out.append(
                EngineReport(engine="sim", state="installed", message="built into the agent")
            )
        return sorted(out, key=lambda e: (e.engine, e.version, e.variant))

    def shards(self) -> list[ShardReport]:
        out = []
        for s in list(self._agent.shards.status.values()):
            if s.state == "stopped":
                continue
            meta = self._board.shard_meta(s.shard_id)
            out.append(
                ShardReport(
                    shard_id=s.shard_id,
                    replica_id=s.replica_id,
                    model=meta.model if meta else "",
                    engine=meta.engine if meta else "",
                    state=s.state,
                    reason=s.reason,
                    port=s.port,
                    pid=s.pid,
                    gpu_indexes=meta.gpu_indexes if meta else [],
                    compute_backend=s.compute_backend,
                    adopted=s.adopted,
                    since_unix=s.since_unix_ms / 1000 if s.since_unix_ms else None,
                )
            )
        return sorted(out, key=lambda r: r.shard_id)

    def disks(self) -> list[DiskReport]:
        agent = self._agent
        engines_dir = getattr(agent.engines, "engines_dir", None) or agent.paths.engines_dir
        return [
            _disk("weights", Path(agent.shards.fetcher.cache_dir)),
            _disk("engines", Path(engines_dir)),
        ]


class StatusServer:
    """Serves ``snapshot()`` as ``GET /status`` on a unix socket at ``path``."""

    def __init__(self, path: Path, snapshot: Callable[[], Awaitable[AgentStatus]]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._server: asyncio.AbstractServer | None = None
        self._inode: int | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen on ``path``; a failure is logged as a warning, never raised."""
        try:
            sock = self._bind()
        except OSError as e:
            log.warning(
                "the node console cannot see this agent: status socket %s: %s",
                self.path,
                e.strerror or e,
            )
            return
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=REQUEST_LIMIT_BYTES
        )
        log.info("status socket for the node console: %s", self.path)

    def _bind(self) -> socket.socket:
        # No await from the check to the bind: two agents starting in one
        # event loop cannot both find the socket free.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with unix_address(self.path) as address:
            if _answers(address):
                raise OSError(errno.EADDRINUSE, "another agent serves it")
            # Left by an agent that was killed: nothing answers on it.
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(address)
                # Connecting needs write permission, which the umask already
                # withholds from others; 0600 makes it root's (the agent's) only.
                os.chmod(self.path, SOCKET_MODE)
                self._inode = self.path.stat().st_ino
                sock.listen(16)
                sock.setblocking(False)
            except OSError:
                sock.close()
                raise
        return sock

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        with contextlib.suppress(TimeoutError):
            await within(server.wait_closed(), REQUEST_TIMEOUT_S)
        # Only our own file: a newer agent may already serve the path.
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await within(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                writer.write(http_response(400, error_body("send: GET /status HTTP/1.0")))
                return
            method, _, rest = head.decode("latin-1").partition(" ")
            target = rest.partition(" ")[0]
            if method != "GET":
                writer.write(http_response(405, error_body("the status socket is read-only")))
            elif target.partition("?")[0] != STATUS_TARGET:
                writer.write(http_response(404, error_body(f"only {STATUS_TARGET} is served")))
            else:
                try:
                    body = (await self._snapshot()).model_dump_json().encode()
                except Exception as e:  # a bug in the view: say so, keep serving
                    log.exception("the status view failed")
                    writer.write(http_response(500, error_body(f"the agent's status failed: {e}")))
                else:
                    writer.write(http_response(200, body))
            await writer.drain()
        except ConnectionError:
            pass  # the console gave up (its 2 s cap) or went away
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _answers(address: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(address)
    except OSError:
        return False
    finally:
        probe.close()
    return True
