"""gRPC messages past a cap are refused with RESOURCE_EXHAUSTED, both ways, never read whole."""

from __future__ import annotations

import asyncio
import struct

import grpclib.const
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from llmgw.grpcsize import capped_codec
from proto.llmgw.v1 import GetModelRequest

MIB = 1 << 20
PATH = "/tests.Echo/Echo"


class Echo:
    """A unary service answering a name ``times`` as long as it was sent."""

    def __init__(self, times: int = 1) -> None:
        self.calls = 0
        self.times = times

    def __mapping__(self):
        return {
            PATH: grpclib.const.Handler(
                self.echo, grpclib.const.Cardinality.UNARY_UNARY, GetModelRequest, GetModelRequest
            )
        }

    async def echo(self, stream) -> None:
        request = await stream.recv_message()
        self.calls += 1
        await stream.send_message(GetModelRequest(name=request.name * self.times))


async def _serve(service, codec=None) -> tuple[Server, int]:
    server = Server([service], codec=codec)
    await server.start("127.0.0.1", 0)
    return server, server._server.sockets[0].getsockname()[1]


async def _ask(channel: Channel, name: str) -> str:
    async with channel.request(
        PATH, grpclib.const.Cardinality.UNARY_UNARY, GetModelRequest, GetModelRequest
    ) as stream:
        await stream.send_message(GetModelRequest(name=name), end=True)
        return (await stream.recv_message()).name


async def test_a_server_refuses_a_message_over_its_cap_and_serves_the_next_call():
    # Guards grpclib reading whatever length a message's prefix claims (up to 4 GiB)
    # into memory before anything looked at it.
    service = Echo()
    server, port = await _serve(service, capped_codec(1 * MIB))
    channel = Channel("127.0.0.1", port)
    try:
        for _ in range(3):  # each refusal gives its buffered bytes back to the connection
            with pytest.raises(GRPCError) as err:
                await _ask(channel, "x" * (3 * MIB))
            assert err.value.status is Status.RESOURCE_EXHAUSTED
            assert "over the 1,048,576 bytes a message may be" in err.value.message
        assert service.calls == 0
        assert await asyncio.wait_for(_ask(channel, "small"), 5) == "small"
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_a_prefix_claiming_4_gib_is_refused_before_any_of_it_is_read():
    service = Echo()
    server, port = await _serve(service, capped_codec(1 * MIB))
    channel = Channel("127.0.0.1", port)
    try:
        with pytest.raises(GRPCError) as err:
            async with channel.request(
                PATH, grpclib.const.Cardinality.UNARY_UNARY, GetModelRequest, GetModelRequest
            ) as stream:
                await stream.send_request()
                # The prefix of a message of 4 GiB - 1, then ten bytes of it: no more comes.
                await stream._stream.send_data(b"\0" + struct.pack(">I", 2**32 - 1) + b"x" * 10)
                await asyncio.wait_for(stream.recv_message(), 5)
        assert err.value.status is Status.RESOURCE_EXHAUSTED
        assert "4,294,967,295 bytes" in err.value.message
        assert service.calls == 0
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_a_client_refuses_an_answer_over_its_cap():
    server, port = await _serve(Echo(times=1024))  # no cap of its own
    channel = Channel("127.0.0.1", port, codec=capped_codec(1 * MIB))
    try:
        with pytest.raises(GRPCError) as err:
            await _ask(channel, "y" * 2048)  # answered with 2 MiB
        assert err.value.status is Status.RESOURCE_EXHAUSTED
        assert await _ask(channel, "z") == "z" * 1024
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_a_message_over_the_senders_cap_is_never_sent():
    service = Echo()
    server, port = await _serve(service)
    channel = Channel("127.0.0.1", port, codec=capped_codec(1 * MIB))
    try:
        with pytest.raises(GRPCError) as err:
            await _ask(channel, "x" * (2 * MIB))
        assert err.value.status is Status.RESOURCE_EXHAUSTED
        assert "a GetModelRequest of 2,097,157 bytes is over" in err.value.message
        assert service.calls == 0
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
