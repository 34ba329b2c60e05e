"""The reconciler: desired replicas (the catalog) against actual ones (agents' reports).

Each pass, for every model: replicas that failed are restarted after a
backoff; missing ones are planned and placed and started with StartShard;
extra ones are stopped with StopShard. Replicas on a node that has been lost
for longer than ``lost_grace_s`` (5 min, not the 15 s of not_ready: a
heartbeat blip must never move a whole node's replicas) are placed again
elsewhere. A draining node's replicas get a replacement first; the old one
stops only once the replacement is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from datetime import timedelta

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller import replica as rs
from gatewayd.controller.candidates import node_candidates
from gatewayd.controller.commands import spec_hash, start_message
from gatewayd.controller.drain import Draining
from gatewayd.controller.lifecycle import Lifecycle
from gatewayd.controller.ondemand import OnDemand, starts_on_demand
from gatewayd.controller.priorities import Priorities
from gatewayd.controller.replica import Replica, utcnow
from gatewayd.controller.scaler import Load, Scaler
from gatewayd.controller.sizing import Sizing
from gatewayd.mirrors.set import MirrorSet
from gatewayd.nodes.registry import READY as NODE_READY
from gatewayd.nodes.registry import NodeRegistry
from gatewayd.store import ReplicaRecord, Store
from llmgw.catalog import Model
from llmgw.config import EngineRelease
from llmgw.engines.builtin_recipes import builtin_releases
from llmgw.engines.recipes import (
    PYTHON_ENGINES,
    RecipeInUse,
    in_use,
    install_message,
    recipe_for,
)
from llmgw.errors import StoreError
from llmgw.inventory import Inventory
from llmgw.placement import Decision, NodeIndex, PlacementRequest, place
from llmgw.scaling import DEFAULT_CLASSES, OnDemandConfig
from proto.llmgw.v1 import ControlMessage, InstallEngine, ShardStatus

log = logging.getLogger(__name__)


class NotLeading(Exception):
    """A leader's write refused because its lease may have lapsed (it steps down next)."""


TICK_S = 2.0
# An unplaceable replica is tried again this often, and whenever a node changes.
PENDING_RETRY_S = 15.0


