"""place(): a node and cards for one replica, or for every node why not.

The cluster is the five recorded machines (tests/fixtures/hardware): an H100
80 GB ×8 with NVSwitch, two NVLinked A100 40 GB, four L4, one Quadro RTX 6000
and a 16-core machine without GPUs. Exact nodes, GPU indexes and bytes are
asserted, as GPUStack's placement tests do with its recorded workers.
"""

from __future__ import annotations

import random

import pytest

from llmgw.catalog.model import Model, Profile
from llmgw.placement import NodeCandidate, NodeIndex, PlacementRequest, place
from tests.llmgw.placement.cluster import (
    A100,
    CPU,
    GB,
    GIB,
    H100,
    L4,
    RTX,
    cluster,
    cpu_layout,
    gpu_layout,
    node,
    plan,
    request,
)


def test_a_two_card_80_gb_tensor_parallel_need_goes_to_the_h100_node_on_gpus_0_and_1():
    decision = place(request(gpu_layout(2, 80 * GB)), cluster())

    p = decision.placement
    assert p is not None
    assert (p.node_id, p.gpu_indexes, p.layout_index) == (H100, [0, 1], 0)
    assert p.per_gpu_bytes == {0: 80_000_000_000, 1: 80_000_000_000}
    assert p.layout.tensor_parallel == 2 and p.host_memory_bytes == 0
    assert p.score.nvlinked and p.score.cards == 2
    assert decision.refused == "" and decision.fitting == 1
    # Every other node says why not.
    assert set(decision.reasons) == {A100, L4, RTX, CPU}
    assert decision.reasons[A100] == (
        "needs 74.5 GiB free on each of 2 cards, 0 of 2 have it "
        "(the next most free, GPU 0, has 40.0 GiB)"
    )
    assert decision.reasons[RTX] == "needs 2 GPUs, has 1"
    assert decision.reasons[CPU] == "cannot install vllm here (it can install: llama.cpp, sim)"


def test_with_gpu_0_busy_the_need_takes_the_next_free_pair():
    nodes = cluster(dgx_h100_01={"gpu_used_bytes": {0: 70 * GB}})

    p = place(request(gpu_layout(2, 80 * GB)), nodes).placement

    assert (p.node_id, p.gpu_indexes) == (H100, [1, 2])
    assert p.per_gpu_bytes == {1: 80 * GB, 2: 80 * GB}


def test_a_need_that_fits_nowhere_is_refused_with_each_nodes_free_and_needed_gib():
    nodes = cluster(dgx_h100_01={"gpu_used_bytes": {i: 10 * GIB for i in range(8)}})

    decision = place(request(gpu_layout(1, 100 * GB), engine="llama.cpp"), nodes)

    assert decision.placement is None
    assert decision.reasons == {
        A100: "GPU 0 has 40.0 GiB free, needs 93.1 GiB",
        CPU: "has no GPU (no NVIDIA driver)",
        H100: "GPU 0 has 69.6 GiB free, needs 93.1 GiB",
        L4: "GPU 0 has 22.5 GiB free, needs 93.1 GiB",
        RTX: "GPU 0 has 24.0 GiB free, needs 93.1 GiB",
    }
    assert decision.refused == (
        "no node can run it: 1 without a suitable GPU, "
        "4 short of GPU memory (largest free card 69.6 GiB, needs 93.1 GiB)"
    )
    assert decision.counts == {"without a suitable GPU": 1, "short of GPU memory": 4}


def test_a_refusal_counts_every_kind_of_reason_in_the_order_of_the_chain():
    nodes = cluster(
        dgx_h100_01={"state": "not_ready"},
        a100_pair={"cordoned": True},
        ws_rtx6000={"state": "not_ready"},
    )

    decision = place(request(gpu_layout(1, 30 * GB)), nodes)

    assert decision.refused == (
        "no node can run it: 2 not ready, 1 cordoned, 1 cannot run vllm, "
        "1 short of GPU memory (largest free card 22.5 GiB, needs 27.9 GiB)"
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"state": "not_ready"}, "node is not ready"),
        ({"state": "registering"}, "node is registering"),
        ({"cordoned": True}, "cordoned: takes no new replicas"),
        ({"draining": True}, "draining: its replicas are moving off"),
    ],
)
def test_a_node_not_taking_work_is_skipped_with_that_reason(fields, reason):
    nodes = cluster(dgx_h100_01=fields)

    decision = place(request(gpu_layout(1, 30 * GB)), nodes)

    assert decision.reasons[H100] == reason
    # The A100 is the only other card with 27.9 GiB free.
    assert decision.placement.node_id == A100


