"""The mirror bounds connections per client as the gateway's ports do, with the same piece."""

from __future__ import annotations

import asyncio

from gatewayd.http.guard import PortGuard
from llmgw.config import ConnectionsConfig
from llmgw.connbounds import AddressCounts
from mirrord.http.messages import Response
from mirrord.http.server import HttpServer

REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


async def _open(port: int, source: str = "127.0.0.1"):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(REQUEST)
    await writer.drain()
    return reader, writer


async def _was_reset(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 2) == b""
    except ConnectionResetError:
        return True


async def test_one_client_past_its_bound_is_reset_while_another_still_gets_in():
    # Guards a mirror bounded only in total (1,024): one client could hold every
    # connection and shut all nodes out of the weights, as one did the gateway.
    release = asyncio.Event()

    async def slow(req):
        await release.wait()
        return Response.json({"ok": True})

    srv = HttpServer(slow, "127.0.0.1", 0, max_per_address=3)
    await srv.start()
    held = []
    try:
        for _ in range(3):
            held.append(await _open(srv.port))
        while srv.connections < 3:
            await asyncio.sleep(0.01)
        reader, writer = await _open(srv.port)
        assert await _was_reset(reader)
        writer.close()
        assert srv.refused_per_address == 1 and srv.per_address == {"127.0.0.1": 3}

        other_reader, other = await _open(srv.port, source="127.0.0.2")
        release.set()
        assert (await asyncio.wait_for(other_reader.readline(), 2)).startswith(b"HTTP/1.1 200")
        other.close()
        for _, w in held:
            w.close()
        held.clear()
        while srv.connections:
            await asyncio.sleep(0.01)
        assert srv.per_address == {}
        # Its connections closed, the client is let in again.
        reader, writer = await _open(srv.port)
        assert (await asyncio.wait_for(reader.readline(), 2)).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        release.set()
        for _, w in held:
            w.close()
        await srv.close()


def test_the_mirror_and_the_gateway_count_clients_with_one_piece_and_one_default():
    mirror = HttpServer(lambda req: Response(), "127.0.0.1", 0)
    gateway = PortGuard("http", ConnectionsConfig(), budget=None)
    assert type(mirror.per_address) is type(gateway.per_address) is AddressCounts
    assert mirror.per_address.max_per_address == gateway.max_per_address == 256
