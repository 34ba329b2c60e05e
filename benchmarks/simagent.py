"""The simulated agent of benchmarks/agents.py: one mutual-TLS stream, beating on time.

Each speaks the real protocol (Register, then a Heartbeat every interval,
acknowledging any command with a refusal) over its own grpclib channel, so
gatewayd sees exactly what a thousand real agents would send it.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from dataclasses import dataclass, field

import grpclib.const
from grpclib.client import Channel

from llmgw import __version__
from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from llmgw.keepalive import keepalive_config
from proto.llmgw.v1 import (
    AgentMessage,
    CommandAck,
    ControlMessage,
    Gpu,
    GpuSample,
    Heartbeat,
    HostFacts,
    Register,
)

CONNECT_PATH = "/llmgw.v1.AgentService/Connect"
HOST = "127.0.0.1"
GIB = 1024**3
# Same as the real agent: a control plane that says nothing for 30 s is not one.
REGISTERED_TIMEOUT_S = 30.0
# A heartbeat not visible this long after it was sent is counted missed, and
# its poller moves on (5x the goal: far enough to tell "slow" from "lost").
VISIBLE_GIVE_UP_S = 5.0
# Pause between two polls of one node while a heartbeat is pending: bounds the
# polling load on gatewayd, costs at most 5 ms of resolution against a 1 s goal.
POLL_GAP_S = 0.005
BENCH_REFUSAL = "a benchmark agent runs nothing"


# --- the simulated agent -------------------------------------------------------


@dataclass
class Recorder:
    """What the agents note while a window is open (appends only: one asyncio loop)."""

    recording: bool = False
    beats: int = 0
    send_lag_s: list[float] = field(default_factory=list)

    def start(self) -> None:
        self.recording, self.beats, self.send_lag_s = True, 0, []

    def stop(self) -> None:
        self.recording = False


class SimAgent:
    """One node as gatewayd sees it: a certificate, a Register, a heartbeat every interval."""

    def __init__(
        self,
        node_id: str,
        ssl_ctx: ssl.SSLContext,
        port: int,
        *,
        gpus: int,
        recorder: Recorder,
        rng: random.Random,
    ):
        self.node_id = node_id
        self._ssl, self._port, self._gpus = ssl_ctx, port, gpus
        self._recorder, self._rng = recorder, rng
        self.state = "idle"  # connecting → registered → dropped | stopped; or failed
        self.error = ""
        self.seq = 0
        self.commands = 0
        self.registered = asyncio.Event()
        self.stopping = False
        # Called with (seq, monotonic send time) for agents in the latency sample.
        self.on_sent = None

    async def run(self) -> None:
        self.state = "connecting"
        channel = Channel(HOST, self._port, ssl=self._ssl, config=keepalive_config())
        try:
            async with channel.request(
                CONNECT_PATH, grpclib.const.Cardinality.STREAM_STREAM, AgentMessage, ControlMessage
            ) as stream:
                await stream.send_message(AgentMessage(register=self._register()))
                first = await asyncio.wait_for(stream.recv_message(), REGISTERED_TIMEOUT_S)
                if first is None or first.registered is None:
                    self._end("failed", "the stream did not answer Register with Registered")
                    return
                interval_s = max(first.registered.heartbeat_interval_ms, 100) / 1000
                self.state = "registered"
                self.registered.set()
                beats = asyncio.create_task(self._beat(stream, interval_s))
                drain = asyncio.create_task(self._drain(stream))
                try:
                    done, _ = await asyncio.wait(
                        {beats, drain}, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in done:
                        task.result()  # raises what ended the session
                    self._end("dropped", "gatewayd closed the stream")
                finally:
                    for task in (beats, drain):
                        task.cancel()
                    await asyncio.gather(beats, drain, return_exceptions=True)
        except Exception as e:  # noqa: BLE001 - what ended a session is counted and shown
            self._end(
                "dropped" if self.registered.is_set() else "failed", f"{e.__class__.__name__}: {e}"
            )
        finally:
            channel.close()
            if not self.registered.is_set():
                self.registered.set()  # whoever waits for the ramp must not wait on us

    def _end(self, state: str, error: str) -> None:
        self.state, self.error = ("stopped", "") if self.stopping else (state, error)

    async def _beat(self, stream, interval_s: float) -> None:
        # A random phase per agent: a thousand agents started within a few
        # seconds must not all beat in the same millisecond.
        due = time.monotonic() + self._rng.uniform(0, interval_s)
        while True:
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic()
            if self._recorder.recording:
                self._recorder.beats += 1
                self._recorder.send_lag_s.append(now - due)
            self.seq += 1
            if self.on_sent is not None:
                self.on_sent(self.seq, now)
            await stream.send_message(AgentMessage(heartbeat=self._heartbeat()))
            due += interval_s
            if due < now:  # this process fell a whole beat behind: skip, don't burst
                due = now + interval_s

    async def _drain(self, stream) -> None:
        """Read what the control plane sends until it ends; refuse commands, as they come."""
        async for msg in stream:
            if msg.registered is None:  # a command: this agent runs nothing, and says so
                self.commands += 1
                ack = CommandAck(command_id=msg.command_id, ok=False, error=BENCH_REFUSAL)
                await stream.send_message(AgentMessage(ack=ack))

    def _register(self) -> Register:
        return Register(
            node_id=self.node_id,
            hostname=self.node_id,
            version=__version__,
            host=HostFacts(
                hostname=self.node_id,
                os_id="debian",
                os_version_id="12",
                arch="x86_64",
                cpu_count=32,
                memory_total_bytes=256 * GIB,
                disk_free_bytes=900 * GIB,
                data_dir="/var/lib/llmgw-agent",
                avx2=True,
                glibc_version="2.36",
                kernel="6.1.0",
                fake=True,
                probe="benchmark",
            ),
            gpus=[
                Gpu(
                    index=i,
                    uuid=f"GPU-{self.node_id}-{i}",
                    name="NVIDIA H100 80GB HBM3",
                    memory_total_bytes=80 * GIB,
                    compute_capability="9.0",
                    pci_bus_id=f"00000000:{i + 1:02X}:00.0",
                    mig_mode="disabled",
                )
                for i in range(self._gpus)
            ],
            installable_engines=["llama.cpp", "sim"] + (["vllm", "sglang"] if self._gpus else []),
        )

    def _heartbeat(self) -> Heartbeat:
        return Heartbeat(
            seq=self.seq,
            sent_unix_ms=int(time.time() * 1000),
            gpus=[
                GpuSample(
                    index=i,
                    memory_used_bytes=self._rng.randrange(80 * GIB),
                    utilization_percent=self._rng.randrange(101),
                    temperature_c=55,
                )
                for i in range(self._gpus)
            ],
            disk_free_bytes=900 * GIB - self.seq,
            memory_available_bytes=200 * GIB - self._rng.randrange(GIB),
        )


class VisibilityProbe:
    """Times, for one agent, each heartbeat from its send to ``get_node`` showing its seq."""

    def __init__(self, agent: SimAgent, admin: AdminClient):
        self.node_id = agent.node_id
        self._admin = admin
        self._pending: asyncio.Queue[tuple[int, float]] = asyncio.Queue()
        self.active = False
        self.latencies_s: list[float] = []
        self.missed = 0
        self.polls = 0
        self.errors = 0
        self._busy = False
        agent.on_sent = self._sent

    @property
    def idle(self) -> bool:
        """Nothing sent is still waiting to be seen."""
        return not self._busy and self._pending.empty()

    def _sent(self, seq: int, at: float) -> None:
        if self.active:
            self._pending.put_nowait((seq, at))

    async def run(self) -> None:
        while True:
            seq, sent_at = await self._pending.get()
            self._busy = True
            give_up = sent_at + VISIBLE_GIVE_UP_S
            while True:
                try:
                    seen = (await self._admin.get_node(self.node_id)).heartbeat_seq
                except LlmgwError:  # counted and shown; the beat may still be seen later
                    self.errors += 1
                    seen = 0
                self.polls += 1
                now = time.monotonic()
                if seen >= seq:
                    self.latencies_s.append(now - sent_at)
                    break
                if now >= give_up:
                    self.missed += 1
                    break
                await asyncio.sleep(POLL_GAP_S)
            self._busy = False