class Reconciler(Lifecycle, Draining, Priorities):
    def __init__(
        self,
        store: Store,
        registry: NodeRegistry,
        catalog: Catalog,
        *,
        engine_key: str,
        lost_grace_s: float = 300.0,
        sizing: Sizing | None = None,
        engines: list[EngineRelease] = (),
        builtin: tuple[EngineRelease, ...] | None = None,
        mirrors: MirrorSet | None = None,
        fence: Callable[[], bool] = lambda: True,
    ):
        self._store = store
        # Whether this control plane may act as the leader now (its lease,
        # read at every write): a leader that resumes from a freeze after its
        # lease lapsed writes nothing before it notices it no longer leads.
        self._fence = fence
        self._registry = registry
        self._catalog = catalog
        self.engine_key = engine_key
        # Each replica's own key (gatewayd/gateway/routing/engine_access.py); None:
        # every replica gets engine_key (tests that build a reconciler alone).
        self.access = None
        self._lost_grace_s = lost_grace_s
        self._engines = list(engines)
        # llmgw's own vLLM/SGLang recipes, for an engine server.yaml names none of.
        self._builtin = builtin_releases() if builtin is None else tuple(builtin)
        self.sizing = sizing or Sizing()
        # The cluster's mirrors, handed to nodes for weights and engine archives.
        self.mirrors = mirrors
        self.replicas: dict[str, Replica] = {}
        # Between a model's min and max: how many replicas its load asks for.
        self.scaler = Scaler()
        # Priority classes, name to priority (settings' classes).
        self.classes: dict[str, int] = dict(DEFAULT_CLASSES)
        # Models at min 0: how long an idle one keeps its replica (settings' on_demand).
        self.on_demand = OnDemandConfig()
        # Starts and stops them by the gateway's requests (its ``demand`` set by server.py).
        self.on_demand_rule = OnDemand()
        # The load of the ready replicas named (the gateway's figures; server.py sets it).
        # With a model named, its requests queued in the gateway count too.
        self.replica_load: Callable[..., Load | None] = lambda _ids, model="": None
        self._kick = asyncio.Event()
        self._pass_nodes: NodeIndex | None = None
        self._drained: set[str] = set()
        self._by_model: dict[str, list[Replica]] = {}
        self._lock = asyncio.Lock()
        # Agents' shard reports, handled in order by run(); queued so the
        # agent's receive loop never waits on a reconcile pass (which may be
        # waiting for an acknowledgement on that very loop).
        self._reports: asyncio.Queue[tuple[str, ShardStatus]] = asyncio.Queue()
        registry.on_shard_status = lambda node_id, status: self._reports.put_nowait(
            (node_id, status)
        )

    async def load(self) -> None:
        """Take the replicas as the store has them (at start, on becoming the leader, and
        every second on a standby, which routes to them but never changes them)."""
        replicas = {
            rec.replica_id: Replica.model_validate(rec.doc)
            for rec in await self._store.list_replicas()
        }
        if self._lock.locked():
            return  # a pass is changing them: this process leads, and its memory is the truth
        changed = {
            rid
            for rid in replicas.keys() | self.replicas.keys()
            if (a := replicas.get(rid)) is None
            or (b := self.replicas.get(rid)) is None
            or a.state != b.state
            or a.port != b.port
        }
        self.replicas = replicas
        for rid in changed:
            self._registry.watch.publish("replicas", rid)

    def kick(self) -> None:
        self._kick.set()

    def set_lost_grace(self, lost_grace_s: float) -> None:
        """How long a node may be gone before its replicas are placed elsewhere, from now on."""
        self._lost_grace_s = lost_grace_s

    def set_engines(self, engines: list[EngineRelease]) -> None:
        """The engine recipes nodes should have from now on (server.yaml's ``engines:``).

        Nodes that connect later are sent them all; a node a replica is
        placed on is sent its engine's recipe with the replica.
        """
        self._engines = list(engines)

    def recipes(self) -> list[RecipeInUse]:
        """The recipes in force and where each came from: server.yaml's, then llmgw's own."""
        return in_use(self._engines, self._builtin)

    async def follow_nodes(self) -> None:
        """A node changing state or engines is a reason to look again; a heartbeat is not.

        Every heartbeat is a "nodes" notice (the console shows them), so this
        must stay O(1) per notice: a thousand nodes beat every second.
        """
        sub = self._registry.watch.subscribe(["nodes", "engines"])
        seen: dict[str, tuple] = {}
        try:
            async for topic, key in sub.changes():
                live = self._registry.live(key)
                mark = (
                    None
                    if live is None
                    else (
                        live.record.state,
                        live.record.state_since,
                        live.record.cordoned,
                        live.record.draining,
                        live.session_id,
                        # Labels an operator sets reach placement at once.
                        live.record.operator_labels,
                    )
                )
                if topic == "nodes" and seen.get(key) == mark:
                    continue
                if (
                    topic == "nodes"
                    and live is not None
                    and live.record.state == NODE_READY
                    and (seen.get(key) is None or seen[key][4] != live.session_id)
                ):
                    # A node (re)connected: tell it which engines to have.
                    asyncio.create_task(self.install_engines(key))
                seen[key] = mark
                for r in self.replicas.values():
                    if r.state == rs.PENDING:
                        r.retry_at = None
                self.kick()
        finally:
            self._registry.watch.unsubscribe(sub)

    async def install_engines(self, node_id: str) -> None:
        live = self._registry.live(node_id)
        if live is None:
            return
        for e in self._engines:
            if e.engine not in live.record.installable_engines:
                continue  # e.g. vLLM on a node without a suitable GPU: skipped, not a fault
            ack = await self._registry.command(
                node_id,
                ControlMessage(install_engine=self._install_message(e)),
            )
            if not ack.ok:
                log.warning(
                    "node %s refused to install %s %s: %s", node_id, e.engine, e.version, ack.error
                )

    async def run(self) -> None:
        helpers = [
            asyncio.create_task(self.follow_nodes()),
            asyncio.create_task(self._consume_reports()),
        ]
        try:
            await self._run()
        finally:
            for task in helpers:
                task.cancel()

    async def _consume_reports(self) -> None:
        while True:
            node_id, status = await self._reports.get()
            try:
                await self.on_shard_status(node_id, status)
            except Exception:
                log.exception("handling a shard report from %s failed", node_id)

    async def _run(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when
            # the kick comes as the task is cancelled, and the cancel is lost (gatewayd's
            # stop then waited on this loop for ever).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self.reconcile_once()
            except StoreError as e:
                log.warning("reconcile pass failed; trying again: %s", e)
            except Exception:
                log.exception("reconcile pass failed; trying again")

    # ---- one pass ------------------------------------------------------

    async def reconcile_once(self) -> None:
        async with self._lock:
            # Within a pass the nodes are read once; each placement reserves
            # its memory on them so the next decision sees it taken.
            self._pass_nodes = None
            try:
                await self._pass()
            finally:
                self._pass_nodes = None

    async def _pass(self) -> None:
        await self._finish_drains()
        await self._expire_deadlines()
        await self._handle_lost_nodes()
        self._drained = {n.record.node_id for n in self._registry.live_nodes() if n.record.draining}
        catalog = self._catalog.models()
        # An outside provider answers an external model: nothing to plan, place or start.
        models = {m.name: m for m in catalog if not m.is_external}
        external = {m.name for m in catalog if m.is_external}
        by_model: dict[str, list[Replica]] = {}
        for r in self.replicas.values():
            by_model.setdefault(r.model, []).append(r)
        self._by_model = by_model
        for r in list(self.replicas.values()):
            if r.model not in models and r.state != rs.STOPPED:
                await self._stop(
                    r,
                    "the model is answered by an outside provider now"
                    if r.model in external
                    else "the model was removed",
                )
        # The highest class first: cards freed go to the highest that waits for them;
        # within a class, to the one that has waited longest.
        waited: dict[str, float] = {}
        for r in self.replicas.values():
            if r.state == rs.PENDING:
                at = r.made_at.timestamp()
                waited[r.model] = min(waited.get(r.model, at), at)
        order = sorted(
            models.values(), key=lambda m: (-self.priority(m), waited.get(m.name, float("inf")))
        )
        for model in order:
            await self._reconcile_model(model)
        self.scaler.forget(models)
        await self._forget_stopped()

    async def _reconcile_model(self, model: Model) -> None:
        # A hub repository's facts are read once per commit, before it is placed.
        await self.sizing.learn(model)
        mine = list(self._by_model.get(model.name, []))
        now = utcnow()
        # Failed replicas come back after their backoff, unplaced ones when
        # their retry is due (counted as desired meanwhile).
        for r in mine:
            due = r.retry_at is None or r.retry_at <= now
            if r.state == rs.FAILED and r.retry_at and due:
                await self._start(model, r, restart=True)
            elif r.state == rs.PENDING and due:
                await self._start(model, r)
        drained = self._drained
        serving = [r for r in mine if r.state in rs.ACTIVE and r.state != rs.DRAINING]
        # A replica on a draining node gets a replacement first, and stops
        # only once its replacement is ready: no gap in service.
        for r in [x for x in serving if x.node_id in drained]:
            replacement = next((x for x in mine if x.replaces == r.replica_id), None)
            if replacement is None:
                replacement = self._new_replica(model, replaces=r.replica_id)
                mine.append(replacement)
                await self._start(model, replacement)
            elif replacement.state == rs.READY:
                await self._stop(
                    r, f"node {r.node_id} is draining; replaced by {replacement.replica_id}"
                )
        serving = [r for r in mine if r.state in rs.ACTIVE and r.state != rs.DRAINING]
        await self._roll(model, mine, serving)
        serving = [r for r in mine if r.state in rs.ACTIVE and r.state != rs.DRAINING]
        waiting = [r for r in mine if r.state in (rs.FAILED, rs.PENDING)]
        # What counts toward the desired number: not what is being drained
        # away (its replacement counts instead).
        replaced = {r.replaces for r in mine if r.replaces}
        counted = [
            r for r in serving if r.node_id not in drained and r.replica_id not in replaced
        ] + waiting
        before = self.scaler.target(model.name)
        desired = self._desired(model, counted)
        # A replica the scaler asked for carries its reason in its history.
        changed = before is not None or starts_on_demand(model)
        why = self.scaler.reason(model.name) if changed and desired > (before or 0) else ""
        for _ in range(desired - len(counted)):
            await self._start(model, self._new_replica(model, why=why))
        extra = len(counted) - desired
        if extra > 0:
            # Stop the least useful first: waiting ones, then not yet ready.
            order = {
                rs.FAILED: 0,
                rs.PENDING: 0,
                rs.PLACED: 1,
                rs.FETCHING: 1,
                rs.INSTALLING: 1,
                rs.STARTING: 2,
                rs.READY: 3,
            }
            why = self.scaler.reason(model.name)
            ours = why.startswith(f"scaled down to {desired}:") or (
                desired == 0 and why.startswith("stopped on demand")
            )
            if not ours:
                why = f"scaled to {desired}"
            for r in sorted(counted, key=lambda x: order.get(x.state, 1))[:extra]:
                await self._stop(r, why)

    def _desired(self, model: Model, counted: list[Replica]) -> int:
        """How many replicas ``model`` should run now: its min, or what its load asks for."""
        ready = [r.replica_id for r in counted if r.state == rs.READY]
        load = self.replica_load(ready, model=model.name) if ready else None
        low = model.replicas_min
        if starts_on_demand(model):
            low = self.on_demand_rule.low(model, counted, load, self.scaler, self.on_demand)
        return self.scaler.decide(
            model.name,
            low=low,
            high=model.replicas_max,
            have=len(counted),
            ready=len(ready),
            slots=model.slots,
            load=load,
        )

    def desired(self, model: Model) -> int:
        """The replicas ``model`` is meant to run now (what ``ctl models`` shows)."""
        held = self.scaler.target(model.name)
        if held is None:
            return model.replicas_min
        # Bounds changed since the last pass hold at once (the pass follows them).
        return min(max(held, model.replicas_min), model.replicas_max)

    async def _roll(self, model: Model, mine: list[Replica], serving: list[Replica]) -> None:
        """Replace replicas started with an older spec, one at a time, new before old."""
        current = spec_hash(model)
        for r in [x for x in serving if x.spec_hash and x.spec_hash != current]:
            replacement = next((x for x in mine if x.replaces == r.replica_id), None)
            if replacement is None:
                if any(x.replaces and x.state != rs.READY and x.state != rs.STOPPED for x in mine):
                    return  # one replacement at a time
                replacement = self._new_replica(model, replaces=r.replica_id)
                mine.append(replacement)
                await self._start(model, replacement)
                return
            if replacement.state == rs.READY:
                await self._stop(r, f"replaced by {replacement.replica_id} (the model changed)")
            elif await self._replace_in_place(model, r, replacement):
                return

    def _new_replica(self, model: Model, *, replaces: str = "", why: str = "") -> Replica:
        rid = f"{model.name}-{secrets.token_hex(3)}"
        r = Replica(replica_id=rid, model=model.name, replaces=replaces)
        r.move(rs.PENDING, f"waiting to be placed ({why})" if why else "waiting to be placed")
        self.replicas[rid] = r
        return r

    # ---- placement and start -------------------------------------------

    def _pass_candidates(self) -> NodeIndex:
        """Placement's view of the nodes for this pass, built once and reserved into.

        Indexed, so that each decision of the pass need not weigh every node.
        Inside a pass the replicas being (re)placed are pending or failed and
        hold nothing, so none needs leaving out.
        """
        if self._pass_nodes is None:
            nodes = node_candidates(self._registry.live_nodes(), self.replicas.values())
            self._pass_nodes = NodeIndex(nodes)
        return self._pass_nodes

    def decide(
        self,
        model: Model,
        *,
        exclude: set[str] = frozenset(),
        nodes: list | NodeIndex | None = None,
        explain: bool = True,
    ) -> Decision:
        """Where a replica of ``model`` goes now, with every node's reason.

        ``exclude``: replicas whose resources count as free (the one being
        placed again; for an explanation, all of the model's own).
        """
        if model.is_external:
            # Nothing of it runs here: every node's reason says so.
            why = "answered by an outside provider; nothing to place"
            live = self._registry.live_nodes()
            return Decision(
                model=model.name,
                engine="external",
                reasons={n.record.node_id: why for n in live},
                refused=why,
                counts={why: len(live)} if live else {},
            )
        profile = model.profiles[0]
        if nodes is None:
            nodes = node_candidates(self._registry.live_nodes(), self.replicas.values(), exclude)
        inventories = (
            nodes.inventories() if isinstance(nodes, NodeIndex) else [n.inventory for n in nodes]
        )
        plan = self.sizing.plan(model, profile, inventories)
        request = PlacementRequest.for_profile(model, profile, plan)
        return place(request, nodes, explain=explain)

    def inventories(self) -> list[Inventory]:
        return [n.inventory for n in node_candidates(self._registry.live_nodes(), [])]

    async def _start(self, model: Model, r: Replica, *, restart: bool = False) -> None:
        profile = model.profiles[0]
        decision = self.decide(model, nodes=self._pass_candidates(), explain=False)
        if decision.placement is None and await self._make_room(model, r):
            await self._save(r)
            return
        if decision.placement is None:
            r.retry_at = utcnow() + timedelta(seconds=PENDING_RETRY_S)
            if r.state != rs.FAILED:
                r.move(rs.PENDING, decision.refused or "no node can run it")
            await self._save(r)
            return
        p = decision.placement
        node = self._pass_nodes.get(p.node_id) if self._pass_nodes is not None else None
        if node is not None:  # the next decision in this pass sees it taken
            node.reserve(dict(p.per_gpu_bytes), p.host_memory_bytes, p.cores)
        r.node_id, r.gpu_indexes = p.node_id, list(p.gpu_indexes)
        r.per_gpu_bytes = dict(p.per_gpu_bytes)
        r.host_memory_bytes = p.host_memory_bytes
        r.cores = p.cores
        r.cpu = p.layout.kind == "cpu"
        r.tensor_parallel = p.layout.tensor_parallel
        r.context = p.layout.context or model.context_length
        r.retry_at = None
        r.spec_hash = spec_hash(model)
        if restart:
            r.restarts += 1
        where = f"node {p.node_id}" + (f" GPUs {r.gpu_indexes}" if r.gpu_indexes else " CPU")
        if r.cores:
            where += f", {r.cores} core{'s' if r.cores != 1 else ''}"
        r.move(rs.PLACED, f"placed on {where}", deadline_s=profile.startup_timeout_s)
        await self._save(r)
        engine_version = await self._engine_for(p.node_id, profile.engine, profile.engine_version)
        msg = start_message(
            model, r, p.layout, engine_version, self.replica_key(r), **self._mirror_args()
        )
        ack = await self._registry.command(p.node_id, msg)
        if not ack.ok:
            self._fail(r, f"node {p.node_id} refused to start it: {ack.error}")
            await self._save(r)

    async def _engine_for(self, node_id: str, engine: str, version: str) -> str:
        """The engine version a shard is started with; vLLM/SGLang sent to be installed first.

        A Python engine is a 10 GB environment the node builds from the
        recipe: the node is sent it along with the shard, which waits (in
        "installing", with the node's words) for the build to finish. A
        profile naming no version takes the recipe's. With no server.yaml
        entry for the engine, llmgw's own recipe is sent (only then: a
        connecting node is sent server.yaml's alone, not 10 GB it may never use).
        """
        if engine not in PYTHON_ENGINES:
            return version
        recipe = recipe_for([u.release for u in self.recipes()], engine, version)
        if recipe is None:
            return version  # the node says it has no recipe, in its own words
        live = self._registry.live(node_id)
        have = live.engines.get(engine) if live is not None else None
        if have is None or have.version != recipe.version or have.state != "installed":
            ack = await self._registry.command(
                node_id, ControlMessage(install_engine=self._install_message(recipe))
            )
            if not ack.ok:
                log.warning(
                    "node %s refused to install %s %s: %s",
                    node_id,
                    engine,
                    recipe.version,
                    ack.error,
                )
        return recipe.version

    @property
    def registry(self) -> NodeRegistry:
        return self._registry

    async def save(self, r: Replica) -> None:
        """Write a replica's record (the leader's; raises NotLeading on a standby)."""
        await self._save(r)

    def replica_key(self, r: Replica) -> str:
        """The key a start of ``r`` is given: its own, where the access is known."""
        if self.access is None:
            return self.engine_key
        return self.access.key(r.replica_id, r.restarts, r.key_epoch)

    def _mirror_args(self) -> dict:
        """The mirrors a node fetches from (the up ones first) and the read token they take."""
        if self.mirrors is None or not self.mirrors.enabled:
            return {}
        return {"mirror_urls": self.mirrors.ordered(), "mirror_token": self.mirrors.read_token}

    def _install_message(self, release: EngineRelease) -> InstallEngine:
        """A recipe's InstallEngine; an archive pinned by sha256, or a Python environment
        pinned by its hashes, is tried on the mirrors first."""
        msg = install_message(release)
        if (msg.sha256 or msg.source == "pyenv") and (args := self._mirror_args()):
            msg.mirror_urls, msg.mirror_token = args["mirror_urls"], args["mirror_token"]
        return msg

    async def _forget_stopped(self) -> None:
        for rid, r in list(self.replicas.items()):
            if r.state == rs.STOPPED and (utcnow() - r.since).total_seconds() > 60:
                if not self._fence():
                    raise NotLeading("this control plane no longer leads")
                del self.replicas[rid]
                await self._store.delete_replica(rid)
                self._registry.watch.publish("replicas", rid)
                self._registry.watch.publish("models", r.model)

    async def _save(self, r: Replica) -> None:
        if not self._fence():
            raise NotLeading("this control plane no longer leads; the replica is not written")
        await self._store.put_replica(
            ReplicaRecord(
                replica_id=r.replica_id,
                model=r.model,
                doc=r.model_dump(mode="json"),
                updated_at=utcnow(),
            )
        )
        self._registry.watch.publish("replicas", r.replica_id)
        # The model's view (ready count, state) follows from its replicas.
        self._registry.watch.publish("models", r.model)
