"""The admin API: one RPC per console screen and ctl command.

Served on 127.0.0.1 only; every call must carry the admin token (checked by
``token_guard`` before any handler runs).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from grpclib.const import Status
from grpclib.events import RecvRequest
from grpclib.exceptions import GRPCError

from gatewayd.admin.batches import BatchAdmin
from gatewayd.admin.labels import LabelAdmin
from gatewayd.admin.mcp.servers import McpAdmin
from gatewayd.admin.mirror import MirrorAdmin
from gatewayd.admin.models import ModelAdmin
from gatewayd.admin.ops import OpsAdmin
from gatewayd.admin.settings import SettingsAdmin
from gatewayd.admin.tenancy.keys import KeyAdmin
from gatewayd.admin.tenancy.revoke import RevokeAdmin
from gatewayd.admin.tenancy.tree import TenancyAdmin
from gatewayd.admin.usage import UsageAdmin
from gatewayd.admin.views import replica_view
from gatewayd.admin.weights import WeightsAdmin
from gatewayd.agents.revocations import Revocations
from gatewayd.batches.book import BatchBook
from gatewayd.catalog.catalog import Catalog
from gatewayd.controller.reconciler import Reconciler
from gatewayd.controller.replica import ACTIVE as ACTIVE_REPLICA
from gatewayd.gateway.metering.metrics import GatewayMetrics
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.mirrors.set import MirrorSet
from gatewayd.mirrors.views import mirror_view
from gatewayd.nodes.registry import GONE, NOT_READY, READY, NodeRegistry
from gatewayd.store import Store
from llmgw import __version__
from proto.llmgw.v1 import (
    AdminServiceBase,
    CordonNodeRequest,
    GetNodeRequest,
    ListNodesReply,
    ListNodesRequest,
    NodeView,
    StatusReply,
    StatusRequest,
    WatchEvent,
    WatchRequest,
)

if TYPE_CHECKING:
    from gatewayd.mcp.runtime import McpRuntime
    from gatewayd.settings.runtime import SettingsRuntime

log = logging.getLogger(__name__)

WATCH_TOPICS = ("nodes", "models", "replicas", "engines")


def token_guard(token: str):
    """A grpclib RecvRequest listener refusing calls without the admin token."""
    expected = f"Bearer {token}".encode()

    async def check(event: RecvRequest) -> None:
        got = event.metadata.get("authorization", "")
        if isinstance(got, bytes):
            got = got.decode(errors="replace")
        if not hmac.compare_digest(got.encode(), expected):
            log.warning("refused admin call %s: wrong or missing token", event.method_name)
            raise GRPCError(Status.UNAUTHENTICATED, "the admin token was refused")

    return check


class AdminService(
    ModelAdmin,
    KeyAdmin,
    TenancyAdmin,
    UsageAdmin,
    OpsAdmin,
    RevokeAdmin,
    LabelAdmin,
    BatchAdmin,
    MirrorAdmin,
    McpAdmin,
    SettingsAdmin,
    WeightsAdmin,
    AdminServiceBase,
):
    def __init__(
        self,
        registry: NodeRegistry,
        catalog: Catalog,
        reconciler: Reconciler,
        keys: KeyCache,
        *,
        store: Store,
        info: dict,
        metrics: GatewayMetrics | None = None,
        revocations: Revocations | None = None,
        batches: BatchBook | None = None,
        mirrors: MirrorSet | None = None,
        mcp: McpRuntime | None = None,
        cluster: Callable[[], Awaitable[dict]] | None = None,
        settings: SettingsRuntime | None = None,
    ):
        self._registry = registry
        # The kept settings in force here (gatewayd.settings); None where none are mounted.
        self._settings_runtime = settings
        # The control planes sharing the store and the lease (StatusReply's fields);
        # None: this one alone, leading.
        self._cluster = cluster
        self._revocations = revocations
        # The batch book (files and batches); None where no batches run.
        self._batches = batches
        # The cluster's model mirrors (server.yaml mirror.urls); None: none.
        self._mirrors = mirrors
        # The MCP gateway's parts (gatewayd.mcp.runtime); None where mcp.enabled is false.
        self._mcp = mcp
        self._store = store
        self._keys = keys
        self._catalog = catalog
        self._reconciler = reconciler
        self._info = info  # cluster_name, store_backend, agent_listen, http_listen
        # The gateway's counters, for requests and errors in Status (none: zeros).
        self._metrics = metrics
        self._started_at = datetime.now().astimezone()

    async def status(self, message: StatusRequest) -> StatusReply:
        counts = self._registry.counts()
        counts.pop(GONE, None)  # removed nodes are no longer the cluster's
        metrics = self._metrics
        cluster = await self._cluster() if self._cluster is not None else {"leader": True}
        return StatusReply(
            **cluster,
            version=__version__,
            cluster_name=self._info.get("cluster_name", ""),
            store_backend=self._info.get("store_backend", ""),
            started_at=self._started_at.isoformat(timespec="seconds"),
            agent_listen=self._info.get("agent_listen", ""),
            http_listen=self._info.get("http_listen", ""),
            nodes_total=sum(counts.values()),
            nodes_ready=counts.get(READY, 0),
            nodes_not_ready=counts.get(NOT_READY, 0),
            gateway_url=self._info.get("gateway_url", ""),
            requests_total=_counted(metrics.requests) if metrics else 0,
            errors_total=_counted(metrics.errors) if metrics else 0,
            mirrors=[mirror_view(s) for s in self._mirrors.states()] if self._mirrors else [],
        )

    async def list_nodes(self, message: ListNodesRequest) -> ListNodesReply:
        return ListNodesReply(
            nodes=[self._taken(n) for n in self._registry.views() if n.state != GONE]
        )

    def _taken(self, view: NodeView) -> NodeView:
        """The view with the card memory its replicas hold (what is free follows)."""
        taken: dict[int, int] = {}
        cores = 0
        for r in self._reconciler.replicas.values():
            if r.node_id == view.node_id and r.state in ACTIVE_REPLICA:
                for index, n in r.per_gpu_bytes.items():
                    taken[int(index)] = taken.get(int(index), 0) + n
                cores += r.cores
        view.gpu_bytes_taken = taken
        view.cores_taken = cores
        return view

    def _node(self, node_id: str) -> NodeView:
        view = self._registry.view(node_id)
        if view is None or view.state == GONE:
            raise GRPCError(Status.NOT_FOUND, f"no node named {node_id!r}; see: llmgw ctl nodes")
        return self._taken(view)

    async def get_node(self, message: GetNodeRequest) -> NodeView:
        return self._node(message.node_id)

    async def cordon_node(self, message: CordonNodeRequest) -> NodeView:
        self._node(message.node_id)
        return await self._registry.set_cordoned(message.node_id, True)  # type: ignore[return-value]

    async def drain_node(self, message: CordonNodeRequest) -> NodeView:
        """Cordon the node and move its replicas elsewhere before stopping them."""
        self._node(message.node_id)
        await self._registry.set_cordoned(message.node_id, True)
        view = await self._registry.set_draining(message.node_id, True)
        self._reconciler.kick()
        return view  # type: ignore[return-value]

    async def uncordon_node(self, message: CordonNodeRequest) -> NodeView:
        self._node(message.node_id)
        await self._registry.set_draining(message.node_id, False)
        return await self._registry.set_cordoned(message.node_id, False)  # type: ignore[return-value]

    async def watch(self, message: WatchRequest) -> AsyncIterator[WatchEvent]:
        topics = list(message.topics) or ["nodes"]
        unknown = set(topics) - set(WATCH_TOPICS)
        if unknown:
            raise GRPCError(Status.INVALID_ARGUMENT, f"unknown watch topic(s): {sorted(unknown)}")
        sub = self._registry.watch.subscribe(topics)
        try:
            if message.opened:
                yield WatchEvent()
            async for topic, key in sub.changes():
                yield self._event(topic, key)
        finally:
            self._registry.watch.unsubscribe(sub)

    def _event(self, topic: str, key: str) -> WatchEvent:
        event = WatchEvent(topic=topic, key=key)
        if topic == "nodes":
            view = self._registry.view(key)
            # A removed node is announced as forgotten: every list drops it.
            event.node = self._taken(view) if view is not None and view.state != GONE else None
        elif topic == "models" and self._catalog.get(key) is not None:
            event.model = self._model_view(key)
        elif topic == "replicas" and key in self._reconciler.replicas:
            r = self._reconciler.replicas[key]
            live = self._registry.live(r.node_id) if r.node_id else None
            event.replica = replica_view(r, live.record.address if live else "")
        return event


def _counted(counter) -> int:
    """The sum of a labelled Prometheus counter over all its series."""
    return int(
        sum(
            sample.value
            for family in counter.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
        )
    )
