"""The agent's status socket: a real agent against a real gatewayd, read as the node console reads it."""

from __future__ import annotations

import asyncio
import logging
import socket
import stat

import pytest

from agentd.status import StatusBoard, StatusServer
from llmgw import __version__
from llmgw.agent_status import AgentNotRunning, AgentStatus, AgentStatusError, read_status
from tests.cluster_fixture import running_cluster, wait_for


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c


def status_of(cluster, state: str):
    async def read() -> AgentStatus | None:
        try:
            status = await read_status(cluster.paths.agent_status_socket)
        except AgentNotRunning:
            return None  # not serving yet
        return status if status.state == state else None

    return read


async def test_the_socket_names_the_node_and_the_control_plane_it_is_connected_to(cluster):
    await cluster.start_agent("node-s", fixture="l4_24g_x4")
    status = await wait_for(_connected(cluster))
    assert status.node_id == "node-s"
    assert status.version == __version__
    assert status.connected_to == cluster.agent_address
    [plane] = status.control_planes
    assert plane.address == cluster.agent_address and plane.source == "agent.yaml"
    assert plane.connected and plane.last_success_unix and not plane.last_error
    # The agent says where its hardware facts come from: the recorded L4 node.
    assert status.probe == "fake:l4_24g_x4" and status.gpu_note == ""
    assert {d.what for d in status.disks} == {"weights", "engines"}
    assert all(d.free_bytes > 0 and not d.error for d in status.disks)
    assert "sim" in {e.engine for e in status.engines}
    # Read-only and root's (the agent's) alone.
    mode = cluster.paths.agent_status_socket.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


async def test_a_lost_control_plane_is_reconnecting_with_its_error_and_a_warning(cluster):
    # The agent dials gatewayd through a relay; closing the relay is the control
    # plane's process going away (its sockets close, nothing listens any more),
    # which stopping an in-process server does not do to open streams.
    relay = Relay(cluster.server.ports["agent"])
    address = f"127.0.0.1:{await relay.start()}"
    cfg = cluster.agent_config("node-r")
    cfg.control_planes = [address]
    await cluster.start_agent("node-r", cfg=cfg)
    await wait_for(_connected(cluster))
    await relay.close()
    status = await wait_for(_lost(cluster), attempts=400)
    [plane] = status.control_planes
    assert plane.address == address
    assert not plane.connected and plane.last_error and plane.last_success_unix
    assert status.connected_to == ""
    assert any(address in w.text for w in status.warnings)


async def test_the_socket_goes_away_with_the_agent(cluster):
    _, stop, task = await cluster.start_agent("node-g")
    await wait_for(_connected(cluster))
    stop.set()
    await task
    assert not cluster.paths.agent_status_socket.exists()


async def test_a_second_agent_leaves_the_socket_to_the_first_and_says_so(cluster, caplog):
    caplog.set_level(logging.WARNING)
    await cluster.start_agent("first")
    await wait_for(_connected(cluster))
    await cluster.start_agent("second")
    second = cluster.agents[1][0]
    await wait_for(lambda: second.board.state == "connected")
    assert (await read_status(cluster.paths.agent_status_socket)).node_id == "first"
    assert "the node console cannot see this agent" in caplog.text
    # The warning is on the second agent's board only.
    assert any("cannot see this agent" in w.text for w in second.board.warnings())
    assert not any("cannot see this agent" in w.text for w in cluster.agents[0][0].board.warnings())


async def test_a_socket_left_by_a_killed_agent_is_taken_over(cluster):
    path = cluster.paths.agent_status_socket
    path.parent.mkdir(parents=True, exist_ok=True)
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(path))
    left.close()  # the file stays, nothing answers: what a SIGKILL leaves
    await cluster.start_agent("node-k")
    status = await wait_for(_connected(cluster))
    assert status.node_id == "node-k"


