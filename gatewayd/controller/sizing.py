"""What a model needs, as far as the control plane can tell.

The control plane reads a model's metadata itself where it can: a local
GGUF it can see (as for `llmgw up`'s starter model), a whole Hugging Face
repository through the hub (config.json and every safetensors shard's
header, a few kilobytes each, never the weights), and one GGUF file of a
repository (its header, read with Range). With mirrors configured these
are read through them (gatewayd/mirrors/hub.py), the hub only where the
model allows it. Facts are kept per commit: a commit never changes.
Otherwise it plans from the profile's stated needs and says the size is
unknown.

``learn`` (async, may ask the hub) fills what ``plan`` (pure, sync) reads:
the reconciler and the admin API call it before they plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

from gatewayd.mirrors.hub import read_through
from gatewayd.mirrors.set import MirrorSet
from llmgw.catalog import Model, Profile
from llmgw.errors import LlmgwError
from llmgw.hub import COMMIT_RE, HF_BASE_URL, HubClient, HubError
from llmgw.hub.facts import read_repo_facts
from llmgw.hub.gguf_remote import read_remote_gguf
from llmgw.inventory import Inventory
from llmgw.modelplan.cache import PlanCache
from llmgw.modelplan.types import CardNeed, Layout, ModelFacts, Plan

log = logging.getLogger(__name__)

# A hub that could not be read is asked again after this long, not at every
# reconcile pass (which runs every second or so).
RETRY_AFTER_S = 60.0
# Per connect and per read when the reconciler (not an operator) asks.
BACKGROUND_TIMEOUT_S = 5.0


class Sizing:
    """Model facts per source (and per commit for hub repositories), read once and remembered."""

    def __init__(self, *, hub_url: str = HF_BASE_URL, mirrors: MirrorSet | None = None) -> None:
        self.hub_url = hub_url
        # The cluster's mirrors: hf: sources are read through them when set.
        self.mirrors = mirrors
        self._facts: dict[str, ModelFacts | None] = {}
        # (repo, commit, file) -> facts: two models of one commit read it once.
        self._by_commit: dict[tuple[str, str, str], ModelFacts] = {}
        # source#commit -> (monotonic time of the failure, what went wrong).
        self._failed: dict[str, tuple[float, str]] = {}
        # A pass plans each model once per set of node shapes, not per decision.
        self.plans = PlanCache()

    @staticmethod
    def _key(model: Model) -> str:
        return f"{model.source}#{model.commit or model.sha256}"

    def facts(self, model: Model) -> ModelFacts | None:
        """What is known of the model now, without asking the hub."""
        key = self._key(model)
        if key not in self._facts:
            src = model.parsed_source
            if _on_hub(src):
                return None  # only learn() asks the hub
            self._facts[key] = self._read_local(model)
        return self._facts[key]

    def known(self, model: Model) -> ModelFacts | None:
        """The facts already read of the model, if any: never reads a file or asks the hub."""
        return self._facts.get(self._key(model))

    def remember(self, model: Model, facts: ModelFacts) -> None:
        """Hold facts read elsewhere as the model's (as learn() would have read them)."""
        self._failed.pop(self._key(model), None)
        self._facts[self._key(model)] = facts

    def problem(self, model: Model) -> str:
        """Why the hub could not tell the model's facts ("" when it did or was not asked)."""
        failed = self._failed.get(self._key(model))
        return failed[1] if failed else ""

    async def learn(self, model: Model, *, strict: bool = False) -> ModelFacts | None:
        """The model's facts, asking the hub for a whole repository not read yet.

        ``strict`` raises the hub's error (planning a source before adding it);
        otherwise a failure is logged, remembered for a minute, and the model
        is sized from its profile meanwhile.
        """
        src = model.parsed_source
        if not _on_hub(src):
            return self.facts(model)
        key = self._key(model)
        if self._facts.get(key) is not None:
            return self._facts[key]
        failed = self._failed.get(key)
        if failed and not strict and time.monotonic() - failed[0] < RETRY_AFTER_S:
            return None
        try:
            facts = await self._read_hub(model, strict)
        except HubError as e:
            text = e.message + (f" ({e.hint})" if e.hint else "")
            self._failed[key] = (time.monotonic(), text)
            if strict:
                raise
            log.warning("cannot read %s from the hub: %s", model.source, text)
            return None
        self._failed.pop(key, None)
        self._facts[key] = facts
        return facts

    async def _read_hub(self, model: Model, strict: bool) -> ModelFacts:
        src = model.parsed_source
        repo, revision = src.location, model.commit or src.revision
        # The reconciler waits on this inside a pass: a hub that does not
        # answer costs it seconds once a minute, not the client's full retries.
        patient = {} if strict else {"retries": 0, "timeout_s": BACKGROUND_TIMEOUT_S}

        async def read(hub: HubClient) -> ModelFacts:
            commit = revision if COMMIT_RE.fullmatch(revision or "") else ""
            if not commit:
                commit = await hub.resolve(repo, revision)
            cached = self._by_commit.get((repo, commit, src.file))
            if cached is not None:
                return cached
            if src.file:
                facts = await read_remote_gguf(hub, repo, commit, src.file)
            else:
                facts = await read_repo_facts(hub, repo, commit)
            self._by_commit[(repo, commit, src.file)] = facts
            return facts

        return await read_through(
            self.mirrors,
            self.hub_url,
            repo,
            revision,
            read,
            allow_internet=model.allow_internet,
            file=src.file,
            **patient,
        )

    @staticmethod
    def _read_local(model: Model) -> ModelFacts | None:
        src = model.parsed_source
        path = Path(src.location)
        if src.kind != "file":
            return None
        try:
            if path.is_file() and src.location.endswith(".gguf"):
                from llmgw.modelplan.gguf_meta import read_gguf

                return read_gguf(path)
            if path.is_dir() and (path / "config.json").is_file():
                from llmgw.modelplan.hf_meta import read_hf_dir

                return read_hf_dir(path)
        except LlmgwError as e:
            log.warning("cannot read %s: %s", src.location, e)
        return None

    def plan(self, model: Model, profile: Profile, inventories: Iterable[Inventory] = ()) -> Plan:
        """The model's layouts on the shapes of node the cluster has.

        The same list of inventories handed again (a pass's decisions) is
        grouped once; see llmgw/modelplan/cache.py.
        """
        facts = self.facts(model)
        if facts is not None:
            plan = self.plans.plan(
                facts,
                profile.engine,
                context=model.context_length,
                slots=model.slots,
                inventories=inventories,
                precision=profile.precision,
            )
            return on_cards_asked(plan, profile)
        mirrored = self.mirrors is not None and self.mirrors.enabled
        return stated_plan(
            model, profile, self.problem(model), asked="the mirrors" if mirrored else "the hub"
        )


