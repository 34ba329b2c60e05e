"""The filter chain: each filter keeps a node or gives the reason in plain words."""

from __future__ import annotations

from llmgw.placement import CHAIN, FILTERS, place
from llmgw.placement.filters import (
    engine_runs,
    first_refusal,
    gpu_suitable,
    labels_match,
    memory_fits,
    node_ready,
)
from tests.llmgw.placement.cluster import (
    CPU,
    GB,
    GIB,
    H100,
    cpu_layout,
    gpu_layout,
    inventory,
    node,
    request,
)

SMALL = gpu_layout(1, GB)


def test_the_chain_runs_from_node_state_to_memory():
    assert [f.__name__ for f in FILTERS] == [
        "node_ready",
        "not_cordoned",
        "not_draining",
        "labels_match",
        "engine_runs",
        "gpu_suitable",
        "memory_fits",
    ]
    assert FILTERS[: len(CHAIN)] == CHAIN


def test_the_first_filter_to_refuse_gives_the_reason():
    n = node(H100, state="not_ready", cordoned=True, labels={})

    f, reason = first_refusal(request(SMALL), n)

    assert (f, reason) == (node_ready, "node is not ready")


def test_a_ready_node_passes_every_filter():
    n = node(H100)

    assert [f(request(SMALL), n) for f in FILTERS] == [None] * len(FILTERS)


def test_a_model_label_the_node_lacks_is_named_with_what_the_node_has():
    req = request(SMALL, labels={"zone": "us", "tier": "gold"})

    assert labels_match(req, node(H100, labels={"zone": "eu", "tier": "gold"})) == (
        "labels do not match: needs zone=us, node has tier=gold, zone=eu"
    )
    assert labels_match(req, node(H100)) == (
        "labels do not match: needs zone=us, tier=gold, node has none"
    )


def test_a_node_with_more_labels_than_asked_still_matches():
    req = request(SMALL, labels={"zone": "eu"})

    assert labels_match(req, node(H100, labels={"zone": "eu", "rack": "r7"})) is None


def test_a_node_with_a_role_takes_only_models_that_ask_for_it():
    # The judges' machine took other models beside the judges and slowed them.
    judges = node(H100, labels={"llmgw.role": "judge"})

    assert labels_match(request(SMALL), judges) == (
        "kept for role judge: the model does not ask for it"
    )
    assert labels_match(request(SMALL, labels={"llmgw.role": "judge"}), judges) is None


def test_an_engine_is_kept_when_installed_or_installable_and_refused_when_failed():
    req = request(SMALL, engine="sglang")

    assert engine_runs(req, node(H100, installable_engines=["sglang"])) is None
    assert engine_runs(req, node(H100, engines_installed={"sglang": "installed 0.4"})) is None
    assert (
        engine_runs(req, node(H100, engines_installed={"sglang": "failed: no CUDA 12 runtime"}))
        == "sglang failed: no CUDA 12 runtime"
    )
    assert engine_runs(req, node(H100, installable_engines=[])) == (
        "cannot install sglang here (it can install: none)"
    )


def test_a_node_without_gpus_is_refused_for_a_plan_of_gpu_layouts_only():
    assert gpu_suitable(request(SMALL, engine="llama.cpp"), node(CPU)) == (
        "has no GPU (no NVIDIA driver)"
    )


def test_a_node_without_gpus_is_kept_when_the_plan_also_has_a_cpu_layout():
    req = request(SMALL, cpu_layout(GIB), engine="llama.cpp")

    assert gpu_suitable(req, node(CPU)) is None
    assert place(req, [node(CPU)]).placement.node_id == CPU


def test_a_card_of_unknown_compute_capability_does_not_meet_a_minimum():
    inv = inventory("rtx6000_24g_x1")
    inv.gpus[0] = inv.gpus[0].model_copy(update={"compute_capability": ""})

    assert gpu_suitable(request(SMALL, min_cc="7.0"), node("old", inventory=inv)) == (
        "no GPU of compute capability 7.0 or newer: has 1 × Quadro RTX 6000 (cc unknown, 24.0 GiB)"
    )


def test_the_memory_filter_gives_the_fit_shortfall():
    n = node(H100, gpu_used_bytes={i: 80 * GB for i in range(8)})

    assert memory_fits(request(gpu_layout(1, 10 * GB)), n) == (
        "GPU 0 has 5.1 GiB free, needs 9.3 GiB"
    )
    assert memory_fits(request(gpu_layout(1, 10 * GB)), node(H100)) is None