async def test_the_socket_answers_only_a_get_of_the_status(tmp_path):
    path = tmp_path / "s.sock"
    server = StatusServer(path, _never_called)
    await server.start()
    try:
        assert await _raw(path, b"POST /status HTTP/1.0\r\n\r\n") == b"HTTP/1.0 405"
        assert await _raw(path, b"GET /admin HTTP/1.0\r\n\r\n") == b"HTTP/1.0 404"
        assert await _raw(path, b"garbage") == b"HTTP/1.0 400"
    finally:
        await server.close()


async def test_a_failing_view_is_a_500_and_the_server_keeps_serving(tmp_path):
    path = tmp_path / "s.sock"

    async def broken() -> AgentStatus:
        raise RuntimeError("the view is broken")

    server = StatusServer(path, broken)
    await server.start()
    try:
        with pytest.raises(AgentStatusError, match="the view is broken"):
            await read_status(path)
        with pytest.raises(AgentStatusError, match="the view is broken"):
            await read_status(path)
    finally:
        await server.close()


async def test_a_socket_path_longer_than_sun_path_still_works(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "agent-status.sock"
    assert len(str(path)) > 108

    async def view() -> AgentStatus:
        return AgentStatus(node_id="deep")

    server = StatusServer(path, view)
    await server.start()
    try:
        assert server.serving
        assert (await read_status(path)).node_id == "deep"
    finally:
        await server.close()
    assert not path.exists()


# ---- the board ------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_warning_is_counted_once_and_an_old_one_is_dropped():
    clock = Clock()
    board = StatusBoard(clock=clock)
    board.warn("AVX2 is missing: llama.cpp's CPU builds will be slow")
    clock.now += 10
    board.warn("control plane cp1:7070 unreachable")
    clock.now += 10
    board.warn("control plane cp1:7070 unreachable")
    assert [w.text for w in board.warnings()] == [
        "AVX2 is missing: llama.cpp's CPU builds will be slow",
        "control plane cp1:7070 unreachable (2 times)",
    ]
    clock.now += 3600 - 15  # the AVX2 warning is now more than an hour old
    assert [w.text for w in board.warnings()] == ["control plane cp1:7070 unreachable (2 times)"]


def test_the_state_is_connecting_before_the_first_success_and_reconnecting_after():
    board = StatusBoard(clock=Clock())
    board.dialing("cp1:7070")
    assert board.state == "connecting"
    board.lost("cp1:7070", "unreachable: connection refused")
    assert board.state == "connecting"
    board.dialing("cp2:7070")
    board.connected("cp2:7070")
    assert board.state == "connected"
    board.lost("cp2:7070", "it closed the stream")
    assert board.state == "reconnecting"
    planes = board.planes(["cp1:7070"], ["cp1:7070", "cp2:7070"], None)
    assert [(p.address, p.source, p.last_error) for p in planes] == [
        ("cp1:7070", "agent.yaml", "unreachable: connection refused"),
        ("cp2:7070", "cluster", "it closed the stream"),
    ]
    assert planes[1].last_success_unix and not planes[0].last_success_unix


# ---- helpers ----------------------------------------------------------------------


def _connected(cluster):
    async def read():
        status = await status_of(cluster, "connected")()
        return status if status and status.control_planes[0].connected else None

    return read


def _lost(cluster):
    async def read():
        status = await status_of(cluster, "reconnecting")()
        if status is None or not status.warnings or not status.control_planes[0].last_error:
            return None
        return status

    return read


class Relay:
    """A TCP relay on 127.0.0.1 to ``port`` that can be closed, connections and all."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)

    @staticmethod
    async def _pipe(src, dst) -> None:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
        dst.close()

    async def close(self) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        for w in self._writers:
            w.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _never_called() -> AgentStatus:
    raise AssertionError("only GET /status reaches the view")


async def _raw(path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(request)
    if not request.endswith(b"\r\n\r\n"):
        writer.write_eof()
    answer = await reader.read()
    writer.close()
    return answer[:12]
