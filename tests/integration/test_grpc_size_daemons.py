"""The control plane's gRPC ports refuse a message over their cap, and go on serving."""

from __future__ import annotations

import grpclib.const
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from llmgw.errors import UsageError
from llmgw.grpcsize import ADMIN_MAX_MESSAGE_BYTES, AGENT_MAX_MESSAGE_BYTES
from proto.llmgw.v1 import AgentMessage, GetModelRequest, HostFacts, ModelView, Register
from tests.cluster_fixture import RawAgentStream, running_cluster


async def test_the_admin_port_refuses_a_message_over_64_mib_and_answers_the_next(tmp_path):
    # Guards grpclib reading any message whole, however large its prefix says it is:
    # one call to the admin port could hold gatewayd's memory.
    async with running_cluster(tmp_path) as cluster:
        channel = Channel("127.0.0.1", cluster.server.ports["admin"])  # no cap of its own
        try:
            with pytest.raises(GRPCError) as err:
                async with channel.request(
                    "/llmgw.v1.AdminService/GetModel",
                    grpclib.const.Cardinality.UNARY_UNARY,
                    GetModelRequest,
                    ModelView,
                    metadata={"authorization": f"Bearer {cluster.token}"},
                ) as stream:
                    name = "x" * (ADMIN_MAX_MESSAGE_BYTES + 1)
                    await stream.send_message(GetModelRequest(name=name), end=True)
                    await stream.recv_message()
            assert err.value.status is Status.RESOURCE_EXHAUSTED
        finally:
            channel.close()
        async with cluster.admin() as admin:
            assert (await admin.status()) is not None
            # The admin client holds its own messages to the cap, in words.
            with pytest.raises(UsageError, match="over the 67,108,864 bytes"):
                await admin.get_model("y" * (ADMIN_MAX_MESSAGE_BYTES + 1))


async def test_the_agent_port_refuses_a_registration_over_16_mib(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        cfg = cluster.agent_config("big")
        with pytest.raises(GRPCError) as err:
            async with RawAgentStream(cluster, cfg) as stream:
                huge = "h" * (AGENT_MAX_MESSAGE_BYTES + 1)
                register = Register(node_id="big", hostname=huge, host=HostFacts(arch="x86_64"))
                await stream.send_message(AgentMessage(register=register))
                await stream.recv_message()
        assert err.value.status is Status.RESOURCE_EXHAUSTED
        assert "over the 16,777,216 bytes" in err.value.message
        # A node that registers as it should still can.
        async with RawAgentStream(cluster, cfg) as stream:
            register = Register(node_id="big", hostname="big", host=HostFacts(arch="x86_64"))
            await stream.send_message(AgentMessage(register=register))
            assert (await stream.recv_message()).registered is not None
            await stream.end()
