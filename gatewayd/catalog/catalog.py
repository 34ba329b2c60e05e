"""The model catalog as the control plane holds it: validated, in memory, stored.

Every change goes through pydantic ``Model`` validation (names, sources,
profiles) before it reaches the store, and is announced on the watch topic
"models" so consoles and the reconciler see it at once.

When a model is added, what its source names is checked where the control
plane can see it: an hf: source's revision is pinned to the commit it names
now (a branch moving upstream later changes nothing: replicas fetch the
pinned commit), a missing repository, revision or file refused in the hub's
words (through the cluster's mirrors where it has some: none holding it is
refused with the command that adds it, unless the model's allow_internet
lets it use the hub); a local path the control plane can read must be a GGUF file, a
safetensors file or a model directory (a path only the nodes have is checked
by them).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from gatewayd.catalog.key_files import refused_key_file
from gatewayd.mirrors.hub import read_through
from gatewayd.mirrors.set import MirrorSet
from gatewayd.nodes.watch import Broadcaster
from gatewayd.store import ModelRecord, Store
from llmgw.catalog import Model
from llmgw.catalog.model import is_pickled
from llmgw.engines.flags import check_args, check_env
from llmgw.errors import LlmgwError
from llmgw.hub import HF_BASE_URL, HubClient, HubError, HubUnreachable
from llmgw.modelplan.formats import NotWeights, check_local_weights
from llmgw.present.modelfmt import validation_text

log = logging.getLogger(__name__)


class CatalogError(Exception):
    """A change the catalog refuses; ``kind`` maps to the admin API status."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "invalid", "not_found", "exists"
        self.message = message