def test_an_engine_the_node_cannot_install_is_skipped_saying_so():
    decision = place(request(gpu_layout(1, 10 * GB), engine="vllm"), [node(CPU)])

    assert decision.reasons == {CPU: "cannot install vllm here (it can install: llama.cpp, sim)"}
    assert decision.refused == "no node can run it: 1 cannot run vllm"


def test_an_engine_that_failed_on_the_node_is_skipped_in_the_nodes_own_words():
    failed = {"vllm": "failed: libstdc++.so.6 is too old (needs GLIBCXX_3.4.30)"}
    nodes = [node(H100, engines_installed=failed), node(A100)]

    decision = place(request(gpu_layout(1, 30 * GB)), nodes)

    assert decision.reasons[H100] == (
        "vllm failed: libstdc++.so.6 is too old (needs GLIBCXX_3.4.30)"
    )
    assert decision.placement.node_id == A100


def test_an_engine_still_installing_keeps_the_node():
    # The replica waits out the install in its own state; sending it elsewhere
    # would leave the node's install wasted.
    installing = {"vllm": "installing: downloading vllm-0.9.2 (1.2 GB)"}
    nodes = [node(H100, engines_installed=installing, installable_engines=[])]

    assert place(request(gpu_layout(1, 30 * GB)), nodes).placement.node_id == H100


def test_compute_capability_8_9_skips_the_a100_and_the_rtx_6000_saying_their_cc():
    decision = place(request(gpu_layout(1, 20 * GB), min_cc="8.9"), cluster())

    assert decision.reasons[A100] == (
        "no GPU of compute capability 8.9 or newer: has 2 × NVIDIA A100-SXM4-40GB (cc 8.0, 40.0 GiB)"
    )
    assert decision.reasons[RTX] == (
        "no GPU of compute capability 8.9 or newer: has 1 × Quadro RTX 6000 (cc 7.5, 24.0 GiB)"
    )
    # Both the L4 (8.9) and the H100 (9.0) qualify; the L4's card is the tighter fit.
    p = decision.placement
    assert (p.node_id, p.gpu_indexes, p.per_gpu_bytes) == (L4, [0], {0: 20 * GB})
    assert decision.reasons[H100] == (
        "fits on GPU 0 but scored lower "
        "(leaves 61.0 GiB free once placed, g2-l4-node-1 3.9 GiB: the tighter fit wins)"
    )


def test_a_gpu_class_by_card_size_skips_smaller_cards():
    decision = place(request(gpu_layout(1, 20 * GB), min_memory_bytes=80 * GB), cluster())

    assert decision.placement.node_id == H100
    assert decision.reasons[L4] == (
        "no GPU with 74.5 GiB or more: has 4 × NVIDIA L4 (cc 8.9, 22.5 GiB)"
    )


def test_a_cpu_layout_goes_to_the_cpu_node_when_no_gpu_layout_fits():
    req = request(gpu_layout(1, 100 * GB), cpu_layout(40 * GIB), engine="llama.cpp")

    decision = place(req, cluster())

    p = decision.placement
    assert (p.node_id, p.gpu_indexes, p.per_gpu_bytes) == (CPU, [], {})
    assert (p.layout_index, p.host_memory_bytes) == (1, 40 * GIB)
    # The GPU machines have the host memory too, but their cores feed their GPUs.
    assert decision.reasons[H100] == (
        "fits on CPU but scored lower (a CPU layout is kept off nodes with GPUs; cpu-16c has none)"
    )


def test_a_gpu_layout_that_fits_anywhere_beats_the_cpu_layout():
    req = request(gpu_layout(1, 30 * GB), cpu_layout(40 * GIB), engine="llama.cpp")

    decision = place(req, cluster())

    assert decision.placement.node_id == A100
    assert decision.reasons[CPU] == (
        "fits on CPU but scored lower (only a CPU layout fits here; a100-pair runs it on GPUs)"
    )


def test_a_profile_for_cpu_ignores_the_gpu_layouts_of_the_plan():
    req = request(gpu_layout(1, 10 * GB), cpu_layout(8 * GIB), engine="llama.cpp", cpu=True)

    p = place(req, cluster()).placement

    assert (p.node_id, p.layout_index, p.gpu_indexes) == (CPU, 1, [])


def test_a_node_short_of_host_memory_for_a_cpu_layout_says_how_much():
    req = request(cpu_layout(100 * GIB), engine="llama.cpp")

    decision = place(req, [node(CPU, host_memory_used_bytes=10 * GIB)])

    assert decision.reasons[CPU] == "host has 52.8 GiB free, needs 100.0 GiB"
    assert decision.refused == (
        "no node can run it: 1 short of host memory (most free 52.8 GiB, needs 100.0 GiB)"
    )


