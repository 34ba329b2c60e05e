"""What a model needs, as far as the control plane can tell.

The control plane reads a model's metadata itself when it can reach the
file (a local path, as for `llmgw up`'s starter model); otherwise it plans
from the profile's stated needs and says the size is unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from llmgw.catalog import Model, Profile
from llmgw.errors import LlmgwError
from llmgw.inventory import Inventory
from llmgw.modelplan.types import CardNeed, Layout, ModelFacts, Plan

log = logging.getLogger(__name__)


class Sizing:
    """Model facts per source, read once and remembered."""

    def __init__(self) -> None:
        self._facts: dict[str, ModelFacts | None] = {}

    def facts(self, model: Model) -> ModelFacts | None:
        key = f"{model.source}#{model.sha256}"
        if key not in self._facts:
            self._facts[key] = self._read(model)
        return self._facts[key]

    @staticmethod
    def _read(model: Model) -> ModelFacts | None:
        src = model.parsed_source
        if src.kind != "file" or not Path(src.location).is_file():
            return None
        try:
            if src.location.endswith(".gguf"):
                from llmgw.modelplan.gguf_meta import read_gguf

                return read_gguf(Path(src.location))
        except LlmgwError as e:
            log.warning("cannot read %s: %s", src.location, e)
        return None

    def plan(self, model: Model, profile: Profile, inventories: Iterable[Inventory] = ()) -> Plan:
        """The model's layouts on the shapes of node the cluster has."""
        facts = self.facts(model)
        if facts is not None:
            from llmgw.modelplan.plan import plan_for_inventories

            return plan_for_inventories(
                facts,
                profile.engine,
                context=model.context_length,
                slots=model.slots,
                inventories=list(inventories),
            )
        return stated_plan(model, profile)


def stated_plan(model: Model, profile: Profile) -> Plan:
    """A plan from the profile's own words, when the weights cannot be read here."""
    note = "the model's size is unknown to the control plane; sized from its profile"
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
