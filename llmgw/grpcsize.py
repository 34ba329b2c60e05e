"""A size cap on gRPC messages, both ways, for grpclib, which has none of its own.

grpclib reads a message's 5-byte prefix and then reads as many bytes as the
prefix says, up to 4 GiB, before anything looks at them: one client sending a
prefix of 4 GiB to the admin port (or a node to the agent port) made the
control plane hold whatever it was sent until it ran out of memory. grpclib
offers no setting for it (its issue #195 asks for one), so:

- ``capped_codec(max_bytes)`` is the codec to give ``Server(codec=…)`` and
  ``Channel(codec=…)``: it refuses to send a message over the cap, with
  RESOURCE_EXHAUSTED naming the message and the cap, before a byte goes;
- receiving, the prefix is read and a message over the receiver's cap is
  refused with RESOURCE_EXHAUSTED before its body is read. grpclib reads
  messages through one function in its server and client modules; that one is
  replaced once, by a function that reads the cap from the stream's codec
  (streams whose codec has none are read as before). The refused stream is
  reset, and the bytes already buffered for it are given back to the
  connection's flow-control window, so the connection serves the next call.

Caps: the agent stream carries registrations, heartbeats and commands of a few
kilobytes (a node of 64 GPUs registers in under 100 KiB); the admin API's
largest replies are lists (usage, replicas) of some megabytes.
"""

from __future__ import annotations

import struct

from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

MIB = 1 << 20
AGENT_MAX_MESSAGE_BYTES = 16 * MIB
ADMIN_MAX_MESSAGE_BYTES = 64 * MIB


class CappedCodec(ProtoCodec):
    """grpclib's protobuf codec, with the most bytes one message may be."""

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes

    def encode(self, message, message_type) -> bytes:
        data = super().encode(message, message_type)
        if len(data) > self.max_message_bytes:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"a {message_type.__name__} of {len(data):,} bytes is over the"
                f" {self.max_message_bytes:,} bytes a message may be; ask for less"
                " (a narrower list, a shorter period)",
            )
        return data


def capped_codec(max_message_bytes: int) -> CappedCodec:
    """The codec for a server or channel whose messages may be at most ``max_message_bytes``."""
    _install()
    return CappedCodec(max_message_bytes)


async def _recv_message(stream, codec, message_type):
    """One message of a stream, as grpclib reads it, refused past the codec's cap unread."""
    prefix = await stream.recv_data(5)
    if not prefix:
        return None
    compressed, size = struct.unpack(">?I", prefix)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not taken")
    cap = getattr(codec, "max_message_bytes", None)
    if cap is not None and size > cap:
        raise GRPCError(
            Status.RESOURCE_EXHAUSTED,
            f"a message of {size:,} bytes came, over the {cap:,} bytes a message may be here",
        )
    data = await stream.recv_data(size)
    if len(data) != size:
        raise GRPCError(
            Status.DATA_LOSS, f"the stream ended {size - len(data):,} bytes into a message"
        )
    return codec.decode(data, message_type)


_installed = False


def _install() -> None:
    global _installed
    if _installed:
        return
    import grpclib.client
    import grpclib.server

    grpclib.server.recv_message = _recv_message
    grpclib.client.recv_message = _recv_message
    _installed = True
