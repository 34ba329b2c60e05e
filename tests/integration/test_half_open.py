"""A half-open stream (peer silent, socket open) is noticed by keepalive pings."""

from __future__ import annotations

import asyncio
import contextlib

from tests.cluster_fixture import wait_for


class FreezableProxy:
    """A TCP relay on 127.0.0.1 that can go silent while keeping its sockets open."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.frozen = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader, writer):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            t = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(t)

    async def _pipe(self, src, dst):
        while not self.frozen.is_set():
            data = await src.read(65536)
            if not data or self.frozen.is_set():
                break
            dst.write(data)
            await dst.drain()
        await asyncio.Event().wait()  # frozen: hold the socket, say nothing

    async def close(self):
        self._server.close()
        for t in self._tasks:
            t.cancel()
        for w in self._writers:
            w.close()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def test_an_agent_notices_a_silent_control_plane_and_fails_over(cluster):
    proxy = FreezableProxy(cluster.server.ports["agent"])
    proxy_port = await proxy.start()
    try:
        cfg = cluster.agent_config("via-proxy")
        cfg.control_planes = [f"127.0.0.1:{proxy_port}", cluster.agent_address]
        agent, _, _ = await cluster.start_agent("via-proxy", cfg=cfg)
        await wait_for(lambda: agent.connected_to == cfg.control_planes[0])
        proxy.frozen.set()
        # Nothing is closed; only the keepalive ping going unanswered can tell.
        await wait_for(lambda: agent.connected_to == cluster.agent_address, attempts=600)

        async def ready_again():
            async with cluster.admin() as admin:
                node = await admin.get_node("via-proxy")
            return node.state == "ready" and node.connected

        await wait_for(ready_again, attempts=200)
    finally:
        await proxy.close()