class Catalog:
    def __init__(
        self,
        store: Store,
        watch: Broadcaster,
        *,
        hub_url: str = HF_BASE_URL,
        mirrors: MirrorSet | None = None,
        provider_keys_dir: Path | None = None,
    ):
        self._store = store
        # Where an external model's api_key_files must lie (None: nowhere, none is taken).
        self.provider_keys_dir = provider_keys_dir
        self._watch = watch
        self.hub_url = hub_url
        # With mirrors configured, hf: sources are pinned through them (the hub only
        # where a model's allow_internet lets it).
        self.mirrors = mirrors
        self._models: dict[str, ModelRecord] = {}

    async def load(self) -> None:
        """Take the catalog as the store has it (at start, on leading, and on a standby).

        A record that did not change is kept as the same object: the gateway's
        per-model caches are keyed on it.
        """
        models: dict[str, ModelRecord] = {}
        for rec in await self._store.list_models():
            old = self._models.get(rec.name)
            same = old is not None and old.updated_at == rec.updated_at and old.spec == rec.spec
            models[rec.name] = old if same else rec
            if not same:
                self._watch.publish("models", rec.name)
        gone = self._models.keys() - models.keys()
        self._models = models
        for name in gone:
            self._watch.publish("models", name)

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
        if model.is_external:
            self._check_key_files(model)
        else:
            await asyncio.to_thread(_check_local, model)
            model = await self._pin(model, self.get(model.name))
        await self._save(model)
        return model

    def _check_key_files(self, model: Model) -> None:
        """Key files outside the providers' directory are refused, naming it: gatewayd
        would send what they hold to the model's url (gatewayd.catalog.key_files)."""
        for key in model.external.api_key_files:
            why = refused_key_file(key.file, self.provider_keys_dir)
            if why is not None:
                raise CatalogError("invalid", f"model {model.name}: {why}")

    async def _pin(self, model: Model, prev: Model | None) -> Model:
        """An hf: model with the commit its revision names now, checked on the hub.

        A model put again with the same source keeps its commit: only a new
        source (or a commit given on purpose) moves it.
        """
        src = model.parsed_source
        if src.kind != "hf":
            return model.model_copy(update={"commit": ""}) if model.commit else model
        if not model.commit and prev is not None and prev.source == model.source and prev.commit:
            return model.model_copy(update={"commit": prev.commit})
        revision = model.commit or src.revision

        async def pin(hub: HubClient) -> str:
            commit = await hub.resolve(src.location, revision)
            if src.is_repo:
                files = [f.path for f in await hub.list_files(src.location, commit)]
                _check_repo_files(str(src), files, model.allow_pickle)
            else:
                await hub.head(src.location, commit, src.file)
            return commit

        try:
            commit = await read_through(
                self.mirrors,
                self.hub_url,
                src.location,
                revision,
                pin,
                allow_internet=model.allow_internet,
                file=src.file,
            )
        except HubUnreachable as e:
            raise CatalogError(
                "unavailable",
                f"{model.source} cannot be pinned to a commit: {e.message} ({e.hint})",
            ) from None
        except HubError as e:
            raise CatalogError("invalid", e.message + (f" ({e.hint})" if e.hint else "")) from None
        log.info("model %s: %s pinned to commit %s", model.name, model.source, commit)
        return model.model_copy(update={"commit": commit})

    async def scale(
        self,
        name: str,
        replicas: int | None = None,
        *,
        low: int | None = None,
        high: int | None = None,
    ) -> Model:
        """Set the model's bounds: ``replicas`` both, or ``low``/``high`` (min, max) each.

        A bound left out keeps its value, unless the other one passes it: then
        it follows (``--min 3`` on a model of max 2 makes both 3).
        """
        model = self._need(name)
        if low is None and high is None:
            if replicas is None:
                raise CatalogError("invalid", "say how many replicas, or --min and --max")
            low = high = replicas
        for what, n in (("min", low), ("max", high)):
            if n is not None and not 0 <= n <= 1000:
                raise CatalogError("invalid", f"{what} must be 0-1000, not {n}")
        if low is not None and high is not None and high < low:
            raise CatalogError("invalid", f"max ({high}) is below min ({low})")
        lo = model.replicas_min if low is None else low
        hi = model.replicas_max if high is None else high
        if low is None:
            lo = min(lo, hi)
        if high is None:
            hi = max(hi, lo)
        model = model.model_copy(update={"replicas_min": lo, "replicas_max": hi})
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

    async def set_cores(self, name: str, cores: int, profile: str = "") -> Model:
        """The cores ``profile`` (the first, when "") reserves per CPU replica."""
        model = self._need(name)
        if model.is_external:
            raise CatalogError(
                "invalid", f"{name} is answered by its provider; it runs nothing here"
            )
        names = [p.name for p in model.profiles]
        at = names.index(profile) if profile in names else (0 if not profile else -1)
        if at < 0:
            raise CatalogError(
                "not_found", f"{name} has no profile {profile!r} (it has {', '.join(names)})"
            )
        profiles = [p.model_dump() for p in model.profiles]
        profiles[at]["cores"] = cores
        try:
            model = Model.model_validate({**model.model_dump(), "profiles": profiles})
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
        bounds = (
            f"{model.replicas_min}"
            if model.replicas_min == model.replicas_max
            else f"{model.replicas_min}..{model.replicas_max}"
        )
        log.info("model %s saved (%s replicas)", model.name, bounds)
        self._watch.publish("models", model.name)


def _check_local(model: Model) -> None:
    """A local path the control plane can see must hold weights (the sim needs none)."""
    src = model.parsed_source
    if src.kind != "file" or all(p.engine == "sim" for p in model.profiles):
        return
    path = Path(src.location)
    if not path.exists():
        return  # a path on the nodes only: each node checks it before starting
    try:
        check_local_weights(path)
    except NotWeights as e:
        raise CatalogError("invalid", e.message + (f" ({e.hint})" if e.hint else "")) from None


def _check_repo_files(source: str, files: list[str], allow_pickle: bool) -> None:
    """A whole repository must hold what an engine loads: a config and safetensors."""
    if "config.json" not in files:
        raise CatalogError(
            "invalid",
            f"{source} has no config.json: it is not a model an engine can load whole "
            "(name one GGUF file of it: hf:org/repo:file.gguf)",
        )
    pickles = allow_pickle and any(is_pickled(f) for f in files)
    if not pickles and not any(f.endswith(".safetensors") for f in files):
        raise CatalogError(
            "invalid",
            f"{source} holds no safetensors weights (models stored only as pickles are not "
            "served; name a GGUF file of it, or a repository with safetensors)",
        )