def on_cards_asked(plan: Plan, profile: Profile) -> Plan:
    """The plan's GPU layouts on exactly the cards a profile asks for (``--gpus N``).

    The operator's count is a decision, not a floor: a model that fits one
    card still runs tensor parallel over two when asked. CPU layouts go too,
    as a profile with a GPU count never runs on the CPU.
    """
    count = profile.gpu.count if profile.gpu else 0
    if not count:
        return plan
    kept = [lay for lay in plan.layouts if lay.kind == "gpu" and lay.gpus == count]
    if kept:
        return plan.model_copy(update={"layouts": kept})
    return plan.model_copy(
        update={
            "layouts": [],
            "refused": plan.refused or f"the plan has no layout on {count} GPU(s) for this model",
        }
    )


def stated_plan(
    model: Model, profile: Profile, problem: str = "", *, asked: str = "the hub"
) -> Plan:
    """A plan from the profile's own words, when the weights cannot be read here.

    ``asked``: where the facts were looked for ("the hub", "the mirrors").
    """
    note = "the model's size is unknown to the control plane; sized from its profile"
    if problem:
        note += f" ({asked}: {problem})"
    layouts: list[Layout] = []
    if not profile.cpu:
        need = profile.gpu
        count = need.count if need and need.count else 1
        per_card = need.min_memory_bytes if need else 0
        layouts.append(
            Layout(
                kind="gpu",
                gpus=count,
                tensor_parallel=count,
                per_card=CardNeed(weights_bytes=per_card, kv_bytes=0, overhead_bytes=0),
                context=model.context_length,
                notes=[note],
            )
        )
    if profile.engine in ("llama.cpp", "sim") and not (profile.gpu and profile.gpu.count):
        layouts.append(Layout(kind="cpu", context=model.context_length, notes=[note]))
    return Plan(
        facts=ModelFacts(format="gguf"),
        context=model.context_length,
        kv_bytes_per_token=0,
        layouts=layouts,
        notes=[note],
    )


def _on_hub(src) -> bool:
    """Whether learn() reads a source's facts from a hub: a repository or one GGUF file of it."""
    return src.kind == "hf" and (src.is_repo or src.file.endswith(".gguf"))
