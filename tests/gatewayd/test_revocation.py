"""Revoked node certificates: kept by the store, refused by the agent port, streams closed.

Tests taking ``store`` or ``cluster`` run once per backend (tests/pg_fixture.py).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import grpclib.const
import pytest
from cryptography import x509
from grpclib.exceptions import GRPCError

from gatewayd.agents.revocations import Revocations, peer_serial
from gatewayd.store.revoked_records import RevokedCert, canonical_serial
from proto.llmgw.v1 import AgentMessage, ControlMessage, Register
from tests.cluster_fixture import RawAgentStream, wait_for

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _serial_of(cert_path: str) -> str:
    return canonical_serial(
        x509.load_pem_x509_certificate(Path(cert_path).read_bytes()).serial_number
    )


# ---- the store, on both backends ---------------------------------------------


async def test_a_revoked_certificate_is_kept_once_by_its_serial(store):
    rec = RevokedCert(serial="A1B2", node_id="gpu-a-01", reason="removed", revoked_at=T0)
    assert await store.revoke_cert(rec) is True
    # Revoking the same certificate again changes nothing.
    assert await store.revoke_cert(rec.model_copy(update={"reason": "again"})) is False
    await store.revoke_cert(RevokedCert(serial="FF", node_id="gpu-a-01", revoked_at=T0))
    got = await store.list_revoked_certs()
    assert [(r.serial, r.node_id, r.reason) for r in got] == [
        ("A1B2", "gpu-a-01", "removed"),
        ("FF", "gpu-a-01", ""),
    ]
    assert got[0].revoked_at == T0


async def test_revocations_are_loaded_from_the_store_by_a_control_plane_starting(store):
    # Regression guard: a revocation kept only in memory would let the node
    # back in after a control plane restart.
    first = Revocations(store)
    await first.revoke("gpu-a-01", "00ab")
    later = Revocations(store)
    await later.load()
    assert later.is_revoked("AB")
    assert not later.is_revoked("AC")


def test_serials_are_compared_in_one_spelling():
    # OpenSSL pads to whole bytes ("0A…"); cryptography gives an int.
    assert canonical_serial("0A1B") == canonical_serial(0xA1B) == "A1B"
    assert peer_serial({"serialNumber": "00FF"}) == "FF"
    assert peer_serial(None) == ""


# ---- the agent port: real grpclib over mutual TLS -------------------------------


async def _register(stream, node_id: str) -> ControlMessage | None:
    await stream.send_message(AgentMessage(register=Register(node_id=node_id, hostname=node_id)))
    return await asyncio.wait_for(stream.recv_message(), 10)


async def test_a_revoked_node_certificate_is_refused_by_the_agent_port(cluster):
    cfg = cluster.agent_config("gpu-r")
    async with cluster.admin() as admin:
        reply = await admin.revoke_node("gpu-r", serial=_serial_of(cfg.pki.cert))
    assert reply.revoked and not reply.stream_closed
    with pytest.raises(GRPCError) as err:
        async with RawAgentStream(cluster, cfg) as stream:
            await _register(stream, "gpu-r")
    assert err.value.status is grpclib.const.Status.PERMISSION_DENIED
    assert "was revoked" in err.value.message
    async with cluster.admin() as admin:
        assert "gpu-r" not in {n.node_id for n in (await admin.list_nodes()).nodes}


async def test_a_live_stream_of_a_revoked_node_is_closed(cluster):
    cfg = cluster.agent_config("gpu-live")
    with pytest.raises(GRPCError) as err:
        async with RawAgentStream(cluster, cfg) as stream:
            assert (await _register(stream, "gpu-live")).registered is not None
            async with cluster.admin() as admin:
                # No serial given: the one the open stream presents.
                reply = await admin.revoke_node("gpu-live")
            assert reply.stream_closed
            assert reply.serial == _serial_of(cfg.pki.cert)
            # The control plane ends the stream; the agent reads to its end.
            while await asyncio.wait_for(stream.recv_message(), 10) is not None:
                pass
    assert err.value.status is grpclib.const.Status.PERMISSION_DENIED
    assert "was revoked" in err.value.message

    async def gone_offline():
        async with cluster.admin() as admin:
            node = await admin.get_node("gpu-live")
        return node if not node.connected else None

    node = await wait_for(gone_offline)
    assert "revoked" in node.reason


async def test_a_node_added_again_gets_a_fresh_certificate_that_connects(cluster):
    old_serial = _serial_of(cluster.agent_config("gpu-again").pki.cert)
    async with cluster.admin() as admin:
        await admin.revoke_node("gpu-again", serial=old_serial)
    fresh = cluster.agent_config("gpu-again")  # issues a new certificate, as node add does
    assert _serial_of(fresh.pki.cert) != old_serial
    async with RawAgentStream(cluster, fresh) as stream:
        assert (await _register(stream, "gpu-again")).registered is not None
        await stream.end()


class _StoreAway:
    async def list_revoked_certs(self):
        from llmgw.errors import StoreError

        raise StoreError("could not list revoked certificates in PostgreSQL: connection lost")


async def test_a_store_away_is_one_warning_line_and_the_refresh_goes_on(caplog):
    revocations = Revocations(_StoreAway())  # type: ignore[arg-type]
    task = asyncio.create_task(revocations.run(interval_s=0.01))
    try:
        await wait_for(lambda: len(caplog.records) >= 2)
    finally:
        task.cancel()
    record = caplog.records[0]
    assert record.levelname == "WARNING" and record.exc_info is None
    assert "connection lost" in record.getMessage()
