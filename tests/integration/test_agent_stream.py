"""gatewayd and agentd over a real mutual-TLS gRPC stream on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import grpclib.const
import pytest
from grpclib.exceptions import GRPCError, StreamTerminatedError

from llmgw.errors import AdminUnauthenticated, NotFoundError
from llmgw.fsutil import write_atomic, write_secret
from llmgw.tls import pki
from proto.llmgw.v1 import AgentMessage, ControlMessage, Heartbeat, HostFacts, Register
from tests.cluster_fixture import RawAgentStream, running_cluster, wait_for


async def node_state(cluster, node_id):
    async with cluster.admin() as admin:
        reply = await admin.list_nodes()
    return {n.node_id: n for n in reply.nodes}.get(node_id)


async def test_an_agent_registers_and_appears_ready_with_its_host_facts(cluster):
    await cluster.start_agent("node-a")
    node = await wait_for(lambda: _ready(cluster, "node-a"))
    assert node.connected
    assert node.host.arch and node.host.cpu_count > 0 and node.host.memory_total_bytes > 0
    assert node.host.cpu_flags
    # This machine has no NVIDIA driver: no GPUs, and the reason is said.
    assert list(node.gpus) == []
    assert node.host.gpu_note == "no NVIDIA driver"
    assert not node.host.fake


async def test_a_fake_inventory_is_reported_as_fake(cluster):
    await cluster.start_agent("big", fixture="h100_80g_x8")
    node = await wait_for(lambda: _ready(cluster, "big"))
    assert len(node.gpus) == 8
    assert node.host.fake and node.host.probe.startswith("fake")


async def test_heartbeats_become_visible_through_the_admin_api(cluster):
    await cluster.start_agent("node-hb")
    first = await wait_for(lambda: _ready(cluster, "node-hb"))
    later = await wait_for(lambda: _beat_after(cluster, "node-hb", first.heartbeat_seq))
    assert later.last_heartbeat_at


async def test_cordon_and_uncordon_are_kept_over_a_reconnect(cluster):
    await cluster.start_agent("node-c")
    await wait_for(lambda: _ready(cluster, "node-c"))
    async with cluster.admin() as admin:
        view = await admin.cordon_node("node-c")
        assert view.cordoned
        await cluster.stop_agents()
        await cluster.start_agent("node-c")
        node = await wait_for(lambda: _ready(cluster, "node-c"))
        assert node.cordoned
        assert not (await admin.uncordon_node("node-c")).cordoned


async def test_an_unknown_node_is_not_found(cluster):
    async with cluster.admin() as admin:
        with pytest.raises(NotFoundError, match="no node named 'nope'"):
            await admin.get_node("nope")


async def test_a_wrong_admin_token_is_refused(cluster):
    async with cluster.admin(token="not-the-token") as admin:
        with pytest.raises(AdminUnauthenticated, match="the admin token was refused"):
            await admin.list_nodes()


async def test_an_agent_whose_certificate_names_another_node_is_refused(cluster, caplog):
    caplog.set_level(logging.WARNING)
    cfg = cluster.agent_config("node-x")
    cfg.node_id = "node-y"  # a valid certificate, but for node-x
    with pytest.raises(GRPCError) as err:
        await _register_raw(cluster, cfg, "node-y")
    assert err.value.status is grpclib.const.Status.PERMISSION_DENIED
    assert "not for node 'node-y'" in err.value.message
    assert "its certificate is for 'node-x'" in caplog.text
    assert await node_state(cluster, "node-y") is None


async def test_an_agent_certificate_from_another_ca_is_refused(cluster, tmp_path):
    other_ca = pki.create_ca("elsewhere")
    stranger = pki.issue_node_cert(other_ca, "node-s")
    d = tmp_path / "stranger"
    write_atomic(d / "node.crt", stranger.cert_pem)
    write_secret(d / "node.key", stranger.key_pem)
    cfg = cluster.agent_config("node-s")
    cfg.pki.cert, cfg.pki.key = str(d / "node.crt"), str(d / "node.key")
    # TLS 1.3 rejects the client certificate after the handshake: the client
    # sees the stream cut, not an ssl.SSLError.
    with pytest.raises((StreamTerminatedError, ConnectionError, OSError)):
        await _register_raw(cluster, cfg, "node-s")
    assert await node_state(cluster, "node-s") is None


async def test_a_silent_node_becomes_not_ready_and_ready_again_when_it_speaks(tmp_path):
    async with running_cluster(tmp_path, not_ready_grace_s=0.5, heartbeat_interval_s=60) as c:
        cfg = c.agent_config("quiet")
        async with RawAgentStream(c, cfg) as stream:
            await stream.send_message(
                AgentMessage(
                    register=Register(
                        node_id="quiet", hostname="quiet", host=HostFacts(arch="x86_64")
                    )
                )
            )
            assert (await stream.recv_message()).registered is not None
            # Registered, then silent (a frozen agent keeps its stream open).
            node = await wait_for(lambda: _state_is(c, "quiet", "not_ready"))
            assert node.reason.startswith("no heartbeat for")
            await stream.send_message(AgentMessage(heartbeat=Heartbeat(seq=1)))
            node = await wait_for(lambda: _state_is(c, "quiet", "ready"))
            assert node.reason.startswith("back after")
            await stream.end()


async def test_a_node_whose_agent_disconnects_is_not_ready_with_the_reason(cluster):
    await cluster.start_agent("gone-soon")
    await wait_for(lambda: _ready(cluster, "gone-soon"))
    await cluster.stop_agents()
    node = await wait_for(lambda: _state_is(cluster, "gone-soon", "not_ready"))
    assert node.reason == "agent disconnected: the agent stopped"
    assert not node.connected


async def test_the_agent_fails_over_to_the_next_control_plane(cluster):
    cfg = cluster.agent_config("fo")
    # The first address refuses connections; the second is the real one.
    cfg.control_planes = ["127.0.0.1:1", cluster.agent_address]
    await cluster.start_agent("fo", cfg=cfg)
    await wait_for(lambda: _ready(cluster, "fo"), attempts=400)


async def test_nodes_survive_a_control_plane_restart_as_not_ready_until_they_return(tmp_path):
    from gatewayd.server import GatewayServer

    async with running_cluster(tmp_path) as c:
        await c.start_agent("persist")
        await wait_for(lambda: _ready(c, "persist"))
        await c.stop_agents()
    async with running_cluster(tmp_path) as c2:
        node = await node_state(c2, "persist")
        assert node.state == "not_ready"
        assert "restarted" in node.reason or "disconnected" in node.reason
    assert GatewayServer  # imported for the reader: the same class, a second life


# ---- helpers -------------------------------------------------------------


async def _ready(cluster, node_id):
    n = await node_state(cluster, node_id)
    return n if n is not None and n.state == "ready" else None


async def _state_is(cluster, node_id, state):
    n = await node_state(cluster, node_id)
    return n if n is not None and n.state == state else None


async def _beat_after(cluster, node_id, seq):
    n = await node_state(cluster, node_id)
    return n if n is not None and n.heartbeat_seq > seq else None


async def _register_raw(cluster, cfg, node_id):
    async with RawAgentStream(cluster, cfg) as stream:
        await stream.send_message(AgentMessage(register=Register(node_id=node_id)))
        msg = await asyncio.wait_for(stream.recv_message(), 10)
        if msg is None:
            await stream.recv_trailing_metadata()
        return msg


async def test_the_agent_acknowledges_commands_by_id_and_takes_a_new_control_plane_list(cluster):
    from proto.llmgw.v1 import AgentSettings, ControlPlanes

    agent, _, _ = await cluster.start_agent("cmd")
    await wait_for(lambda: _ready(cluster, "cmd"))
    registry = cluster.server.registry
    planes = ["127.0.0.1:1", cluster.agent_address]
    ack = await registry.command("cmd", ControlMessage(control_planes=ControlPlanes(planes)))
    assert ack.ok and ack.command_id.startswith("cmd-")
    assert agent.control_planes == planes

    ack = await registry.command(
        "cmd", ControlMessage(agent_settings=AgentSettings(heartbeat_interval_ms=500))
    )
    assert ack.ok and agent.heartbeat_interval_s == 0.5

    # What it does not know it refuses in words, rather than pretending.
    ack = await registry.command("cmd", ControlMessage())
    assert not ack.ok and "unknown command" in ack.error

    ack = await registry.command("ghost", ControlMessage(control_planes=ControlPlanes(planes)))
    assert not ack.ok and "not connected" in ack.error
