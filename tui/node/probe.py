"""One look at this node for the console: the agent's status, the GPUs, the control planes.

``NodeProbe.look()`` asks, side by side and each capped at 2 s: the agent's
status socket, NVML (through the ``GpuReader``), and each control plane's
agent port (a TCP connect: does anything answer there?). Whatever fails is
kept as a line saying what happened and what to do; ``look`` never raises.
With the agent down, the control planes come from agent.yaml.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.agent_status import PROBE_TIMEOUT_S, AgentStatus, read_status
from llmgw.aio import within
from llmgw.config import load_agent_config, split_host_port
from llmgw.errors import LlmgwError
from tui.node.gpus import GpuReader, GpuReport


@dataclass(frozen=True)
class PlaneAnswer:
    """Whether a control plane's agent port answers a TCP connect, from here, now."""

    address: str
    answers: bool
    words: str  # "answers in 3 ms", "no answer: connection refused"


@dataclass
class NodeFacts:
    """What one look found; ``*_error`` says why a part is missing."""

    read_unix: float
    status: AgentStatus | None = None
    status_error: LlmgwError | None = None
    gpus: GpuReport = field(default_factory=GpuReport)
    # Every control plane, as the agent reports them or as agent.yaml lists them.
    plane_addresses: list[str] = field(default_factory=list)
    planes: dict[str, PlaneAnswer] = field(default_factory=dict)
    planes_error: str = ""


async def knock(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> PlaneAnswer:
    """Open and close a TCP connection to ``address``; at most ``timeout_s``."""
    try:
        host, port = split_host_port(address)
    except ValueError as e:
        return PlaneAnswer(address, False, f"not an address: {e}")
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return PlaneAnswer(address, False, f"no answer within {timeout_s:g} s")
    except OSError as e:
        return PlaneAnswer(address, False, f"no answer: {_words(e)}")
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass  # it answered; how it hangs up does not matter
    return PlaneAnswer(address, True, f"answers in {(time.monotonic() - started) * 1000:.0f} ms")


def _words(e: OSError) -> str:
    """ "connection refused", "name or service not known": not asyncio's "Connect call failed"."""
    if isinstance(e, socket.gaierror) or not e.errno or e.errno < 0:
        return (e.strerror or str(e)).lower()
    return os.strerror(e.errno).lower()


class NodeProbe:
    """Looks at this node: ``status_socket`` (the agent's), ``agent_yaml``, and ``gpus``."""

    def __init__(
        self,
        status_socket: Path,
        agent_yaml: Path,
        gpus: GpuReader,
        *,
        timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self.status_socket = status_socket
        self.agent_yaml = agent_yaml
        self.gpus = gpus
        self.timeout_s = timeout_s
        # A hung NVML call cannot be cancelled (it runs in a thread): while
        # one is out, later looks say so instead of piling threads up.
        self._gpu_call: asyncio.Future[GpuReport] | None = None

    async def look(self) -> NodeFacts:
        facts = NodeFacts(read_unix=time.time())
        status_task = asyncio.ensure_future(self._status(facts))
        gpu_task = asyncio.ensure_future(self._read_gpus())
        await status_task
        addresses = self._addresses(facts)
        answers = await asyncio.gather(*(knock(a, self.timeout_s) for a in addresses))
        facts.plane_addresses = addresses
        facts.planes = {a.address: a for a in answers}
        facts.gpus = await gpu_task
        return facts

    async def _status(self, facts: NodeFacts) -> None:
        try:
            facts.status = await read_status(self.status_socket, timeout_s=self.timeout_s)
        except LlmgwError as e:
            facts.status_error = e

    def _addresses(self, facts: NodeFacts) -> list[str]:
        if facts.status is not None:
            return [p.address for p in facts.status.control_planes]
        try:
            return list(load_agent_config(self.agent_yaml).control_planes)
        except LlmgwError as e:
            facts.planes_error = e.message + (f" — {e.hint}" if e.hint else "")
            return []

    async def _read_gpus(self) -> GpuReport:
        if self._gpu_call is None or self._gpu_call.done():
            self._gpu_call = asyncio.ensure_future(asyncio.to_thread(self.gpus.read))
        try:
            return await within(asyncio.shield(self._gpu_call), self.timeout_s)
        except TimeoutError:
            return GpuReport(
                note=f"NVML did not answer within {self.timeout_s:g} s "
                "(a hung driver? see: nvidia-smi, dmesg)"
            )
        except Exception as e:  # noqa: BLE001 (a reader's bug is one line, not a dead screen)
            return GpuReport(note=f"reading the GPUs failed: {e}")
