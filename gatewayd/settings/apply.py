"""Applying a settings version to a running control plane, part by part, without a restart.

Only the sections that differ from the version before are touched, so a
change to the mirrors never disturbs the admission queues. Each part is
applied on its own: one that fails is reported (``ctl config get`` shows it)
and the others still take their new values.

    router   the gateway's admission bands, keeping requests in flight and queued
    engines  the releases nodes converge to; connected nodes are told at once
    mirror   the mirror list and its probe interval (probed at once)
    limits   limits.key_default for every key that sets none of its own
    nodes    the not-ready and lost graces, the heartbeat flush (the heartbeat
             itself reaches agents with their settings)
    agents   sent to every connected agent (gatewayd/settings/agents.py)
    scaling  the scaler's thresholds and windows, from its next pass
    on_demand  the idle eviction's timings, from the reconciler's next pass
    classes  the priority classes, from the reconciler's next pass
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gatewayd.gateway.policy.limits import UNLIMITED, Limits
from llmgw.settings import ClusterSettings

log = logging.getLogger(__name__)


class ServerApply:
    """Applies versions to the parts of one GatewayServer (``server`` as gatewayd/server.py builds it)."""

    def __init__(self, server) -> None:
        self._server = server
        self._tasks: set[asyncio.Task] = set()

    def __call__(self, new: ClusterSettings, old: ClusterSettings) -> list[str]:
        problems: list[str] = []
        parts: list[tuple[str, bool, Callable[[ClusterSettings], None]]] = [
            ("router", new.router != old.router, self._router),
            ("engines", new.engines != old.engines, self._engines),
            ("mirror", new.mirror != old.mirror, self._mirror),
            ("limits", new.limits != old.limits, self._limits),
            ("nodes", new.nodes != old.nodes, self._nodes),
            ("scaling", new.scaling != old.scaling, self._scaling),
            ("on_demand", new.on_demand != old.on_demand, self._on_demand),
            ("classes", new.classes != old.classes, self._classes),
        ]
        for name, changed, apply in parts:
            if not changed:
                continue
            try:
                apply(new)
            except Exception as e:
                log.exception("settings: %s could not be applied", name)
                problems.append(f"{name}: could not be applied here: {e}")
        return problems

    def _router(self, new: ClusterSettings) -> None:
        server = self._server
        server.cfg.router = new.router.model_copy(deep=True)
        server.gateway.bands.reconfigure(new.router.admission)

    def _engines(self, new: ClusterSettings) -> None:
        server = self._server
        engines = [e.model_copy(deep=True) for e in new.engines]
        server.cfg.engines = engines
        reconciler = server.reconciler
        reconciler.set_engines(engines)
        # Connected nodes hear of the new releases now, not at their next registration.
        for live in server.registry.live_nodes():
            if live.connected:
                self._background(reconciler.install_engines(live.record.node_id))

    def _mirror(self, new: ClusterSettings) -> None:
        server = self._server
        urls, every_s = list(new.mirror.urls), new.mirror.probe_interval_s
        server.cfg.mirror = server.cfg.mirror.model_copy(
            update={"urls": urls, "probe_interval_s": every_s}
        )
        server.mirrors.reconfigure(urls, every_s)
        probing = any(t.get_name() == "mirrors" and not t.done() for t in server._tasks)
        if server.mirrors.enabled and not probing:
            # The first mirror of a cluster that had none: start probing it.
            server._tasks.append(asyncio.create_task(server.mirrors.run(), name="mirrors"))

    def _limits(self, new: ClusterSettings) -> None:
        values = new.limits.key_default.model_dump(exclude_none=True)
        self._server.keys.set_key_defaults(Limits(**values) if values else UNLIMITED)

    def _nodes(self, new: ClusterSettings) -> None:
        server = self._server
        server.cfg.nodes = new.nodes.model_copy(deep=True)
        server.registry.set_grace(new.nodes.not_ready_grace_s)
        server.reconciler.set_lost_grace(new.nodes.lost_grace_s)

    def _scaling(self, new: ClusterSettings) -> None:
        self._server.cfg.scaling = new.scaling.model_copy(deep=True)
        self._server.reconciler.scaler.reconfigure(self._server.cfg.scaling)

    def _on_demand(self, new: ClusterSettings) -> None:
        self._server.cfg.on_demand = new.on_demand.model_copy(deep=True)
        self._server.reconciler.on_demand = self._server.cfg.on_demand

    def _classes(self, new: ClusterSettings) -> None:
        self._server.cfg.classes = dict(new.classes)
        self._server.reconciler.classes = dict(new.classes)
        self._server.reconciler.kick()

    def _background(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
