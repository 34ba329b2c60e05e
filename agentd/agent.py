"""agentd's connection to the control plane: register, heartbeat, reconnect.

The agent dials out (nodes sit behind NAT and firewalls more often than the
control plane does), tries the control planes of agent.yaml in turn, and
backs off between attempts so a restarting control plane is not stormed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from pathlib import Path

import grpclib.const
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from agentd.door.setup import engine_doors
from agentd.engine_provider import LocalEngines
from agentd.heartbeat import build_heartbeat, foreign_gpu_bytes
from agentd.live_settings import LiveSettings
from agentd.provision.manager import installable_engines
from agentd.shards import ShardRunner
from agentd.status import StatusBoard, StatusServer, StatusView
from agentd.supervisor.users import ALLOW_ROOT_ENV, ensure_engine_user, root_engines_allowed
from agentd.weights import WeightsFetcher
from agentd.weights.keeper import WeightsKeeper
from agentd.weights.sources import mirror_tls
from llmgw import __version__
from llmgw.aio import within
from llmgw.config import AgentConfig, split_host_port
from llmgw.grpcsize import AGENT_MAX_MESSAGE_BYTES, capped_codec
from llmgw.inventory import Inventory, gpu_to_proto, host_to_proto
from llmgw.keepalive import keepalive_config
from llmgw.paths import Paths
from llmgw.tls.tlsconf import client_context
from proto.llmgw.v1 import AgentMessage, CommandAck, ControlMessage, Register

log = logging.getLogger(__name__)

CONNECT_PATH = "/llmgw.v1.AgentService/Connect"
REGISTERED_TIMEOUT_S = 30.0
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
# A session that lasted this long was healthy: the next failure starts the
# backoff from the beginning again.
HEALTHY_SESSION_S = 30.0
# After a standby named the leader: dial it almost at once. After a standby that
# knows no leader yet (a lease changing hands): again in a second.
LEADER_REDIRECT_S = 0.05
STANDBY_RETRY_S = 1.0
# How long a stopping agent waits for the control plane to close the stream.
STOP_GRACE_S = 2.0


class Backoff:
    """Exponential backoff with jitter, so many agents do not dial in lockstep."""

    def __init__(self, initial_s: float = BACKOFF_INITIAL_S, max_s: float = BACKOFF_MAX_S):
        self.initial_s, self.max_s = initial_s, max_s
        self._next_s = initial_s

    def reset(self) -> None:
        self._next_s = self.initial_s

    def next(self) -> float:
        delay = self._next_s * random.uniform(0.8, 1.2)
        self._next_s = min(self._next_s * 2, self.max_s)
        return delay


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        paths: Paths,
        *,
        probe,
        engines=None,
        status_socket: Path | None = None,
    ):
        self.cfg = cfg
        self.paths = paths
        self.probe = probe
        self.data_dir = Path(cfg.data_dir) if cfg.data_dir else paths.agent_data_dir
        ca = Path(cfg.pki.ca_cert or paths.ca_cert)
        cert = Path(cfg.pki.cert or paths.pki_dir / "node.crt")
        key = Path(cfg.pki.key or paths.pki_dir / "node.key")
        self._ssl = client_context(ca, cert, key)
        self._seq = 0
        self._stream = None
        # The failover list starts as agent.yaml's; the cluster may send a newer one.
        self.control_planes = list(cfg.control_planes)
        # The leader a standby named, dialled next; whether the last dial met a standby.
        self._leader_hint = ""
        self._standby_refused = False
        self.heartbeat_interval_s = 2.0
        self.connected_to: str | None = None
        self.inventory: Inventory | None = None
        self._send = None  # the current stream's outbox, while connected
        self._tasks: set[asyncio.Task] = set()  # commands answered when done
        self._keeper: asyncio.Task | None = None  # the weights cache's (agentd/weights/keeper.py)
        self.engines = engines or LocalEngines(paths.engines_dir, report=self._engine_report)
        # HTTPS mirrors: their certificate may be the cluster CA's, and one
        # that reads node certificates (tls.client_ca) gets this node's.
        mirror_tls_ctx = mirror_tls(ca, cert, key)
        self.shards = ShardRunner(
            self.data_dir,
            self.engines,
            engine_user=cfg.engine_user or None,
            engine_host=cfg.engines_listen,
            # Engines on loopback; the gateway comes in through their doors (agentd/door).
            doors=engine_doors(self.data_dir / "doors", cfg.engines_listen, ca, cert, key),
            # hf: weights come from a StartShard's mirrors, and from agent.yaml's
            # hub where there are none or the model may reach the internet.
            fetcher=WeightsFetcher(
                self.data_dir / "weights", hf_base_url=cfg.hub_url, verify=mirror_tls_ctx
            ),
        )
        # The cache within its share of the disk, told of every shard's change.
        self.weights = WeightsKeeper(self.shards.fetcher.cache_dir, self.shards.weights_uses)
        self.shards.listeners.append(self.weights.changed)
        # Weights and engine installs are shared with the engine user's group
        # (0750/0640), whatever the umask: the agent makes them as root.
        share_gid = self.shards.supervisor.share_gid
        self.shards.fetcher.share_gid = share_gid
        if (manager := getattr(self.engines, "manager", None)) is not None:
            manager.share_gid = share_gid
            manager.verify = mirror_tls_ctx
        # What the probe needs in every engine's environment (a fake probe's
        # processes directory), and where a GPU shard's readiness is read.
        engine_env = getattr(probe, "engine_env", None)
        self.shards.probe_env = dict(engine_env()) if engine_env else {}
        self.shards.supervisor.gpu_processes = getattr(probe, "processes", None)
        # The host's memory bandwidth, measured once after the first
        # registration (0.0 until then).
        self.mem_bandwidth_gbs = 0.0
        self._bandwidth_task: asyncio.Task | None = None
        # -- the node console's status socket (agentd/status.py) --
        self.board = StatusBoard()
        self.status_socket = status_socket or paths.agent_status_socket
        # agent.yaml < the cluster's settings < LLMGW_ variables (agentd/live_settings.py).
        self.live = LiveSettings(cfg, os.environ)
        self.live.apply(self)

    async def _engine_user_setup(self) -> None:
        """As root with no engine_user of its own: make llmgw-engine where it is missing."""
        if root_engines_allowed():
            log.warning("%s=1: engines may run as root (throwaway machines only)", ALLOW_ROOT_ENV)
            return
        if os.geteuid() != 0 or self.cfg.engine_user:
            return
        home = self.paths.home
        if home is not None:
            # Made now, so the way to it (and to the starter beside it) is let through.
            self.paths.engines_dir.mkdir(parents=True, exist_ok=True)
        said = await asyncio.to_thread(
            ensure_engine_user, self.data_dir, home=home, reach=(self.paths.engines_dir,)
        )
        log.info("%s", said)

    def register_message(self, inv: Inventory) -> Register:
        return Register(
            node_id=self.cfg.node_id,
            hostname=inv.host.hostname or socket.gethostname(),
            version=__version__,
            host=host_to_proto(inv.host),
            gpus=[gpu_to_proto(g) for g in inv.gpus],
            installable_engines=installable_engines(inv),
            shards=self.shards.running(),
            labels=dict(self.cfg.labels),
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Stay connected to one of the control planes until ``stop`` is set.

        Meanwhile the status socket tells the node console how it goes.
        """
        with self.board.recording():
            server = StatusServer(self.status_socket, StatusView(self, self.board).snapshot)
            await server.start()
            try:
                await self._run(stop)
            finally:
                self.board.set_state("stopping")
                if self._keeper is not None:
                    self._keeper.cancel()
                    with contextlib.suppress(BaseException):
                        await self._keeper
                await server.close()

    async def _run(self, stop: asyncio.Event) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self._engine_user_setup()
        adopted = await self.shards.adopt()
        if adopted:
            log.info("adopted %d engines still running: %s", len(adopted), ", ".join(adopted))
        # After adoption: what the adopted engines run on is known, and kept.
        self._keeper = asyncio.create_task(self.weights.run(), name="weights-cache")
        self.inventory = await asyncio.to_thread(self.probe.inventory)
        self.shards.inventory = self.inventory  # MIG instances' uuids, cards' memory
        manager = getattr(self.engines, "manager", None)
        if manager is not None:
            manager.inventory = self.inventory  # vLLM/SGLang builds follow the hardware
        for w in self.inventory.host.warnings:
            log.warning("%s", w)
        if self.inventory.host.gpu_note:
            log.info("no GPUs reported: %s", self.inventory.host.gpu_note)
        # Installed engines are checked again now and then (a removed library,
        # a driver update); changes are reported as EngineStatus.
        recheck = None
        if manager is not None:
            recheck = asyncio.create_task(manager.watch(stop), name="engine-recheck")
        backoff = Backoff()
        index = 0
        while not stop.is_set():
            addr = self.control_planes[index % len(self.control_planes)]
            if self._leader_hint:
                # A standby named the leader: dial it next, not the next in the list.
                addr, self._leader_hint = self._leader_hint, ""
            self._standby_refused = False
            started = time.monotonic()
            self.board.dialing(addr)
            session = asyncio.create_task(self._session(addr))
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if stop.is_set():
                await self._end_session(session)
                break
            self.connected_to = None
            try:
                session.result()
                if not self._standby_refused:
                    log.warning("control plane %s closed the stream", addr)
                    self.board.lost(addr, "it closed the stream")
            except GRPCError as e:
                if self._standby_refused:
                    pass  # the standby's refusal after naming the leader: said above
                elif e.status in (Status.PERMISSION_DENIED, Status.UNAUTHENTICATED):
                    log.error("control plane %s refused this node: %s", addr, e.message)
                    self.board.lost(addr, f"it refused this node: {e.message}")
                else:
                    log.warning("control plane %s: %s %s", addr, e.status.name, e.message or "")
                    self.board.lost(addr, f"{e.status.name} {e.message or ''}".strip())
            except (OSError, StreamTerminatedError, TimeoutError, ProtocolError) as e:
                # ProtocolError: the control plane ended the stream while this side's
                # half was still open (a removed node, a standby that named the
                # leader) — the same as a closed stream.
                if not self._standby_refused:
                    log.warning("control plane %s unreachable: %s", addr, e or e.__class__.__name__)
                    self.board.lost(addr, f"unreachable: {e or e.__class__.__name__}")
            if time.monotonic() - started >= HEALTHY_SESSION_S:
                backoff.reset()
            index += 1  # fail over to the next control plane in the list
            delay = backoff.next()
            if self._standby_refused:
                # A standby answered: the cluster is there, only the leader moved. Try
                # the leader it named at once, or the next one soon (a lease changes
                # hands within seconds), never after a backoff grown to half a minute.
                backoff.reset()
                delay = LEADER_REDIRECT_S if self._leader_hint else STANDBY_RETRY_S
            log.info("reconnecting in %.1f s", delay)
            with contextlib.suppress(TimeoutError):
                await within(stop.wait(), delay)
        if recheck is not None:
            recheck.cancel()
            with contextlib.suppress(BaseException):
                await recheck
        if self._bandwidth_task is not None:
            self._bandwidth_task.cancel()

    async def _end_session(self, session: asyncio.Task) -> None:
        """Close the stream politely, so the control plane hears "stopped", not "lost"."""
        stream, self._stream = self._stream, None
        if stream is not None and not session.done():
            with contextlib.suppress(Exception):
                await within(stream.end(), STOP_GRACE_S)
                await within(asyncio.shield(session), STOP_GRACE_S)
        session.cancel()
        with contextlib.suppress(BaseException):
            await session

    async def _session(self, addr: str) -> None:
        host, port = split_host_port(addr)
        channel = Channel(
            host,
            port,
            ssl=self._ssl,
            config=keepalive_config(),
            codec=capped_codec(AGENT_MAX_MESSAGE_BYTES),
        )
        try:
            async with channel.request(
                CONNECT_PATH, grpclib.const.Cardinality.STREAM_STREAM, AgentMessage, ControlMessage
            ) as stream:
                await stream.send_message(
                    AgentMessage(register=self.register_message(self.inventory))
                )
                # Known from here, so a stop while the reply is on its way still ends the
                # stream politely (the control plane may already show the node ready).
                self._stream = stream
                first = await within(stream.recv_message(), REGISTERED_TIMEOUT_S)
                if first is not None and first.control_planes is not None:
                    # A standby: it names the control planes and the leader, then ends.
                    cps = first.control_planes
                    self._standby_refused = True
                    self._merge_control_planes(list(cps.addresses))
                    self._leader_hint = cps.leader if cps.leader != addr else ""
                    log.info(
                        "control plane %s stands by; the leader is %s",
                        addr,
                        cps.leader or "none yet",
                    )
                    self.board.lost(addr, f"standing by; the leader is {cps.leader or 'none yet'}")
                    if self._stream is stream:
                        self._stream = None
                    return
                if first is None or first.registered is None:
                    if self._stream is stream:
                        self._stream = None
                    return
                self.live.registered(first.registered.heartbeat_interval_ms)
                self.live.apply(self)
                self.connected_to = addr
                self.board.connected(addr)
                if self._bandwidth_task is None:
                    self._bandwidth_task = asyncio.create_task(
                        self._measure_bandwidth(), name="mem-bandwidth"
                    )
                log.info(
                    "registered with %s as %s (heartbeat every %.1f s)",
                    addr,
                    self.cfg.node_id,
                    self.heartbeat_interval_s,
                )
                # One sender: heartbeats, acknowledgements and shard reports
                # share the stream without interleaving their writes.
                outbox: asyncio.Queue[AgentMessage] = asyncio.Queue()
                sender = asyncio.create_task(self._sender(stream, outbox))
                beats = asyncio.create_task(self._heartbeats(stream, outbox))
                self.shards.attach(outbox.put_nowait)
                self._send = outbox.put_nowait
                self.weights.attach(outbox.put_nowait)  # what the cache holds, after Register
                manager = getattr(self.engines, "manager", None)
                for state in manager.states() if manager else []:
                    outbox.put_nowait(AgentMessage(engine_status=state.to_proto()))
                try:
                    async for msg in stream:
                        await self._handle(outbox, msg)
                finally:
                    self.shards.attach(None)
                    self.weights.attach(None)
                    self._send = None
                    for task in (beats, sender):
                        task.cancel()
                    for task in (beats, sender):
                        with contextlib.suppress(BaseException):
                            await task
        finally:
            channel.close()

    async def _measure_bandwidth(self) -> None:
        """Measure the host's memory bandwidth once; heartbeats carry it from then on.

        After registering, not before: the measurement holds every CPU for
        a moment, which must not delay the node joining.
        """
        measure = getattr(self.probe, "mem_bandwidth_gbs", None)
        if measure is None:
            return
        try:
            gbs = float(await asyncio.to_thread(measure) or 0.0)
        except (OSError, MemoryError, ValueError) as e:
            # A figure missing leaves CPU speeds unestimated; the node serves on.
            log.warning("memory bandwidth not measured: %s", e)
            return
        if gbs > 0:
            self.mem_bandwidth_gbs = gbs
            if self.inventory is not None:  # a later Register carries it too
                self.inventory.host.mem_bandwidth_gbs = gbs

    def _engine_report(self, state) -> None:
        log.info("engine %s %s: %s", state.engine, state.version, state.words)
        if self._send is not None:
            self._send(AgentMessage(engine_status=state.to_proto()))

    @staticmethod
    async def _sender(stream, outbox: asyncio.Queue[AgentMessage]) -> None:
        while True:
            await stream.send_message(await outbox.get())

    async def _heartbeats(self, stream, outbox: asyncio.Queue[AgentMessage]) -> None:
        while self._stream is stream:  # a stopping agent has ended the stream
            self._seq += 1
            foreign = await foreign_gpu_bytes(self.probe, self.shards.supervisor)
            hb = await asyncio.to_thread(
                build_heartbeat, self.probe, self.data_dir, self._seq, foreign,
                self.mem_bandwidth_gbs,
            )  # fmt: skip
            outbox.put_nowait(AgentMessage(heartbeat=hb))
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _handle(self, outbox: asyncio.Queue[AgentMessage], msg: ControlMessage) -> None:
        """Carry out one command and acknowledge it by its id."""
        ok, error = True, ""
        if msg.control_planes is not None:
            ok, error = self._set_control_planes(list(msg.control_planes.addresses))
        elif msg.agent_settings is not None:
            ok, error = self._apply_settings(msg.agent_settings)
        elif msg.start_shard is not None:
            # Accepted: the work and its outcome follow as ShardStatus reports.
            s = msg.start_shard
            self.board.shard_started(s.shard_id, s.model, s.engine, list(s.gpu_indexes))
            self.shards.start(s)
        elif msg.stop_shard is not None:
            asyncio.create_task(self.shards.stop(msg.stop_shard))
        elif msg.remove_weights is not None:
            # Answered once the entries are renamed away; their files are deleted after.
            task = asyncio.create_task(self._remove_weights(outbox, msg), name="remove-weights")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        elif msg.fetch_logs is not None:
            req = msg.fetch_logs
            lines = self.shards.supervisor.log_tail(req.shard_id, req.lines or 100)
            outbox.put_nowait(
                AgentMessage(ack=CommandAck(command_id=msg.command_id, ok=True, lines=lines))
            )
            return
        elif msg.shard_keys is not None:
            ok, error = self.shards.set_keys(msg.shard_keys.shard_id, list(msg.shard_keys.keys))
        elif msg.install_engine is not None:
            # Accepted: progress and the outcome follow as EngineStatus reports.
            install = getattr(self.engines, "install", None)
            if install is None:
                ok, error = False, "this agent installs no engines"
            else:
                asyncio.create_task(install(msg.install_engine))
        else:
            ok, error = False, "an unknown command"
        outbox.put_nowait(
            AgentMessage(ack=CommandAck(command_id=msg.command_id, ok=ok, error=error))
        )

    async def _remove_weights(self, outbox: asyncio.Queue[AgentMessage], msg: ControlMessage):
        req = msg.remove_weights
        try:
            lines = await self.weights.remove(list(req.keys), req.unused)
        except OSError as e:
            ack = CommandAck(command_id=msg.command_id, ok=False, error=f"the cache: {e}")
        else:
            ack = CommandAck(command_id=msg.command_id, ok=True, lines=lines)
        outbox.put_nowait(AgentMessage(ack=ack))

    def _merge_control_planes(self, addresses: list[str]) -> None:
        """The cluster's list first, then agent.yaml's addresses it does not name."""
        valid = []
        for a in addresses:
            with contextlib.suppress(ValueError):
                split_host_port(a)
                valid.append(a)
        if valid:
            rest = [a for a in self.cfg.control_planes if a not in valid]
            self.control_planes = valid + rest

    def _set_control_planes(self, addresses: list[str]) -> tuple[bool, str]:
        """The failover list as the cluster knows it now (kept in memory, not in agent.yaml)."""
        try:
            for a in addresses:
                split_host_port(a)
        except ValueError as e:
            return False, str(e)
        if not addresses:
            return False, "an empty control plane list was refused"
        self._merge_control_planes(addresses)
        log.info("control planes now: %s", ", ".join(self.control_planes))
        return True, ""

    def _apply_settings(self, settings) -> tuple[bool, str]:
        ok, error = self.live.take(settings)
        if ok:
            self.live.apply(self)
        return ok, error
