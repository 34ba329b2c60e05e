"""The agent's local status socket: what it answers, and the client that reads it.

agentd serves one document on a unix socket under the run dir
(``Paths.agent_status_socket``); the node console (``sudo llmgw`` on a node)
reads it. The exchange is a tiny HTTP/1.0 ``GET /status`` answered with JSON
and a closed connection, so an operator can read it with nothing but curl:

    curl --unix-socket /run/llmgw/agent-status.sock http://agent/status

It lives in the core because both sides need it and neither may import the
other: agentd builds an ``AgentStatus`` and frames it with ``http_response``;
the console calls ``read_status``. The socket is read-only and needs no token:
it says nothing secret, and its file mode (0600, root's on a node) is the
access control.

    LlmgwError
    ├── AgentNotRunning     nothing serves the socket (no agent, or a stale file)
    └── AgentStatusError    something answered, or refused, but no status came back
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from llmgw.errors import ExitCode, LlmgwError
from llmgw.inventory import GpuInfo

SCHEMA_VERSION = 1
STATUS_TARGET = "/status"
# Every probe of the node console is capped at this (the reference's node
# console caps each of its commands at 2 s as well): a stuck agent must
# never freeze the screen.
PROBE_TIMEOUT_S = 2.0
# A status document is a few KiB; anything far larger is not one.
MAX_RESPONSE_BYTES = 4 * 2**20
# sun_path holds 108 bytes with its NUL; longer paths are reached through
# the directory's descriptor (see ``unix_address``).
UNIX_PATH_MAX = 107

START_HINT = "start it: sudo systemctl start llmgw-agent (or run: llmgw agent)"

AgentState = Literal["starting", "connecting", "connected", "reconnecting", "stopping"]


class AgentNotRunning(LlmgwError):
    """No agent serves the status socket: none runs, or the file is left from an earlier one."""

    exit_code = ExitCode.UNREACHABLE


class AgentStatusError(LlmgwError):
    """The status socket is there but gave no status: refused, silent or garbled."""

    exit_code = ExitCode.ERROR


# ---- the document --------------------------------------------------------------


class ControlPlaneState(BaseModel):
    """One control plane the agent dials, as the agent saw it last."""

    address: str
    # "agent.yaml": listed there; "cluster": a newer failover list from the cluster.
    source: str = "agent.yaml"
    connected: bool = False
    # When the agent last registered with it (unix seconds); None: never since it started.
    last_success_unix: float | None = None
    last_error: str = ""
    last_error_unix: float | None = None


class EngineReport(BaseModel):
    """One engine version on this node, in the node's own words."""

    engine: str
    version: str = ""
    variant: str = ""
    state: str = ""  # installing, installed, failed, skipped
    message: str = ""


class ShardReport(BaseModel):
    """One engine process this node runs (or ran) for a replica."""

    shard_id: str
    replica_id: str = ""
    # Model and engine as the control plane asked; "" for an engine adopted
    # across an agent restart until the control plane names it again.
    model: str = ""
    engine: str = ""
    state: str = ""
    reason: str = ""
    port: int = 0
    pid: int = 0
    gpu_indexes: list[int] = []
    compute_backend: str = ""
    adopted: bool = False
    since_unix: float | None = None


class DiskReport(BaseModel):
    """Free space where the node keeps something big (weights, engines)."""

    what: str  # "weights", "engines"
    path: str
    free_bytes: int = 0
    total_bytes: int = 0
    error: str = ""  # why the figures are missing


class AgentWarning(BaseModel):
    at_unix: float
    text: str


class SettingInForce(BaseModel):
    """One setting the agent changes while it runs: its value in force and where it comes from."""

    key: str
    value: str
    # "agent.yaml", "cluster" (the kept settings), "environment" (an LLMGW_ variable) or "built in".
    source: str


