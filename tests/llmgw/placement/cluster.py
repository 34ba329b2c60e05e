"""A test cluster built from the recorded GPU inventories, and plans made by hand.

Node ids are the recorded hostnames. GPU nodes can install every engine; the
CPU-only node only llama.cpp and sim, as its agent would report.
"""

from __future__ import annotations

from pathlib import Path

from llmgw.catalog.model import GpuNeed
from llmgw.inventory import Inventory
from llmgw.modelplan.types import CardNeed, Layout, ModelFacts, Plan
from llmgw.placement import NodeCandidate, PlacementRequest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"
GB = 10**9
GIB = 1024**3

H100 = "dgx-h100-01"
A100 = "a100-pair"
L4 = "g2-l4-node-1"
RTX = "ws-rtx6000"
CPU = "cpu-16c"
FIXTURE_OF = {
    H100: "h100_80g_x8",
    A100: "a100_40g_x2_nvlink",
    L4: "l4_24g_x4",
    RTX: "rtx6000_24g_x1",
    CPU: "cpu_only_16c",
}
# Bytes of one card of each recorded model, as NVML reported them.
H100_CARD = 85_520_809_984
A100_CARD = 42_949_672_960


def inventory(fixture: str) -> Inventory:
    return Inventory.model_validate_json((FIXTURES / f"{fixture}.json").read_text())


def node(name: str, fixture: str | None = None, **fields) -> NodeCandidate:
    """A ready node from a recorded inventory; ``fields`` override any NodeCandidate field.

    ``fixture`` names the recording when ``name`` is not one of the five hostnames.
    """
    inv = fields.pop("inventory", None) or inventory(fixture or FIXTURE_OF[name])
    engines = ["llama.cpp", "vllm", "sglang", "sim"] if inv.gpus else ["llama.cpp", "sim"]
    fields.setdefault("installable_engines", engines)
    return NodeCandidate(node_id=name, inventory=inv, **fields)


def cluster(**changes: dict) -> list[NodeCandidate]:
    """The five recorded machines; ``changes`` maps a node id (with _ for -) to field overrides."""
    overrides = {k.replace("_", "-"): v for k, v in changes.items()}
    return [node(name, **overrides.get(name, {})) for name in FIXTURE_OF]


def gpu_layout(cards: int, per_card_bytes: int, tp: int | None = None) -> Layout:
    """A layout on ``cards`` cards needing ``per_card_bytes`` on each (weights, KV, overhead)."""
    kv = per_card_bytes // 10
    overhead = 2 * GB if per_card_bytes > 4 * GB else 0
    return Layout(
        kind="gpu",
        gpus=cards,
        tensor_parallel=cards if tp is None else tp,
        per_card=CardNeed(
            weights_bytes=per_card_bytes - kv - overhead, kv_bytes=kv, overhead_bytes=overhead
        ),
    )


def cpu_layout(host_bytes: int) -> Layout:
    return Layout(kind="cpu", host_memory_bytes=host_bytes)


def plan(*layouts: Layout, refused: str = "") -> Plan:
    return Plan(
        facts=ModelFacts(format="safetensors"),
        context=8192,
        kv_bytes_per_token=0,
        layouts=list(layouts),
        refused=refused,
    )


def request(
    *layouts: Layout,
    engine: str = "vllm",
    model: str = "qwen",
    min_cc: str = "",
    min_memory_bytes: int = 0,
    **fields,
) -> PlacementRequest:
    gpu = GpuNeed(min_compute_capability=min_cc, min_memory_bytes=min_memory_bytes)
    return PlacementRequest(model=model, engine=engine, gpu=gpu, plan=plan(*layouts), **fields)


def on(card_name: str, layout: Layout) -> Layout:
    """The layout as planning makes it: for one kind of card, named as NVML names it."""
    return layout.model_copy(update={"card_name": card_name})
