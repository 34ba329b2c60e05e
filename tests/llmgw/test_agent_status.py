"""Reading the agent's status socket: every way it can fail is one line saying what to do."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import pytest

from llmgw.agent_status import (
    START_HINT,
    AgentNotRunning,
    AgentStatus,
    AgentStatusError,
    http_response,
    read_status,
)


@contextlib.asynccontextmanager
async def answering(path, answer: bytes | None):
    """A unix socket server that reads the request and sends ``answer`` (None: says nothing)."""

    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if answer is None:
            await asyncio.Event().wait()
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(serve, path=str(path))
    try:
        yield
    finally:
        server.close()


async def test_no_socket_means_the_agent_is_not_running_and_how_to_start_it(tmp_path):
    with pytest.raises(AgentNotRunning, match="the agent is not running here") as err:
        await read_status(tmp_path / "run" / "agent-status.sock")
    assert err.value.hint == START_HINT
    assert "llmgw agent" in err.value.hint and "systemctl start llmgw-agent" in err.value.hint


async def test_a_socket_file_nobody_serves_is_left_from_an_earlier_run(tmp_path):
    path = tmp_path / "agent-status.sock"
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(path))
    left.close()
    with pytest.raises(AgentNotRunning, match="left from an earlier run"):
        await read_status(path)


async def test_a_silent_agent_is_given_up_on_with_what_to_do(tmp_path):
    path = tmp_path / "s.sock"
    async with answering(path, None):
        with pytest.raises(AgentStatusError, match="did not answer") as err:
            await read_status(path, timeout_s=0.2)
    assert "restart it" in err.value.hint


async def test_something_else_on_the_socket_is_not_taken_for_a_status(tmp_path):
    path = tmp_path / "s.sock"
    async with answering(path, b"SSH-2.0-OpenSSH_9.2\r\n\r\n"):
        with pytest.raises(AgentStatusError, match="not a status"):
            await read_status(path)


async def test_a_refusal_carries_the_agents_own_words(tmp_path):
    path = tmp_path / "s.sock"
    body = json.dumps({"error": "only /status is served"}).encode()
    async with answering(path, http_response(404, body)):
        with pytest.raises(AgentStatusError, match="Not Found: only /status is served"):
            await read_status(path)


async def test_a_newer_agents_extra_fields_are_ignored(tmp_path):
    """Regression guard: a console older than its agent must still read the status."""
    path = tmp_path / "s.sock"
    doc = AgentStatus(node_id="n1", version="9.9").model_dump(mode="json")
    doc["something_new"] = {"nested": True}
    async with answering(path, http_response(200, json.dumps(doc).encode())):
        status = await read_status(path)
    assert status.node_id == "n1" and status.version == "9.9"


async def test_a_status_missing_its_node_id_is_refused_as_another_version(tmp_path):
    path = tmp_path / "s.sock"
    async with answering(path, http_response(200, b'{"state": "connected"}')):
        with pytest.raises(AgentStatusError, match="not as expected") as err:
            await read_status(path)
    assert "different llmgw versions" in err.value.hint
