"""The model catalog as the control plane holds it: validated, in memory, stored.

Every change goes through pydantic ``Model`` validation (names, sources,
profiles) before it reaches the store, and is announced on the watch topic
"models" so consoles and the reconciler see it at once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from pydantic import ValidationError

from gatewayd.nodes.watch import Broadcaster
from gatewayd.store import ModelRecord, Store
from llmgw.catalog import Model
from llmgw.engine_flags import check_args, check_env
from llmgw.errors import LlmgwError
from llmgw.modelfmt import validation_text

log = logging.getLogger(__name__)


class CatalogError(Exception):
    """A change the catalog refuses; ``kind`` maps to the admin API status."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "invalid", "not_found", "exists"
        self.message = message


class Catalog:
    def __init__(self, store: Store, watch: Broadcaster):
        self._store = store
        self._watch = watch
        self._models: dict[str, ModelRecord] = {}

    async def load(self) -> None:
        for rec in await self._store.list_models():
            self._models[rec.name] = rec

    def get(self, name: str) -> Model | None:
        rec = self._models.get(name)
        return Model.model_validate(rec.spec) if rec else None

    def record(self, name: str) -> ModelRecord | None:
        return self._models.get(name)

    def names(self) -> list[str]:
        return sorted(self._models)

    def models(self) -> list[Model]:
        return [self.get(n) for n in self.names()]  # type: ignore[misc]

    def _need(self, name: str) -> Model:
        model = self.get(name)
        if model is None:
            raise CatalogError("not_found", f"no model named {name!r}; see: llmgw ctl models")
        return model

    async def put(self, spec: dict, *, create_only: bool = False) -> Model:
        try:
            model = Model.model_validate(spec)
        except ValidationError as e:
            raise CatalogError("invalid", validation_text(e)) from None
        # Refused here, where the operator sees it, not later on a node.
        for profile in model.profiles:
            try:
                check_args(profile.engine, profile.args)
                check_env(profile.engine, profile.env)
            except LlmgwError as e:
                raise CatalogError(
                    "invalid",
                    f"profile {profile.name}: {e.message}" + (f" ({e.hint})" if e.hint else ""),
                ) from None
        if create_only and model.name in self._models:
            raise CatalogError(
                "exists",
                f"a model named {model.name!r} exists; change it with llmgw ctl model scale/context,"
                f" or remove it first (llmgw ctl model rm {model.name})",
            )
        await self._save(model)
        return model

    async def scale(self, name: str, replicas: int) -> Model:
        model = self._need(name)
        if not 0 <= replicas <= 1000:
            raise CatalogError("invalid", f"replicas must be 0-1000, not {replicas}")
        model = model.model_copy(update={"replicas_min": replicas, "replicas_max": replicas})
        await self._save(model)
        return model

    async def set_context(self, name: str, context: int, slots: int) -> Model:
        model = self._need(name)
        update: dict = {"context_length": context}
        if slots:
            update["slots"] = slots
        try:
            model = Model.model_validate({**model.model_dump(), **update})
        except ValidationError as e:
            raise CatalogError("invalid", validation_text(e)) from None
        await self._save(model)
        return model

    async def remove(self, name: str) -> None:
        self._need(name)
        await self._store.delete_model(name)
        self._models.pop(name, None)
        self._watch.publish("models", name)

    async def _save(self, model: Model) -> None:
        now = datetime.now(UTC)
        prev = self._models.get(model.name)
        rec = ModelRecord(
            name=model.name,
            spec=model.model_dump(mode="json"),
            created_at=prev.created_at if prev else now,
            updated_at=now,
        )
        await self._store.put_model(rec)
        self._models[model.name] = rec
        log.info("model %s saved (%s replicas)", model.name, model.replicas_min)
        self._watch.publish("models", model.name)