def test_the_decision_is_the_same_whatever_order_the_nodes_come_in():
    nodes = cluster(a100_pair={"gpu_used_bytes": {1: 5 * GB}})
    req = request(gpu_layout(1, 20 * GB), engine="llama.cpp")
    first = place(req, nodes)

    for seed in range(10):
        shuffled = nodes[:]
        random.Random(seed).shuffle(shuffled)
        again = place(req, shuffled)
        assert again.model_dump() == first.model_dump()
        assert list(again.reasons) == sorted(again.reasons)


def test_placements_reserved_one_after_another_never_share_a_card():
    # Guards the reconciler's pass: without reserving, every replica of a
    # model would be handed the same free cards.
    nodes = cluster()
    by_id = {n.node_id: n for n in nodes}
    req = request(gpu_layout(4, 60 * GB))
    taken = []
    for _ in range(3):
        d = place(req, nodes)
        if d.placement is None:
            break
        p = d.placement
        by_id[p.node_id].reserve(p.per_gpu_bytes, p.host_memory_bytes)
        taken.append((p.node_id, p.gpu_indexes))

    assert taken == [(H100, [0, 1, 2, 3]), (H100, [4, 5, 6, 7])]
    assert by_id[H100].free_bytes(5) == 85_520_809_984 - 60 * GB


def test_an_empty_plan_is_refused_with_the_planners_words_for_every_node():
    req = PlacementRequest(
        model="huge", engine="vllm", plan=plan(refused="needs 1.2 TB; no node has that")
    )

    decision = place(req, cluster())

    assert decision.refused == "nothing to place: needs 1.2 TB; no node has that"
    assert set(decision.reasons) == {H100, A100, L4, RTX, CPU}
    assert decision.reasons[L4] == "nothing to place: needs 1.2 TB; no node has that"


def test_a_cluster_without_nodes_is_refused_saying_so():
    decision = place(request(gpu_layout(1, GB)), [])

    assert decision.placement is None
    assert decision.refused == "no node can run it: the cluster has no nodes"


def test_explain_shows_the_decision_and_every_nodes_reason():
    text = place(request(gpu_layout(2, 80 * GB)), cluster()).explain()

    lines = text.splitlines()
    assert lines[0] == (
        "qwen (profile default, vllm): on dgx-h100-01, GPUs [0, 1], "
        "layout 1 (2 cards, TP 2, 74.5 GiB each); 1 node(s) fit"
    )
    assert len(lines) == 5
    assert lines[1].split()[:2] == ["a100-pair", "needs"]
    assert any(line.split()[0] == CPU for line in lines[1:])


def test_explain_of_a_refusal_leads_with_the_summary():
    text = place(request(gpu_layout(1, 100 * GB)), [node(RTX)]).explain()

    assert text.splitlines() == [
        (
            "qwen (profile default, vllm): not placed: no node can run it: "
            "1 short of GPU memory (largest free card 24.0 GiB, needs 93.1 GiB)"
        ),
        "  ws-rtx6000  GPU 0 has 24.0 GiB free, needs 93.1 GiB",
    ]


def test_a_request_is_made_from_a_catalog_model_and_one_of_its_profiles():
    model = Model(
        name="judge",
        source="hf:org/judge:judge.gguf",
        labels={"llmgw.role": "judge"},
        profiles=[Profile(name="cpu", engine="llama.cpp", cpu=True)],
    )

    req = PlacementRequest.for_profile(model, model.profiles[0], plan(cpu_layout(4 * GIB)))
    judge_node = node(CPU, labels={"llmgw.role": "judge"})

    assert (req.model, req.profile, req.engine, req.cpu) == ("judge", "cpu", "llama.cpp", True)
    assert place(req, [judge_node, node(H100)]).placement.node_id == CPU


def test_a_node_candidate_is_equal_to_its_copy_after_it_has_been_placed_on():
    # The hardware cache a decision leaves on a node is not part of the node.
    used = node(H100)
    place(request(gpu_layout(1, GB)), [used])

    assert used == node(H100)
    assert isinstance(used, NodeCandidate)


def test_replicas_reserving_cores_fill_a_node_and_the_next_is_refused_for_cores():
    req = request(cpu_layout(4 * GIB), engine="llama.cpp", cores=6)
    nodes = [node(CPU)]
    index = NodeIndex(nodes)
    placed = []
    for _ in range(3):
        decision = place(req, index)
        if decision.placement is None:
            break
        p = decision.placement
        index.get(p.node_id).reserve(p.per_gpu_bytes, p.host_memory_bytes, p.cores)
        placed.append(p.cores)

    assert placed == [6, 6]  # 16 cores: two of six, four left
    assert decision.refused == "no node can run it: 1 short of CPU cores (most free 4, needs 6)"
    assert decision.reasons == {CPU: "host has 4 of 16 CPU cores free, needs 6"}
