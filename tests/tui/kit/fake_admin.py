"""A small admin server for console tests: real grpclib, real AdminClient, nodes in a dict.

It serves the generated ``AdminServiceBase`` on 127.0.0.1 port 0 with the same
token check gatewayd does, so the console under test goes through the real
client, channel and wire format. ``put``/``forget`` change a node the way an
agent's heartbeat would, and every open ``Watch`` hears of it. Models,
replicas, engines and warnings are empty; Status names the cluster "fake".
Batches are a dict too (``batches``, by id): listed newest first, and
cancelled as gatewayd does (cancelling while requests are in flight, a
finished one refused with FAILED_PRECONDITION, a missing one NOT_FOUND).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Self

from grpclib.const import Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.server import Server

from llmgw.admin_client import AdminClient
from proto.llmgw.v1 import (
    AdminServiceBase,
    BatchCounts,
    BatchView,
    GetBatchRequest,
    GetNodeRequest,
    Gpu,
    HostFacts,
    ListBatchesReply,
    ListBatchesRequest,
    ListEnginesReply,
    ListEnginesRequest,
    ListModelsReply,
    ListModelsRequest,
    ListNodesReply,
    ListNodesRequest,
    ListReplicasReply,
    ListReplicasRequest,
    NodeView,
    StatusReply,
    StatusRequest,
    WarningsReply,
    WarningsRequest,
    WatchEvent,
    WatchRequest,
)

TOKEN = "test-admin-token"


class FakeAdminService(AdminServiceBase):
    def __init__(self) -> None:
        self.nodes: dict[str, NodeView] = {}
        self.batches: dict[str, BatchView] = {}
        # Each ListBatches request as it came (what the console asked for).
        self.batch_requests: list[ListBatchesRequest] = []
        self._watchers: set[asyncio.Queue[str]] = set()

    @property
    def watchers(self) -> int:
        """How many Watch streams are open (tests wait for one before changing a node)."""
        return len(self._watchers)

    def put(self, view: NodeView) -> None:
        self.nodes[view.node_id] = view
        self._publish(view.node_id)

    def forget(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)
        self._publish(node_id)

    def _publish(self, node_id: str) -> None:
        for q in self._watchers:
            q.put_nowait(node_id)

    # What the console reads with the nodes (nothing here but nodes).
    async def status(self, message: StatusRequest) -> StatusReply:
        return StatusReply(cluster_name="fake")

    async def list_models(self, message: ListModelsRequest) -> ListModelsReply:
        return ListModelsReply()

    async def list_replicas(self, message: ListReplicasRequest) -> ListReplicasReply:
        return ListReplicasReply()

    async def list_engines(self, message: ListEnginesRequest) -> ListEnginesReply:
        return ListEnginesReply()

    async def warnings(self, message: WarningsRequest) -> WarningsReply:
        return WarningsReply()

    async def list_nodes(self, message: ListNodesRequest) -> ListNodesReply:
        return ListNodesReply(nodes=[self.nodes[k] for k in sorted(self.nodes)])

    async def get_node(self, message: GetNodeRequest) -> NodeView:
        view = self.nodes.get(message.node_id)
        if view is None:
            raise GRPCError(Status.NOT_FOUND, f"no node named {message.node_id!r}")
        return view

    async def list_batches(self, message: ListBatchesRequest) -> ListBatchesReply:
        self.batch_requests.append(message)
        shown = [
            b
            for b in sorted(self.batches.values(), key=lambda b: b.created_at, reverse=True)
            if (not message.project or b.project == message.project)
            and (not message.status or b.status == message.status)
        ]
        return ListBatchesReply(batches=shown[: message.limit or 100])

    async def get_batch(self, message: GetBatchRequest) -> BatchView:
        view = self.batches.get(message.id)
        if view is None:
            raise GRPCError(Status.NOT_FOUND, f"no batch {message.id!r}")
        return view

    async def cancel_batch(self, message: GetBatchRequest) -> BatchView:
        view = await self.get_batch(message)
        if view.status in ("completed", "failed", "expired", "cancelled"):
            raise GRPCError(
                Status.FAILED_PRECONDITION, f"batch {view.id} is {view.status}: cannot cancel"
            )
        c = view.request_counts
        running = c is not None and c.completed + c.failed < c.total
        view.status = "cancelling" if running else "cancelled"
        setattr(view, f"{view.status}_at", "2026-09-01T13:10:00+00:00")
        return view

    async def watch(self, message: WatchRequest) -> AsyncIterator[WatchEvent]:
        q: asyncio.Queue[str] = asyncio.Queue()
        self._watchers.add(q)
        try:
            if message.opened:
                yield WatchEvent()
            while True:
                key = await q.get()
                yield WatchEvent(topic="nodes", key=key, node=self.nodes.get(key))
        finally:
            self._watchers.discard(q)


class _Server(Server):
    """A grpclib server whose ``close`` also drops its connections, as a gatewayd exiting does.

    grpclib's own ``close`` cancels the handlers but leaves the TCP connections
    open while the process lives, so an in-process "restart" would leave a client
    on a stream that never ends and a channel bound to the old server.
    """

    def __init__(self, handlers) -> None:
        super().__init__(handlers)
        self._protocols: list[H2Protocol] = []

    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        self._protocols.append(protocol)
        return protocol

    def close(self) -> None:
        super().close()
        for protocol in self._protocols:
            if hasattr(protocol, "connection"):  # set once the connection was made
                protocol.connection.close()


class FakeAdminServer:
    """``async with FakeAdminServer() as srv``: a running admin server; ``srv.client()`` dials it."""

    def __init__(self, *, port: int = 0, service: FakeAdminService | None = None) -> None:
        # A subclass of the service may answer more (tests/tui/kit/fake_mirror.py: the mirror).
        self.service = service or FakeAdminService()
        self._server = _Server([self.service])
        self._port = port
        self.port = 0

        async def check_token(event: RecvRequest) -> None:
            if event.metadata.get("authorization") != f"Bearer {TOKEN}":
                raise GRPCError(Status.UNAUTHENTICATED, "the admin token was refused")

        listen(self._server, RecvRequest, check_token)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, token: str = TOKEN) -> AdminClient:
        return AdminClient(self.address, token, timeout_s=5)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def start(self) -> Self:
        await self._server.start("127.0.0.1", self._port)
        self.port = self._server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        """Stop as a gatewayd process exiting would: clients see their streams cut."""
        self._server.close()
        # Bounded: a handler stuck on a bug must not hold the whole test run.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2)


def node(
    node_id: str, *, state: str = "ready", reason: str = "", gpus: int = 0, cordoned: bool = False
) -> NodeView:
    """A node as gatewayd would show it, with host facts and ``gpus`` H100s."""
    return NodeView(
        node_id=node_id,
        hostname=f"{node_id}.lab",
        state=state,
        reason=reason,
        cordoned=cordoned,
        version="0.1.0",
        address="10.0.0.7",
        host=HostFacts(
            hostname=f"{node_id}.lab",
            os_id="debian",
            os_version_id="12",
            arch="x86_64",
            cpu_count=16,
            memory_total_bytes=64 * 2**30,
            disk_free_bytes=500 * 2**30,
            avx2=True,
            gpu_note="" if gpus else "no NVIDIA driver",
            probe="fake",
            fake=True,
        ),
        gpus=[
            Gpu(
                index=i,
                uuid=f"GPU-{node_id}-{i}",
                name="NVIDIA H100 80GB HBM3",
                memory_total_bytes=80 * 2**30,
                compute_capability="9.0",
                pci_bus_id=f"0000:0{i}:00.0",
            )
            for i in range(gpus)
        ],
    )


def batch(
    batch_id: str,
    *,
    status: str = "in_progress",
    total: int = 200,
    completed: int = 0,
    failed: int = 0,
    project: str = "Acme/ml/search",
    endpoint: str = "/v1/chat/completions",
    created_at: str = "2026-09-01T13:00:00+00:00",
) -> BatchView:
    """A batch as gatewayd would show it: its files, counts and the times it reached."""
    return BatchView(
        id=batch_id,
        project=project,
        key_id="key_batch",
        endpoint=endpoint,
        status=status,
        input_file_id=f"file-in-{batch_id}",
        output_file_id=f"file-out-{batch_id}" if completed else "",
        error_file_id=f"file-err-{batch_id}" if failed else "",
        completion_window="24h",
        created_at=created_at,
        in_progress_at=created_at if status != "validating" else "",
        completed_at="2026-09-01T13:30:00+00:00" if status == "completed" else "",
        expires_at="2026-09-02T13:00:00+00:00",
        request_counts=BatchCounts(total=total, completed=completed, failed=failed),
        models=["sim-chat"],
    )