class AgentStatus(BaseModel):
    """Everything the agent tells the node console; fields are added, never renamed."""

    schema_version: int = SCHEMA_VERSION
    node_id: str
    hostname: str = ""
    version: str = ""
    pid: int = 0
    # One of AgentState; a plain str so a console reads an agent with newer states.
    state: str = "starting"
    state_since_unix: float | None = None
    started_unix: float | None = None
    connected_to: str = ""
    # Where the agent's hardware facts come from: "nvml", or "fake:<fixture>".
    probe: str = ""
    # Why the agent reports no GPUs ("no NVIDIA driver"); "" when it has some.
    gpu_note: str = ""
    control_planes: list[ControlPlaneState] = []
    engines: list[EngineReport] = []
    shards: list[ShardReport] = []
    disks: list[DiskReport] = []
    # Oldest first, the last hour only.
    warnings: list[AgentWarning] = []
    # The host's memory bandwidth as the agent measured it (0: not yet).
    mem_bandwidth_gbs: float = 0.0
    # The cards and MIG instances the agent reports to the cluster, with
    # their links (PCIe, NVLink); what NVML alone does not say per index.
    gpus: list[GpuInfo] = []
    # The live settings in force and where each comes from; the kept settings'
    # version the cluster last sent (0: none yet).
    settings: list[SettingInForce] = []
    settings_version: int = 0


# ---- framing (both sides) ------------------------------------------------------

REQUEST = f"GET {STATUS_TARGET} HTTP/1.0\r\nHost: agent\r\n\r\n".encode()
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


def http_response(code: int, body: bytes) -> bytes:
    """One whole HTTP/1.0 response carrying JSON."""
    head = (
        f"HTTP/1.0 {code} {_REASONS.get(code, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def error_body(text: str) -> bytes:
    return json.dumps({"error": text}).encode()


def parse_response(raw: bytes) -> AgentStatus:
    """The status in an HTTP/1.0 response; AgentStatusError for anything else."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise AgentStatusError(
            "the agent's status socket answered something that is not a status",
            hint="is another program listening there? restart the agent",
        )
    if parts[1] != "200":
        try:
            said = json.loads(body).get("error", "")
        except (ValueError, AttributeError):
            said = ""
        raise AgentStatusError(
            f"the agent answered {status_line.partition(' ')[2]}" + (f": {said}" if said else ""),
            hint="look at the agent's log (journalctl -u llmgw-agent)",
        )
    try:
        return AgentStatus.model_validate_json(body)
    except ValidationError as e:
        raise AgentStatusError(
            f"the agent's status could not be read: {e.error_count()} fields are not as expected",
            hint="the agent and this console may be different llmgw versions",
        ) from e


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits in sun_path, valid inside the ``with``.

    A long path (a deep LLMGW_HOME, a test's tmp dir) is reached through
    /proc/self/fd/N of its directory, opened for the time of the call.
    """
    text = str(path)
    if len(os.fsencode(text)) <= UNIX_PATH_MAX:
        yield text
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


# ---- the client ----------------------------------------------------------------


async def _exchange(path: Path) -> bytes:
    with unix_address(path) as address:
        reader, writer = await asyncio.open_unix_connection(address)
    try:
        writer.write(REQUEST)
        await writer.drain()
        chunks, size = [], 0
        while size <= MAX_RESPONSE_BYTES and (chunk := await reader.read(65536)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def read_status(path: Path, *, timeout_s: float = PROBE_TIMEOUT_S) -> AgentStatus:
    """Ask the agent on ``path`` how it is; at most ``timeout_s``.

    Raises AgentNotRunning when nothing serves the socket and AgentStatusError
    when something is wrong with what does, each saying what to do.
    """
    try:
        async with asyncio.timeout(timeout_s):
            raw = await _exchange(path)
    except TimeoutError as e:
        raise AgentStatusError(
            f"the agent did not answer on {path} within {timeout_s:g} s",
            hint="it may be stuck: look at its log (journalctl -u llmgw-agent) or restart it",
        ) from e
    except (FileNotFoundError, NotADirectoryError) as e:
        raise AgentNotRunning(
            f"the agent is not running here (no status socket at {path})", hint=START_HINT
        ) from e
    except ConnectionRefusedError as e:
        raise AgentNotRunning(
            f"the agent is not running here ({path} is left from an earlier run)",
            hint=START_HINT,
        ) from e
    except PermissionError as e:
        raise AgentStatusError(
            f"{path} may be read by root only", hint="open the node console as root: sudo llmgw"
        ) from e
    except OSError as e:
        raise AgentStatusError(
            f"the agent's status socket {path} cannot be read: {e.strerror or e}",
            hint="restart the agent",
        ) from e
    if len(raw) > MAX_RESPONSE_BYTES:
        raise AgentStatusError(
            "the agent's status socket answered more than a status can be",
            hint="is another program listening there? restart the agent",
        )
    return parse_response(raw)
