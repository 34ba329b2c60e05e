"""RevokeNode: the agent port refuses a node's certificate from now on.

``llmgw node remove`` calls it with the serial of the certificate it issued
the node; without one, the certificate the node's stream presented (now, or
last since this control plane started) is revoked.
"""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.agents.revocations import Revocations
from gatewayd.store.revoked_records import canonical_serial
from proto.llmgw.v1 import RevokeNodeReply, RevokeNodeRequest

REVOKE_REASON = "revoked by the operator"


class RevokeAdmin:
    """Mixed into AdminService."""

    _revocations: Revocations | None

    async def revoke_node(self, message: RevokeNodeRequest) -> RevokeNodeReply:
        node_id = message.node_id
        if self._revocations is None:
            raise GRPCError(Status.UNAVAILABLE, "this control plane does not revoke certificates")
        serial = message.serial or self._revocations.last_serial(node_id)
        if not serial:
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"no certificate of {node_id!r} is known here: give its serial "
                "(openssl x509 -noout -serial -in node.crt)",
            )
        try:
            serial = canonical_serial(serial)
        except ValueError:
            raise GRPCError(
                Status.INVALID_ARGUMENT, f"{message.serial!r} is not a serial number in hex"
            ) from None
        added, closed = await self._revocations.revoke(
            node_id,
            serial,
            fingerprint_sha256=message.fingerprint_sha256,
            reason=message.reason or REVOKE_REASON,
        )
        note = (
            f"the certificate {serial} of {node_id} is revoked: the agent port refuses it"
            if added
            else f"the certificate {serial} of {node_id} was revoked already"
        )
        if closed:
            note += "; its open stream was closed"
        return RevokeNodeReply(
            node_id=node_id, serial=serial, revoked=added, stream_closed=closed, note=note
        )
