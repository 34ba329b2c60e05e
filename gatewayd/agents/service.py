"""AgentService.Connect: one bidirectional stream per node, over mutual TLS.

The stream must open with Register. The node id it claims must equal the
common name of the client certificate the TLS layer verified against the
cluster CA: a node can only ever speak for itself. A certificate revoked by
``llmgw node remove`` is refused, and a stream open with it is closed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

import grpclib.const
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.server import Stream

from gatewayd.agents.revocations import Revocations, peer_serial
from gatewayd.nodes.registry import NodeRegistry
from llmgw.aio import within
from llmgw.config import check_name
from llmgw.tls.tlsconf import peer_common_name
from proto.llmgw.v1 import AgentMessage, ControlMessage, ControlPlanes, Registered

log = logging.getLogger(__name__)

# An agent that connects but says nothing is not kept waiting on a slot forever.
REGISTER_TIMEOUT_S = 30.0

_command_ids = itertools.count(1)


def new_command_id() -> str:
    return f"c{next(_command_ids)}"


class AgentService:
    """grpclib handler for /llmgw.v1.AgentService/Connect.

    Written against the raw grpclib stream, not the generated base class,
    because it needs the peer certificate and full control of both
    directions of the stream.
    """

    def __init__(
        self,
        registry: NodeRegistry,
        *,
        heartbeat_interval_s: float,
        revocations: Revocations | None = None,
        leading: Callable[[], bool] = lambda: True,
        control_planes: Callable[[], tuple[list[str], str]] = lambda: ([], ""),
    ):
        self._registry = registry
        # Only the leader holds agents' streams; a standby names the leader and
        # ends the stream, so the agent dials the leader next.
        self._leading = leading
        # (every live control plane's agent address with the leader's first, the leader's).
        self._control_planes = control_planes
        self._revocations = revocations
        self._heartbeat_interval_ms = int(heartbeat_interval_s * 1000)
        self.stopping = False

    def __mapping__(self):
        return {
            "/llmgw.v1.AgentService/Connect": grpclib.const.Handler(
                self.connect,
                grpclib.const.Cardinality.STREAM_STREAM,
                AgentMessage,
                ControlMessage,
            )
        }

    async def connect(self, stream: Stream[AgentMessage, ControlMessage]) -> None:
        peer_addr = stream.peer.addr()
        host = peer_addr[0] if peer_addr else ""
        peercert = stream.peer.cert()
        cn = peer_common_name(peercert)
        serial = peer_serial(peercert)
        revocations = self._revocations
        if revocations is not None and revocations.is_revoked(serial):
            log.warning(
                "refused an agent stream from %s: the certificate of %r is revoked", host, cn
            )
            raise GRPCError(Status.PERMISSION_DENIED, _revoked_words(cn or ""))
        try:
            first = await within(stream.recv_message(), REGISTER_TIMEOUT_S)
        except TimeoutError:
            raise GRPCError(Status.DEADLINE_EXCEEDED, "no Register message within 30 s") from None
        if first is None or first.register is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "the stream must open with Register")
        reg = first.register
        try:
            check_name(reg.node_id, what="node id")
        except ValueError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, str(e)) from None
        if cn != reg.node_id:
            log.warning(
                "refused an agent stream from %s: its certificate is for %r but it registers as %r",
                host,
                cn,
                reg.node_id,
            )
            raise GRPCError(
                Status.PERMISSION_DENIED,
                f"the client certificate is for {cn!r}, not for node {reg.node_id!r}; "
                f"issue one with: llmgw node cert {reg.node_id}",
            )

        if not self._leading():
            addresses, leader = self._control_planes()
            await stream.send_message(
                ControlMessage(
                    command_id=new_command_id(),
                    control_planes=ControlPlanes(addresses=addresses, leader=leader),
                )
            )
            # Ended with OK, not an error status: grpclib may deliver an error's
            # trailers before the message, and the agent must read the message.
            log.info(
                "agent %s dialled a standby: sent it to %s", reg.node_id, leader or "no leader yet"
            )
            return
        session = await self._registry.register(reg, address=host)
        await stream.send_message(
            ControlMessage(
                command_id=new_command_id(),
                registered=Registered(
                    node_id=reg.node_id, heartbeat_interval_ms=self._heartbeat_interval_ms
                ),
            )
        )
        outbox: asyncio.Queue[ControlMessage] = asyncio.Queue()
        addresses, leader = self._control_planes()
        if addresses:
            # The failover list as the cluster knows it now, the leader first.
            outbox.put_nowait(
                ControlMessage(
                    command_id=new_command_id(),
                    control_planes=ControlPlanes(addresses=addresses, leader=leader),
                )
            )
        receiver = asyncio.create_task(self._receive(stream, reg.node_id, session))
        sender = asyncio.create_task(self._send(stream, outbox))
        why = {"text": "", "revoked": False}

        def close(reason: str) -> None:
            why["text"] = reason
            receiver.cancel()

        def revoked(reason: str) -> None:
            why["revoked"] = True
            close(reason)

        self._registry.bind_session(reg.node_id, session, close, outbox.put_nowait)
        if revocations is not None and serial:
            revocations.opened(reg.node_id, serial, revoked)
        try:
            why["text"] = await receiver
        except asyncio.CancelledError:
            if why["revoked"]:
                raise GRPCError(Status.PERMISSION_DENIED, _revoked_words(reg.node_id)) from None
            if why["text"]:  # closed by the registry (superseded): not our own cancellation
                return
            # grpclib cancels the handler when the connection drops (keepalive
            # timeout, reset) and when the server stops.
            why["text"] = (
                "the control plane is stopping" if self.stopping else "the connection was lost"
            )
            raise
        finally:
            for task in (receiver, sender):
                task.cancel()
            if revocations is not None and serial:
                revocations.closed(serial, revoked)
            # Shielded: grpclib may cancel this handler more than once as the
            # connection goes, and the node's new state must still be written.
            await asyncio.shield(self._registry.disconnected(reg.node_id, session, why["text"]))

    @staticmethod
    async def _send(stream: Stream, outbox: asyncio.Queue[ControlMessage]) -> None:
        """Commands to the agent, in order; the receiver notices a broken stream."""
        try:
            while True:
                await stream.send_message(await outbox.get())
        except (StreamTerminatedError, ConnectionError, OSError):
            return

    async def _receive(self, stream: Stream, node_id: str, session: int) -> str:
        """Read the agent's messages until the stream ends; returns why it ended."""
        try:
            async for msg in stream:
                if msg.heartbeat is not None:
                    await self._registry.heartbeat(node_id, session, msg.heartbeat)
                elif msg.ack is not None:
                    self._registry.acked(msg.ack)
                    if not msg.ack.ok:
                        log.warning(
                            "node %s refused command %s: %s",
                            node_id,
                            msg.ack.command_id,
                            msg.ack.error,
                        )
                elif msg.shard_status is not None:
                    await self._registry.shard_status(node_id, session, msg.shard_status)
                elif msg.engine_status is not None:
                    self._registry.engine_status(node_id, session, msg.engine_status)
                elif msg.weights is not None:
                    self._registry.weights_report(node_id, session, msg.weights)
        except StreamTerminatedError:
            return "the connection was lost"
        except (ConnectionError, OSError) as e:
            return f"the connection failed ({e.__class__.__name__})"
        return "the agent stopped"


def _revoked_words(node_id: str) -> str:
    return (
        f"the certificate of node {node_id!r} was revoked (llmgw node remove); "
        "to bring the machine back, add it again: llmgw node add HOST"
    )
