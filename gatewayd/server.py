"""gatewayd: the control plane process, its ports and its background work.

``GatewayServer`` opens the store, serves the agent port (mutual TLS), the
admin port (127.0.0.1, token) and the HTTP port, and runs the liveness check
and the heartbeat flush. Tests run it in-process on port 0; ``llmgw server``
runs it until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from datetime import UTC, datetime
from pathlib import Path

import uvicorn
from grpclib.events import RecvRequest, listen
from grpclib.server import Server

from gatewayd.admin.service import AdminService, token_guard
from gatewayd.admin.store_errors import StoreErrorsInWords
from gatewayd.agents.revocations import Revocations
from gatewayd.agents.service import AgentService
from gatewayd.batches import mount as mount_batches
from gatewayd.catalog.catalog import Catalog
from gatewayd.cluster.identity import advertise_host, control_plane_id, leader_guard
from gatewayd.cluster.lease import LeaderLease
from gatewayd.cluster.members import Members
from gatewayd.cluster.roles import Roles
from gatewayd.controller.reconciler import Reconciler
from gatewayd.controller.sizing import Sizing
from gatewayd.gateway.metering.journal import UsageJournal
from gatewayd.gateway.metering.load import ReplicaLoad
from gatewayd.gateway.metering.metrics import GatewayMetrics
from gatewayd.gateway.metering.scrape import Scraper
from gatewayd.gateway.metering.usage import UsageWriter
from gatewayd.gateway.policy.bands import BandPools
from gatewayd.gateway.policy.cluster import mount_shared_limits
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.policy.pricing import BudgetTable
from gatewayd.gateway.policy.spent import spent_so_far
from gatewayd.gateway.protocol.responses import mount as mount_responses
from gatewayd.gateway.proxy import FREE, Gateway
from gatewayd.gateway.routing.demand import Demand
from gatewayd.gateway.routing.endpoints import Endpoints
from gatewayd.gateway.routing.engine_access import EngineAccess
from gatewayd.gateway.routing.engine_access import client_context as engine_client_context
from gatewayd.gateway.routing.router import Router
from gatewayd.http.app import make_app
from gatewayd.http.guard import ConnectionBudget, PortGuard
from gatewayd.http.realaddr import TrustedProxies
from gatewayd.http.tls_gate import GuardedServer
from gatewayd.http.tls_http import TlsUvicorn, https_context
from gatewayd.mcp import mount as mount_mcp
from gatewayd.mirrors.set import MirrorSet
from gatewayd.nodes.registry import NodeRegistry
from gatewayd.settings import mount_settings
from gatewayd.store import Store, open_store_from_config
from gatewayd.store.cluster_records import ControlPlaneRecord
from llmgw import __version__
from llmgw.aio import within
from llmgw.catalog.price import Price
from llmgw.config import ServerConfig, server_pki_paths, split_host_port
from llmgw.errors import ConfigError, StoreError
from llmgw.fsutil import write_secret
from llmgw.grpcsize import ADMIN_MAX_MESSAGE_BYTES, AGENT_MAX_MESSAGE_BYTES, capped_codec
from llmgw.keepalive import keepalive_config
from llmgw.paths import Paths
from llmgw.tls.tlsconf import server_context

log = logging.getLogger(__name__)

LIVENESS_CHECK_INTERVAL_S = 1.0


class _QuietUvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: gatewayd owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class GatewayServer:
    def __init__(self, cfg: ServerConfig, paths: Paths, *, store: Store | None = None):
        self.cfg = cfg
        self.paths = paths
        self.store = store or open_store_from_config(cfg.store, paths)
        # This control plane's name among those sharing the store (kept in its data dir).
        self.control_plane_id = control_plane_id(paths)
        self.roles: Roles | None = None
        self.registry = NodeRegistry(
            self.store, not_ready_grace_s=cfg.nodes.not_ready_grace_s, fence=self._leading
        )
        # The model mirrors (server.yaml mirror.urls): hf: models are pinned, planned
        # and fetched through them. Tokens are read from their files as they change.
        # The mirrors' admin token is their own (mirror-admin-token), never the cluster's.
        self.mirrors = MirrorSet.from_config(cfg.mirror, paths)
        self.catalog = Catalog(
            self.store,
            self.registry.watch,
            hub_url=cfg.hub_url,
            mirrors=self.mirrors,
            provider_keys_dir=paths.provider_keys_dir,
        )
        self.reconciler: Reconciler | None = None
        self.ports: dict[str, int] = {}
        self._grpc: list[Server] = []
        self._uvicorns: list[_QuietUvicorn] = []
        self._tasks: list[asyncio.Task] = []
        self._started_at = datetime.now(UTC)

    def _read_token(self) -> str:
        try:
            token = self.paths.admin_token_file.read_text().strip()
        except OSError as e:
            raise ConfigError(
                f"the admin token {self.paths.admin_token_file} cannot be read",
                hint="create it with: llmgw server init",
            ) from e
        if not token:
            raise ConfigError(f"the admin token {self.paths.admin_token_file} is empty")
        return token

    async def start(self) -> None:
        token = self._read_token()
        # The model mirrors: probed from the start, so a plan soon after knows which is up.
        if self.mirrors.enabled:
            self._tasks.append(asyncio.create_task(self.mirrors.run(), name="mirrors"))
        ca, cert, key = server_pki_paths(self.cfg, self.paths)
        ssl_ctx = server_context(ca, cert, key)
        await self.store.open()
        self._joined = False  # set once the cluster is read (start's last step)
        # The leader lease decides which control plane reconciles and holds the
        # agents' streams; until this one leads, it takes the store's state as it is.
        self.lease = LeaderLease(
            self.store, self.control_plane_id, ttl_s=self.cfg.cluster.lease_ttl_s
        )
        self.roles = Roles(
            self.lease,
            become_leader=self._become_leader,
            become_standby=self._become_standby,
            follow=self._follow,
        )
        await self.registry.load(leading=False)
        await self.catalog.load()
        self.reconciler = Reconciler(
            self.store,
            self.registry,
            self.catalog,
            engine_key=self._engine_key(),
            lost_grace_s=self.cfg.nodes.lost_grace_s,
            engines=self.cfg.engines,
            sizing=Sizing(hub_url=self.cfg.hub_url, mirrors=self.mirrors),
            mirrors=self.mirrors,
            fence=self._leading,
        )
        # Each replica's own key, and TLS to the doors of replicas on other machines.
        self.engine_access = EngineAccess(
            self.reconciler.engine_key,
            tls=engine_client_context(self.paths, ca, self.control_plane_id),
        )
        self.reconciler.access = self.engine_access
        await self.reconciler.load()
        self.keys = KeyCache(self.store)
        await self.keys.refresh()
        # Usage rows go to a journal on local disk before each answer ends; what an
        # earlier run left there (a kill -9, a store that was down) is written first.
        journal = UsageJournal(self.paths.server_data_dir / "usage-journal")
        await journal.open()
        self.usage = UsageWriter(self.store, journal=journal)
        await self._replay_usage()
        budgets = BudgetTable()
        budgets.load(await spent_so_far(self.store))
        self.endpoints = Endpoints(
            self.reconciler,
            self.registry,
            self.catalog,
            provider_keys_dir=self.paths.provider_keys_dir,
            access=self.engine_access,
        )
        self.metrics = GatewayMetrics(known=self.endpoints.known)
        self._refusals_seen: dict[str, int] = {}
        self.scraper = Scraper(self.endpoints.scraped, tls=self.engine_access.tls)
        self.router = Router(self.endpoints.ready, self.scraper.stats)
        self.reconciler.scaler.reconfigure(self.cfg.scaling)
        self.reconciler.on_demand = self.cfg.on_demand
        self.reconciler.classes = dict(self.cfg.classes)
        self.gateway = Gateway(
            self.keys,
            self.router,
            engine_key=self.reconciler.engine_key,
            engine_tls=self.engine_access.tls,
            models=self.endpoints.catalog_models,
            known=self.endpoints.known,
            metrics=self.metrics,
            prices=self._price,
            bands=BandPools(self.cfg.router.admission, self._capacity),
            usage=self.usage,
            budgets=budgets,
        )
        await self.gateway.start()
        # The scaler reads each model's load from the engines, the router and the queue.
        self.reconciler.replica_load = ReplicaLoad(
            self.router, self.scraper.stats, queued=self.gateway.bands.queued
        )
        # The client API's stateful parts: stored responses, files and batches.
        mount_responses(self)
        mount_batches(self)
        # The MCP gateway (/mcp): self.mcp, None where server.yaml turns it off.
        await mount_mcp(self)
        # Models at min 0: their requests are held while a replica starts.
        self.gateway.demand = Demand(
            on_demand=self.endpoints.on_demand,
            ready=self.endpoints.has_ready,
            refused=self.endpoints.unplaceable,
            wake=lambda _model: self.reconciler.kick(),
            watch=self.registry.watch,
        )
        self.reconciler.on_demand_rule.demand = self.gateway.demand
        self.gateway.fallbacks = self._fallbacks
        await mount_shared_limits(self)
        await mount_settings(self)

        self.revocations = Revocations(self.store)
        await self.revocations.load()
        self._agent_service = AgentService(
            self.registry,
            heartbeat_interval_s=self.cfg.nodes.heartbeat_interval_s,
            revocations=self.revocations,
            leading=self._leading,
            control_planes=self._agent_failover,
        )
        # One budget of connections for every public port: the bound that matters
        # is the process's open files (gatewayd/http/guard.py).
        self.connection_budget = ConnectionBudget.for_process(self.cfg.connections)
        self.guards: dict[str, PortGuard] = {}
        agent = GuardedServer(
            [self._agent_service],
            config=keepalive_config(),
            codec=capped_codec(AGENT_MAX_MESSAGE_BYTES),
        )
        host, port = split_host_port(self.cfg.listen.agent)
        await agent.start_guarded(host, port, ssl_context=ssl_ctx, guard=self._guard("agent"))
        self.ports["agent"] = agent._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._grpc.append(agent)

        self.info = self._info()
        admin_service = AdminService(
            self.registry,
            self.catalog,
            self.reconciler,
            self.keys,
            store=self.store,
            info=self.info,
            metrics=self.metrics,
            revocations=self.revocations,
            batches=self.batches,
            mirrors=self.mirrors,
            mcp=self.mcp,
            cluster=self._cluster_status,
            settings=self.settings,
        )
        if self.mcp is not None:
            # llmgw:admin answers from the same admin methods as ctl, in-process.
            self.mcp.admin_tools.bind(admin_service)
        admin = Server(
            [StoreErrorsInWords(admin_service)], codec=capped_codec(ADMIN_MAX_MESSAGE_BYTES)
        )
        listen(admin, RecvRequest, token_guard(token))
        listen(admin, RecvRequest, leader_guard(self._leading, self._leader_words))
        host, port = split_host_port(self.cfg.listen.admin)
        await admin.start(host, port)
        self.ports["admin"] = admin._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._grpc.append(admin)

        await self._start_http()
        host, _ = split_host_port(self.cfg.listen.http)
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        scheme = self.cfg.http.scheme
        self.info["gateway_url"] = f"{scheme}://{host}:{self.ports['http']}/v1"
        self._tasks.append(asyncio.create_task(self._liveness_loop(), name="liveness"))
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="heartbeat-flush"))
        self.roles.leader_only("reconciler", self.reconciler.run)
        # Every control plane writes its row (the ports are known by now) and reads the others'.
        self.members = Members(self.store, self._member_record(), self.lease)
        self._tasks.append(asyncio.create_task(self.members.run(), name="members"))
        # Last: a lone control plane leads before this returns, a standby follows.
        await self.roles.start()
        self._joined = True  # the cluster is read: /ready may say so
        self._tasks.append(asyncio.create_task(self.keys.run(), name="keys"))
        self._tasks.append(asyncio.create_task(self.usage.run(), name="usage"))
        self._tasks.append(asyncio.create_task(self.scraper.run(), name="scrape"))
        self._tasks.append(asyncio.create_task(self.revocations.run(), name="revocations"))
        log.info(
            "gatewayd up: agent :%s admin :%s http :%s (store %s)",
            self.ports["agent"],
            self.ports["admin"],
            self.ports["http"],
            self.store.backend,
        )

    async def _replay_usage(self) -> None:
        segments = self.usage.journal.backlog_segments - 1  # less this run's own
        if segments <= 0:
            return
        try:
            rows = await self.usage.flush()
        except StoreError as e:
            log.warning("the usage journal's rows wait for the store: %s", e)
            return
        log.info("usage journal: %d rows of an earlier run replayed into the store", rows)

    # ---- roles: leader or standby ------------------------------------------

    def _leading(self) -> bool:
        return self.roles is not None and self.roles.leading()

    async def _become_leader(self) -> None:
        """Take the cluster's state afresh from the store; agents dial in from here."""
        await self.registry.load(leading=True)
        await self.catalog.load()
        await self.reconciler.load()
        self.reconciler.kick()

    async def _become_standby(self) -> None:
        closed = self.registry.close_all("this control plane no longer leads")
        if closed:
            log.info("closed %d agent streams: their agents dial the leader", closed)
        await self._follow()

    async def _follow(self) -> None:
        """A standby's view of the cluster: what the leader wrote, read every second."""
        await self.registry.refresh()
        await self.reconciler.load()
        await self.catalog.load()

    def _agent_failover(self) -> tuple[list[str], str]:
        """Every live control plane's agent address (the leader's first), and the leader's.

        No list while this control plane is the only one: agent.yaml names it
        as the agent reaches it, and a second name for the same machine (the
        one it advertises) would only double the agent's list.
        """
        members = getattr(self, "members", None)
        if members is None:
            return [], ""
        addresses = members.agent_addresses()
        leader = members.leader_agent_address()
        if len(addresses) < 2:
            return [], leader
        return addresses, leader

    async def _cluster_status(self) -> dict:
        """StatusReply's part on the control planes: who leads, since when, the store's state."""
        lease = self.lease
        since = lease.leader_since
        views = await self.members.views() if getattr(self, "members", None) else []
        return {
            "leader": self._leading(),
            "control_planes": views,
            "leader_id": lease.leader_id,
            "leader_since": since.isoformat(timespec="seconds") if since else "",
            "lease_ttl_s": int(self.cfg.cluster.lease_ttl_s),
            "control_plane_id": self.control_plane_id,
            "store_state": lease.store_state,
        }

    def _serving(self) -> tuple[bool, str]:
        """Whether this control plane takes requests (``/ready``), and why.

        It does once it has read the cluster from the store (its role taken,
        keys and catalog loaded) and has seen who leads. A store that stops
        answering later does not take it out: it goes on serving from what it
        holds (keys, routes, usage in its journal), as docs/ha.md says, and a
        lease between holders for a moment is still a leader known.
        """
        if not self._joined:
            return False, "starting: the cluster is not read from the store yet"
        state = self.lease.state
        if state is None or not state.holder:
            return False, "no leader is known yet"
        words = "serving"
        if self.lease.store_state != "ok":
            words = f"serving from what it holds: {self.lease.store_state}"
        return True, words

    def _leader_words(self) -> str:
        """Who leads, for a standby's refusal of what only the leader does."""
        leader = self.lease.leader_id
        members = getattr(self, "members", None)
        for row in members.rows if members is not None else []:
            if row.control_plane_id == leader and row.hostname:
                return f"{leader} on {row.hostname}"
        return leader or "none yet (the lease is changing hands)"

    def _member_record(self) -> ControlPlaneRecord:
        host = advertise_host(self.cfg)
        return ControlPlaneRecord(
            control_plane_id=self.control_plane_id,
            hostname=socket.gethostname(),
            agent_address=f"{host}:{self.ports.get('agent', 0)}",
            http_url=f"{self.cfg.http.scheme}://{host}:{self.ports.get('http', 0)}",
            admin_listen=self.cfg.listen.admin,
            version=__version__,
            started_at=self._started_at,
        )

    def _engine_key(self) -> str:
        """The key engines demand of callers: made once, kept in the secrets dir."""
        path = self.paths.secrets_dir / "engine-key"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            key = secrets.token_urlsafe(32)
            write_secret(path, key + "\n")
            return key

    def _info(self) -> dict:
        return {
            "cluster_name": self.cfg.cluster_name,
            "store_backend": self.store.backend,
            "agent_listen": self.cfg.listen.agent,
            "http_listen": self.cfg.listen.http,
        }

    def _price(self, model: str) -> Price:
        m = self.catalog.get(model)
        return m.price if m is not None else FREE

    def _fallbacks(self, model: str) -> list[str]:
        """The models that answer in ``model``'s place, in order (its catalog entry's)."""
        m = self.catalog.get(model)
        return list(m.fallbacks) if m is not None else []

    def _capacity(self, model: str) -> int:
        """A model's parallel slots: its ready replicas times its slots (0: not held back)."""
        m = self.catalog.get(model)
        if m is None or m.external is not None:
            return 0
        ready = sum(
            1 for r in self.reconciler.replicas.values() if r.model == model and r.state == "ready"
        )
        return ready * m.slots

    def _metrics_now(self) -> None:
        """Point-in-time gauges, brought up to date as /metrics is read."""
        m, bands = self.metrics, self.gateway.bands
        for band in bands.band_names:
            m.queue_depth.labels(band).set(bands.depth(band))
            m.band_in_flight.labels(band).set(bands.in_flight(band))
        out = {getattr(k, "replica_id", k) for k in self.router.breakers.open_now()}
        ready: dict[str, int] = {}
        m.replica_up.clear()
        for r in self.reconciler.replicas.values():
            ready[r.model] = ready.get(r.model, 0) + (r.state == "ready")
            up = r.state == "ready" and r.replica_id not in out
            m.replica_up.labels(r.model, r.replica_id).set(1 if up else 0)
        m.replicas_ready.clear()
        for name in self.catalog.names():
            model = self.catalog.get(name)
            if model is not None and model.external is not None:
                targets = self.endpoints.ready(name)
                ready[name] = len(targets)
                for t in targets:
                    m.replica_up.labels(name, t.replica_id).set(0 if t.replica_id in out else 1)
            m.replicas_ready.labels(name).set(ready.get(name, 0))
        for endpoint, count in self.router.key_refusals.items():
            model = endpoint.removeprefix("external:").rsplit("#", 1)[0]
            seen = self._refusals_seen.get(endpoint, 0)
            if count > seen and self.catalog.get(model) is not None:
                m.key_refusals.labels(model, endpoint).inc(count - seen)
                self._refusals_seen[endpoint] = count

    async def _start_http(self) -> None:
        app = make_app(
            is_leader=self._leading,
            routable=self.endpoints.routable,
            serving=self._serving,
            gateway=self.gateway,
            mcp=self.mcp.endpoint if self.mcp is not None else None,
        )
        self.ports["http"] = await self._serve_asgi("http", self.cfg.listen.http, app)
        self.ports["metrics"] = await self._serve_asgi(
            "metrics", self.cfg.listen.metrics, self.metrics.app(before=self._metrics_now)
        )

    def _guard(self, name: str) -> PortGuard:
        http = self.cfg.http
        # Only the gateway port sits behind the proxies server.yaml http: names.
        trusted = TrustedProxies(http.trusted_proxies if name == "http" else ())
        guard = PortGuard(
            name,
            self.cfg.connections,
            self.connection_budget,
            self.metrics,
            trusted=trusted,
            proxy_protocol=http.proxy_protocol and bool(trusted),
        )
        self.guards[name] = guard
        return guard

    async def _serve_asgi(self, name: str, listen: str, app) -> int:
        """Serve an ASGI app under uvicorn in this loop, its connections bounded; the port."""
        host, port = split_host_port(listen)
        # server.yaml http.tls_*: the gateway port serves HTTPS only.
        tls = self.cfg.http if name == "http" and self.cfg.http.tls else None
        if tls is not None:
            for what, f in (("http.tls_cert", tls.tls_cert), ("http.tls_key", tls.tls_key)):
                if not Path(f).is_file():
                    raise ConfigError(
                        f"{what} {f} is not a readable file",
                        hint="issue one with: llmgw server init --http-tls",
                    )
        guard = self._guard(name)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            http=guard.http_protocol(),
            ws="none",
            backlog=2048,
            log_level="warning",
            lifespan="off",
            access_log=False,
            # Trusted proxies are the guard's (gatewayd/http/proxied.py): it sets
            # scope["client"] itself, and counts connections by it.
            proxy_headers=False,
            server_header=False,
        )
        # HTTPS: the handshakes counted and timed by the guard too (gatewayd/http/tls_http.py).
        server = (
            _QuietUvicorn(config)
            if tls is None
            else TlsUvicorn(config, https_context(tls.tls_cert, tls.tls_key), guard)
        )
        self._uvicorns.append(server)
        task = asyncio.create_task(server.serve(), name=name)
        self._tasks.append(task)
        while not server.started:
            if task.done():
                task.result()  # raises what uvicorn hit (port in use)
                raise ConfigError(f"the {name} port {listen} could not be opened")
            await asyncio.sleep(0.02)
        return server.servers[0].sockets[0].getsockname()[1]

    async def _liveness_loop(self) -> None:
        while True:
            await asyncio.sleep(LIVENESS_CHECK_INTERVAL_S)
            try:
                await self.registry.check_liveness()
            except StoreError as e:
                log.warning("liveness check failed; trying again: %s", e)
            except Exception:
                log.exception("liveness check failed; trying again")

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.nodes.heartbeat_flush_interval_s)
            try:
                await self.registry.flush()
            except StoreError as e:
                log.warning("writing heartbeats to the store failed; kept in memory: %s", e)
            except Exception:
                log.exception("writing heartbeats to the store failed; kept in memory")

    async def stop(self) -> None:
        if hasattr(self, "_agent_service"):
            self._agent_service.stopping = True
        if self.roles is not None:
            # First: the lease is given up so a standby leads within a second, while
            # this one finishes the answers it has begun.
            with contextlib.suppress(Exception):
                await self.roles.stop()
            if getattr(self, "members", None) is not None:
                with contextlib.suppress(Exception):
                    await within(self.members.stopped(), 3)
        # Agents hear it now and dial the next control plane (the new leader),
        # rather than when the connection finally drops.
        self.registry.close_all("the control plane is stopping")
        for server in self._grpc:
            server.close()
        for server in self._uvicorns:
            server.should_exit = True
        if getattr(self, "mcp", None) is not None:
            # uvicorn waits for open answers: /mcp's notification streams end first.
            self.mcp.end_streams()
        for task in self._tasks:
            if task.get_name() not in ("http", "metrics"):
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._grpc:
            with contextlib.suppress(Exception):
                await within(server.wait_closed(), 5)
        with contextlib.suppress(Exception):
            await self.registry.flush()
        if getattr(self, "gateway", None) is not None:
            await self.gateway.close()
        if getattr(self, "mcp", None) is not None:
            await self.mcp.close()
        if getattr(self, "usage", None) is not None:
            await self.usage.close()
        if getattr(self, "mirrors", None) is not None:
            await self.mirrors.aclose()
        await self.store.close()


async def run(cfg: ServerConfig, paths: Paths, stop: asyncio.Event) -> None:
    """Run gatewayd until ``stop`` is set."""
    server = GatewayServer(cfg, paths)
    try:
        await server.start()
        await stop.wait()
    finally:
        # Also after a start that failed (a port in use): the store's thread
        # left open would keep the process from ever exiting.
        await server.stop()
