"""The node's side of a replica: fetch the weights, get the engine, run it, say how it goes.

A StartShard is acknowledged at once and worked through in the background;
each step is reported as a ShardStatus in the node's own words (fetch
progress included, which pushes the control plane's startup deadline out).
The latest status of every shard is kept, so a reconnecting agent tells the
control plane in Register what it still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agentd.door.keeper import DoorKeeper
from agentd.engines import ShardSpec, adapter_for
from agentd.engines.base import LOOPBACK
from agentd.supervisor import LaunchSpec, ShardEvent, Supervisor
from agentd.weights import WeightsFetcher
from agentd.weights.cache import Use, fetching_use
from llmgw.errors import LlmgwError
from llmgw.inventory import Inventory
from proto.llmgw.v1 import AgentMessage, FetchProgress, ShardStatus, StartShard, StopShard

log = logging.getLogger(__name__)

# Fetch progress is reported at most this often per shard.
PROGRESS_EVERY_S = 1.0
# The most of a card an engine is given, whatever the plan asked: CUDA's
# context and the driver take a few hundred MB no engine counts.
MAX_GPU_FRACTION = 0.95

# Queues a message on the current stream (the session's outbox).
Send = Callable[[AgentMessage], None]
# A shard in one of these holds its weights: the cache keeps them.
HOLDING_STATES = frozenset({"fetching", "installing", "starting", "ready"})


class EngineProvider(Protocol):
    async def ensure(
        self, engine: str, version: str, say: Callable[[str], None] | None = None
    ) -> tuple[str | None, dict[str, str]]:
        """The engine's program (None: the built-in sim) and what its environment needs.

        ``say`` hears an install's progress while the shard waits for it.
        """


def gpu_fraction(per_gpu_bytes: int, card_totals: list[int]) -> float:
    """The share of each card the plan's per-card need is (vLLM's --gpu-memory-utilization).

    Rounded up to the hundredth the flag is written with, so the engine never
    gets less than the plan sized; taken against the smallest of the cards;
    0 (the engine's own default) when either is unknown.
    """
    totals = [t for t in card_totals if t > 0]
    if per_gpu_bytes <= 0 or not totals:
        return 0.0
    share = math.ceil(per_gpu_bytes / min(totals) * 100) / 100
    return min(share, MAX_GPU_FRACTION)


def free_port(host: str = LOOPBACK) -> int:
    """A port free on ``host``, where the engine will listen."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ShardRunner:
    def __init__(
        self,
        data_dir: Path,
        engines: EngineProvider,
        *,
        fetcher: WeightsFetcher | None = None,
        supervisor: Supervisor | None = None,
        engine_user: str | None = None,
        engine_host: str = LOOPBACK,
        doors: DoorKeeper | None = None,
    ):
        # Where engines listen (agent.yaml engine_host; see AgentConfig.engines_listen).
        # With doors (agentd/door), engines listen on loopback and their doors there.
        self.engine_host = engine_host
        self.doors = doors
        self.fetcher = fetcher or WeightsFetcher(data_dir / "weights")
        self.supervisor = supervisor or Supervisor(
            data_dir / "shards", data_dir / "output", self._on_event, run_as=engine_user
        )
        self._engines = engines
        # The node's hardware, set once discovery has run: a card's memory
        # turns the plan's bytes into an engine's share of it.
        self.inventory: Inventory | None = None
        # What every engine's environment gets for the node's GPU probe to
        # see it (a fake probe's processes directory); set by the agent.
        self.probe_env: dict[str, str] = {}
        self.status: dict[str, ShardStatus] = {}
        self._starting: dict[str, asyncio.Task] = {}
        # Keys a rotation gave a shard before its door was open (it opens with them).
        self._keys_at_start: dict[str, list[str]] = {}
        self._send: Send | None = None
        self._adopted: set[str] = set()
        # shard id -> its hold on the weights cache (what it fetches, then runs on).
        self._weights: dict[str, Use] = {}
        # Told of every change of a shard's state (the weights cache looks again).
        self.listeners: list[Callable[[], None]] = []

    def attach(self, send: Send | None) -> None:
        """Reports go to this stream from now on (None while disconnected)."""
        self._send = send

    async def adopt(self) -> list[str]:
        """Engines that kept running while the agent was down become ours again."""
        self._adopted = set(await self.supervisor.adopt_all())
        if self.doors is not None:
            for shard_id in sorted(self._adopted):
                record = self.doors.record(shard_id)
                if record is None:
                    continue  # started before doors: it is reached as it was
                port = await self.doors.open(record)
                if (status := self.status.get(shard_id)) is not None:
                    status.port = port
        # Their first reports went out while adopt_all ran, before the set
        # was known: mark them now, so Register says they were adopted.
        for shard_id in self._adopted:
            if (status := self.status.get(shard_id)) is not None:
                status.adopted = True
        return sorted(self._adopted)

    def running(self) -> list[ShardStatus]:
        """What this node runs, for Register after a (re)connect."""
        return [s for s in self.status.values() if s.state not in ("stopped",)]

    def weights_uses(self) -> list[Use]:
        """What the shards fetching, starting or running now hold of the weights cache.

        An engine adopted from an earlier agent runs on the weights its state
        file names (unknown, so holding everything, where that agent kept none).
        """
        out = []
        for shard_id, status in self.status.items():
            if status.state not in HOLDING_STATES:
                continue
            use = self._weights.get(shard_id)
            if use is None:
                info = self.supervisor.get(shard_id)
                use = Use(status.replica_id or shard_id, info.weights_path if info else None)
            out.append(use)
        return out

    # ---- commands --------------------------------------------------------

    def start(self, msg: StartShard) -> None:
        current = self.status.get(msg.shard_id)
        if current is not None and current.state in ("fetching", "installing", "starting", "ready"):
            self._report(current)  # already on it: say where it stands
            return
        task = asyncio.create_task(self._start(msg), name=f"start-{msg.shard_id}")
        self._starting[msg.shard_id] = task
        task.add_done_callback(lambda _: self._starting.pop(msg.shard_id, None))

    async def stop(self, msg: StopShard) -> None:
        # The door of the start being stopped: a start of the same shard may follow at once.
        door = self.doors.record(msg.shard_id) if self.doors is not None else None
        task = self._starting.pop(msg.shard_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self.supervisor.stop(msg.shard_id, grace_s=msg.grace_s or 10)
        if self.doors is not None:
            await self.doors.close(msg.shard_id, door)
        status = self.status.get(msg.shard_id) or ShardStatus(shard_id=msg.shard_id)
        self._weights.pop(msg.shard_id, None)
        self._set(status, "stopped", msg.reason or "stopped")

    def set_keys(self, shard_id: str, keys: list[str]) -> tuple[bool, str]:
        """The replica keys a shard's door takes from now on: (done, why not).

        A shard still fetching or installing has no door yet: it opens with these.
        """
        if self.doors is not None and self.doors.set_keys(shard_id, keys):
            return True, ""
        if self.doors is not None and shard_id in self._starting:
            self._keys_at_start[shard_id] = list(keys)
            return True, ""
        return False, f"shard {shard_id} has no engine door on this node"

    async def _start(self, msg: StartShard) -> None:
        status = ShardStatus(
            shard_id=msg.shard_id,
            replica_id=msg.replica_id,
            compute_backend="cpu" if msg.cpu else "cuda",
        )
        self.status[msg.shard_id] = status
        self._weights[msg.shard_id] = Use(msg.replica_id)
        door = None  # this start's door, once open
        try:
            model_path = ""
            if msg.engine != "sim":  # the simulator has no weights
                # What the fetch writes into is this shard's from its first byte on.
                self._weights[msg.shard_id] = fetching_use(
                    msg.replica_id, msg.model, msg.weights.source
                )
                model_path = await self._fetch(msg, status)
                self._weights[msg.shard_id] = Use(msg.replica_id, model_path)
            self._set(status, "installing", f"getting {msg.engine} ready")
            executable, engine_env = await self._ensure_engine(msg, status)
            adapter = adapter_for(msg.engine, executable)
            if self.doors is not None:
                # The engine on loopback with a key of this node's; the door takes the replica's.
                port = free_port(LOOPBACK)
                keys = self._keys_at_start.pop(msg.shard_id, None) or (
                    [msg.engine_key] if msg.engine_key else []
                )
                record = self.doors.prepare(msg.shard_id, port, keys)
                spec = self.shard_spec(msg, model_path, port)
                spec = dataclasses.replace(spec, host=LOOPBACK, engine_key=record.engine_key)
                cmd = adapter.command(spec)
                status.port = await self.doors.open(record)
                door = record
                where = f"port {port}, its door on {self.doors.host}:{status.port}"
            else:
                port = msg.port or free_port(self.engine_host)
                cmd = adapter.command(self.shard_spec(msg, model_path, port))
                status.port = port
                where = f"port {port}"
            self._set(status, "starting", f"starting {msg.engine} on {where}")
            await self.supervisor.start(
                LaunchSpec(
                    shard_id=msg.shard_id,
                    replica_id=msg.replica_id,
                    argv=cmd.argv,
                    env={**engine_env, **self.probe_env, **cmd.env},
                    secret_env=cmd.secret_env,
                    health_url=cmd.health_url,
                    startup_deadline_s=msg.startup_timeout_s or 600,
                    port=port,
                    # Ready only once it holds memory on exactly its cards.
                    gpu_indexes=tuple(msg.gpu_indexes)
                    if adapter.holds_gpu_memory and not msg.cpu
                    else (),
                    weights_path=model_path,
                )
            )
        except LlmgwError as e:
            await self._close_door(msg.shard_id, door)
            self._set(status, "failed", e.message + (f" ({e.hint})" if e.hint else ""))
        except asyncio.CancelledError:
            await self._close_door(msg.shard_id, door)
            raise
        except Exception as e:  # a bug must still end in a reported state
            await self._close_door(msg.shard_id, door)
            log.exception("starting shard %s failed", msg.shard_id)
            self._set(status, "failed", f"the agent failed to start it: {e}")

    async def _close_door(self, shard_id: str, door) -> None:
        """A start that never launched its engine leaves no door behind."""
        if door is not None and self.doors is not None:
            await self.doors.close(shard_id, door)

    def shard_spec(self, msg: StartShard, model_path: str, port: int) -> ShardSpec:
        """What the control plane decided for the shard, as its engine adapter takes it."""
        return ShardSpec(
            model_name=msg.model,
            model_path=model_path,
            port=port,
            host=self.engine_host,
            context_length=msg.context_length * max(msg.slots, 1)
            if msg.engine == "llama.cpp"
            else msg.context_length,
            slots=max(msg.slots, 1),
            gpu_indexes=tuple(msg.gpu_indexes),
            gpu_uuids=self._gpu_uuids(msg),
            tensor_parallel=msg.tensor_parallel,
            pipeline_parallel=msg.pipeline_parallel,
            expert_parallel=msg.expert_parallel,
            gpu_memory_fraction=gpu_fraction(msg.per_gpu_bytes, self._card_totals(msg)),
            precision=msg.precision,
            threads=msg.cores,
            download_dir=str(self.fetcher.cache_dir),
            extra_args=tuple(msg.args),
            extra_env=dict(msg.env),
            engine_key=msg.engine_key,
        )

    def _gpu_uuids(self, msg: StartShard) -> tuple[str, ...]:
        """The uuids of the shard's units, or () when any is unknown (CUDA indexes then)."""
        inventory = self.inventory or getattr(
            getattr(self._engines, "manager", None), "inventory", None
        )
        by_index = {g.index: g.uuid for g in inventory.gpus} if inventory is not None else {}
        uuids = tuple(by_index.get(i, "") for i in msg.gpu_indexes)
        return uuids if all(uuids) else ()

    def _card_totals(self, msg: StartShard) -> list[int]:
        inventory = self.inventory or getattr(
            getattr(self._engines, "manager", None), "inventory", None
        )
        if inventory is None:
            return []
        by_index = {g.index: g.memory_total_bytes for g in inventory.gpus}
        return [by_index.get(i, 0) for i in msg.gpu_indexes]

    async def _ensure_engine(
        self, msg: StartShard, status: ShardStatus
    ) -> tuple[str | None, dict[str, str]]:
        """The engine's program, the shard saying the install's words while it waits."""
        ensure = self._engines.ensure
        if "say" not in inspect.signature(ensure).parameters:
            return await ensure(msg.engine, msg.engine_version)
        last = [""]

        def say(words: str) -> None:
            if words != last[0] and status.state == "installing":
                last[0] = words
                self._set(status, "installing", words)

        return await ensure(msg.engine, msg.engine_version, say=say)

    async def _fetch(self, msg: StartShard, status: ShardStatus) -> str:
        w = msg.weights
        self._set(status, "fetching", f"fetching {w.source}")
        last = [0.0]
        # Where the bytes come from now, in words ("mirror 10.0.0.5:7080"):
        # it changes when a mirror fails mid-file and the next one goes on.
        where = [""]

        def say(done: int, total: int) -> None:
            status.fetch = FetchProgress(source=w.source, bytes_done=done, bytes_total=total)
            frm = f" from {where[0]}" if where[0] else ""
            status.reason = (
                f"fetching {w.source}{frm} ({done / 2**20:.0f} of {total / 2**20:.0f} MiB)"
            )
            self._report(status)

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S and done != total:
                return
            last[0] = now
            say(done, total)

        def origin(label: str) -> None:
            if label != where[0]:
                where[0] = label
                if status.fetch is not None:
                    say(status.fetch.bytes_done, status.fetch.bytes_total)

        weights = await self.fetcher.ensure(
            msg.model,
            w.source,
            sha256=w.sha256,
            allow_pickle=w.allow_pickle,
            mirror_url=w.mirror_url,
            mirror_urls=list(w.mirror_urls),
            mirror_token=w.mirror_token,
            allow_internet=w.allow_internet,
            on_progress=progress,
            on_origin=origin if w.mirror_urls else None,
        )
        return str(weights.path)

    # ---- reports ---------------------------------------------------------

    def _on_event(self, ev: ShardEvent) -> None:
        status = self.status.get(ev.shard_id)
        if status is None:
            info = self.supervisor.get(ev.shard_id)
            status = ShardStatus(
                shard_id=ev.shard_id, replica_id=info.replica_id if info else ev.shard_id
            )
            self.status[ev.shard_id] = status
        status.adopted = ev.shard_id in self._adopted
        if ev.pid:
            status.pid = ev.pid
            if self.doors is not None:
                self.doors.set_engine_pid(ev.shard_id, ev.pid)  # the door ends some time after it
        if ev.port:
            record = self.doors.record(ev.shard_id) if self.doors is not None else None
            # Where the gateway reaches it: the door, where it has one.
            status.port = record.port if record is not None and record.port else ev.port
        if ev.exit_code is not None:
            status.exit_code = ev.exit_code
        self._set(status, ev.state, ev.reason)

    def _set(self, status: ShardStatus, state: str, reason: str) -> None:
        status.state, status.reason = state, reason
        status.since_unix_ms = int(time.time() * 1000)
        if state != "fetching":
            status.fetch = None
        log.info("shard %s: %s (%s)", status.shard_id, state, reason)
        self._report(status)
        for listener in self.listeners:
            listener()

    def _report(self, status: ShardStatus) -> None:
        send = self._send
        if send is None:
            return  # said again in Register when the stream is back
        # A copy: later changes to the status must not rewrite a queued report.
        send(AgentMessage(shard_status=ShardStatus.parse(bytes(status))))

    async def close(self) -> None:
        for task in list(self._starting.values()):
            task.cancel()
        # The agent's own shutdown leaves engines running: they are adopted on return.
        await self.supervisor.close(leave_running=True)
        if self.doors is not None:
            await self.doors.close_all()
