"""Where a model can be answered: its ready replicas, as the gateway's router sees them."""

from __future__ import annotations

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller.reconciler import Reconciler
from gatewayd.gateway.router import Target
from gatewayd.nodes.registry import NodeRegistry


class Endpoints:
    """The controller's replicas and the catalog, read at each request (no copies to go stale)."""

    def __init__(self, reconciler: Reconciler, registry: NodeRegistry, catalog: Catalog):
        self._reconciler = reconciler
        self._registry = registry
        self._catalog = catalog

    def ready(self, model: str) -> list[Target]:
        """The model's ready replicas, each with the address its node reported."""
        out = []
        for r in self._reconciler.replicas.values():
            if r.model == model and r.state == "ready" and r.port:
                live = self._registry.live(r.node_id)
                host = (live.record.address if live else "") or "127.0.0.1"
                out.append(Target(r.replica_id, f"http://{host}:{r.port}"))
        return out

    def catalog_models(self) -> list[tuple[str, bool]]:
        """(name, loaded) of every catalog model."""
        ready = {r.model for r in self._reconciler.replicas.values() if r.state == "ready"}
        return [(name, name in ready) for name in self._catalog.names()]

    def known(self, model: str) -> bool:
        return self._catalog.get(model) is not None

    def routable(self) -> tuple[bool, str]:
        """Whether any model can be answered now (``/ready``), and why."""
        ready = [r for r in self._reconciler.replicas.values() if r.state == "ready"]
        if ready:
            return True, f"{len(ready)} replicas ready"
        return False, "no model is ready to serve yet"
