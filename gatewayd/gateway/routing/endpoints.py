"""Where a model can be answered: its ready replicas, or its outside provider's keys."""

from __future__ import annotations

import time
from pathlib import Path

from gatewayd.catalog.catalog import Catalog
from gatewayd.controller.reconciler import Reconciler
from gatewayd.gateway.routing.engine_access import EngineAccess
from gatewayd.gateway.routing.external import ExternalEndpoints
from gatewayd.gateway.routing.router import Target
from gatewayd.nodes.registry import NodeRegistry
from llmgw.catalog.external import EXTERNAL_SOURCE

# A model whose facts are not read yet (its hub repository not reached) is
# looked at again after this long, not at every request.
FACTS_RECHECK_S = 30.0


class Endpoints:
    """The controller's replicas and the catalog, read at each request (no copies to go stale)."""

    def __init__(
        self,
        reconciler: Reconciler,
        registry: NodeRegistry,
        catalog: Catalog,
        *,
        provider_keys_dir: Path | None = None,
        access: EngineAccess | None = None,
    ):
        self._reconciler = reconciler
        # Each replica's key and the TLS to its door (None: no key is sent).
        self.access = access or EngineAccess("")
        self._registry = registry
        self._catalog = catalog
        # None: no outside provider's key file is read (gatewayd passes its secrets').
        self.external = ExternalEndpoints(keys_dir=provider_keys_dir)
        # model -> (its catalog record, profile name -> engine): read once per record.
        self._engines: dict[str, tuple[object, dict[str, str]]] = {}
        # model -> (its catalog record, vocabulary size, when it was looked at).
        self._vocab: dict[str, tuple[object, int, float]] = {}

    def _external_spec(self, model: str) -> dict | None:
        rec = self._catalog.record(model)
        if rec is not None and rec.spec.get("source") == EXTERNAL_SOURCE:
            return rec.spec
        return None

    def ready(self, model: str) -> list[Target]:
        """The model's ready replicas with the address each node reported, or its keys."""
        spec = self._external_spec(model)
        if spec is not None:
            return self.external.targets(model, spec)
        return self._replicas(model)

    def all_ready(self) -> list[Target]:
        """Every ready replica of every model."""
        return self._replicas(None)

    def scraped(self) -> list[Target]:
        """What the scraper asks for metrics: every ready replica, and every draining one
        (whose requests must be seen to end before it is stopped)."""
        return self._replicas(None, states=("ready", "draining"))

    def _replicas(self, model: str | None, states: tuple[str, ...] = ("ready",)) -> list[Target]:
        out = []
        for r in self._reconciler.replicas.values():
            if (model is None or r.model == model) and r.state in states and r.port:
                live = self._registry.live(r.node_id)
                host = (live.record.address if live else "") or "127.0.0.1"
                scheme = self.access.scheme(host)
                url_host = f"[{host}]" if ":" in host else host
                out.append(
                    Target(
                        r.replica_id,
                        f"{scheme}://{url_host}:{r.port}",
                        authorization=self.access.authorization(r.replica_id, r.restarts, r.key_epoch),
                        engine=self._engine_of(r.model, r.profile),
                        vocab_size=self.vocab_size(r.model),
                        peer_name=r.node_id if scheme == "https" else "",
                    )
                )
        return out

    def _engine_of(self, model: str, profile: str) -> str:
        rec = self._catalog.record(model)
        if rec is None:
            return ""
        cached = self._engines.get(model)
        if cached is None or cached[0] is not rec:
            # The record's spec as stored: a profile left at its default has no engine key.
            profiles = rec.spec.get("profiles") or [{}]
            engines = {
                p.get("name", "default"): p.get("engine") or "llama.cpp"
                for p in profiles
                if isinstance(p, dict)
            }
            cached = self._engines[model] = (rec, engines)
        return cached[1].get(profile, "")

    def vocab_size(self, model: str) -> int:
        """The model's vocabulary size from the facts planning read (0: not known yet).

        Never reads a file or asks the hub: the gateway asks at every request.
        """
        rec = self._catalog.record(model)
        if rec is None:
            return 0
        cached = self._vocab.get(model)
        now = time.monotonic()
        if (
            cached is not None
            and cached[0] is rec
            and (cached[1] or now - cached[2] < FACTS_RECHECK_S)
        ):
            return cached[1]
        size = 0
        spec = self._catalog.get(model)
        facts = self._reconciler.sizing.known(spec) if spec is not None else None
        if facts is not None:
            size = facts.vocab_size
        self._vocab[model] = (rec, size, now)
        return size

    def catalog_models(self) -> list[tuple[str, bool]]:
        """(name, loaded) of every catalog model; an external one is always loaded."""
        ready = {r.model for r in self._reconciler.replicas.values() if r.state == "ready"}
        return [
            (name, name in ready or self._external_spec(name) is not None)
            for name in self._catalog.names()
        ]

    def on_demand(self, model: str) -> bool:
        """Whether ``model`` is started by its first request (min 0, a max above it)."""
        m = self._catalog.get(model)
        return m is not None and not m.is_external and m.replicas_min == 0 and m.replicas_max > 0

    def has_ready(self, model: str) -> bool:
        return any(
            r.model == model and r.state == "ready" and r.port
            for r in self._reconciler.replicas.values()
        )

    def unplaceable(self, model: str) -> str | None:
        """Why ``model``'s replica could not be placed, once placement was tried and refused."""
        for r in self._reconciler.replicas.values():
            if r.model == model and r.state == "pending" and r.retry_at is not None:
                return r.reason
        return None

    def known(self, model: str) -> bool:
        return self._catalog.record(model) is not None

    def routable(self) -> tuple[bool, str]:
        """Whether any model can be answered now (``/ready``), and why."""
        ready = [r for r in self._reconciler.replicas.values() if r.state == "ready"]
        if ready:
            return True, f"{len(ready)} replicas ready"
        external = [n for n in self._catalog.names() if self._external_spec(n) is not None]
        if external:
            return True, f"{len(external)} models answered by outside providers"
        return False, "no model is ready to serve yet"
