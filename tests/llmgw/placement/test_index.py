"""place() on a NodeIndex chooses exactly what the scan of every node chooses, with its reasons.

Randomized clusters (hypothesis): the recorded machines and variants of them
(bridged NVLink pairs, MIG instances, two kinds of card in one node), in
every state, with cards partly used, labels, failed engines and cached
weights; randomized plans of one to three layouts. The scan
(``decide.scan``) is the reference: the index's decision must be the same in
every field, reasons included, whether they are read at once or after
later reservations.
"""

from __future__ import annotations

import pickle
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw.inventory import Inventory
from llmgw.placement import NodeCandidate, NodeIndex, PlacementRequest, place, search
from llmgw.placement.decide import scan
from tests.llmgw.placement.cluster import GIB, H100, cpu_layout, inventory, node, plan, request
from tests.llmgw.placement.cluster import gpu_layout as card_layout


def _bridged() -> Inventory:
    inv = inventory("l4_24g_x4")
    peers = {0: [2], 1: [3], 2: [0], 3: [1]}
    inv.gpus = [g.model_copy(update={"nvlink_peers": peers[g.index]}) for g in inv.gpus]
    inv.host.hostname = "bridged"
    return inv


def _mixed() -> Inventory:
    """Two H100s and two L4s in one machine: a node whose cards are of two kinds."""
    h100, l4 = inventory("h100_80g_x8"), inventory("l4_24g_x4")
    cards = [h100.gpus[0], h100.gpus[1], l4.gpus[0], l4.gpus[1]]
    gpus = [g.model_copy(update={"index": i, "nvlink_peers": []}) for i, g in enumerate(cards)]
    return Inventory(host=l4.host, gpus=gpus)


KINDS = [
    inventory("h100_80g_x8"),
    inventory("a100_40g_x2_nvlink"),
    inventory("l4_24g_x4"),
    inventory("rtx6000_24g_x1"),
    inventory("cpu_only_16c"),
    inventory("a100_80g_mig"),
    _bridged(),
    _mixed(),
]
CARD_NAMES = sorted({g.name for inv in KINDS for g in inv.gpus})
MODELS = ["qwen", "llama", "gemma"]
# Sizes on a coarse grid, so that ties (equal usage, equal leftovers) are common.
SIZES = [4 * GIB, 9 * GIB, 12 * GIB, 20 * GIB, 36 * GIB, 60 * GIB, 75 * GIB, 90 * GIB]


@st.composite
def nodes_strategy(draw) -> list[NodeCandidate]:
    count = draw(st.integers(min_value=0, max_value=24))
    out = []
    for k in range(count):
        inv = draw(st.sampled_from(KINDS))
        units = [g.index for g in inv.gpus]
        # A card index 0 on a node without cards plays memory reported on
        # no unit placement hands out (a MIG card's own figure, say).
        used = draw(
            st.dictionaries(
                st.sampled_from(units or [0]),
                st.sampled_from([0, GIB, 5 * GIB, 20 * GIB, 40 * GIB, 79 * GIB, 200 * GIB])
                | st.integers(min_value=0, max_value=90 * GIB),
                max_size=4,
            )
        )
        engines = {}
        if draw(st.booleans()):
            engines["vllm"] = draw(
                st.sampled_from(
                    ["installed 0.9.2", "installing: 16 MB", "failed: too old", "failed: no CUDA"]
                )
            )
        out.append(
            node(
                f"n{k:02d}",
                inventory=inv,
                state=draw(st.sampled_from(["ready"] * 6 + ["not_ready", "registering"])),
                cordoned=draw(st.booleans()) and draw(st.booleans()),
                draining=draw(st.booleans()) and draw(st.booleans()),
                labels={
                    **draw(
                        st.sampled_from(
                            [{}, {}, {"zone": "a"}, {"zone": "b"}, {"llmgw.role": "judge"}]
                        )
                    ),
                    # A label of its own on some nodes: no two nodes share it.
                    **({"host": f"n{k:02d}"} if draw(st.booleans()) else {}),
                },
                engines_installed=engines,
                gpu_used_bytes=used,
                host_memory_used_bytes=draw(st.sampled_from([0, 0, 8 * GIB, 60 * GIB])),
                cores_used=draw(st.sampled_from([0, 0, 4, 14, 16, 40])),
                models_cached=set(draw(st.lists(st.sampled_from(MODELS), max_size=2))),
            )
        )
    return out


@st.composite
def layouts_strategy(draw):
    layouts = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if draw(st.integers(min_value=0, max_value=4)) == 0:
            layouts.append(cpu_layout(draw(st.sampled_from([8 * GIB, 40 * GIB, 600 * GIB]))))
            continue
        cards = draw(st.sampled_from([1, 1, 2, 2, 4, 8]))
        tp = draw(st.sampled_from([cards, cards, 1]))
        layout = card_layout(cards, draw(st.sampled_from(SIZES)), tp=tp)
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            layout = layout.model_copy(update={"card_name": draw(st.sampled_from(CARD_NAMES))})
        layouts.append(layout.model_copy(update={"context": draw(st.sampled_from([0, 8192]))}))
    return layouts


@st.composite
def request_strategy(draw) -> PlacementRequest:
    return request(
        *draw(layouts_strategy()),
        engine=draw(st.sampled_from(["vllm", "llama.cpp", "sglang"])),
        model=draw(st.sampled_from(MODELS)),
        min_cc=draw(st.sampled_from(["", "", "8.0", "8.9"])),
        min_memory_bytes=draw(st.sampled_from([0, 0, 0, 10 * GIB, 40 * GIB])),
        labels=draw(
            st.sampled_from(
                [{}, {}, {"zone": "a"}, {"llmgw.role": "judge"}, {"host": "n03"}, {"zone": ""}]
            )
        ),
        cpu=draw(st.booleans()) and draw(st.booleans()),
        cores=draw(st.sampled_from([0, 0, 2, 8])),
    )


def copies(nodes: list[NodeCandidate]) -> list[NodeCandidate]:
    return [n.model_copy(deep=True) for n in nodes]


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# The search weighs the few groups a ladder shows can hold a layout, or walks
# a class most used first when there are more: both ways are drawn.
WAYS = st.sampled_from([0, search.FEW_GROUPS])


@SETTINGS
@given(nodes=nodes_strategy(), req=request_strategy(), explain=st.booleans(), few=WAYS)
def test_the_index_chooses_what_the_scan_chooses_with_the_same_reasons(nodes, req, explain, few):
    expected = scan(req, copies(nodes), explain=explain)

    with patch.object(search, "FEW_GROUPS", few):
        got = place(req, NodeIndex(nodes), explain=explain)

    assert got.placement == expected.placement
    assert got.refused == expected.refused
    assert got.model_dump() == expected.model_dump()


@SETTINGS
@given(
    nodes=nodes_strategy(),
    reqs=st.lists(request_strategy(), min_size=1, max_size=6),
    few=WAYS,
)
def test_a_pass_reserving_each_placement_decides_as_the_scan_does(nodes, reqs, few):
    # The reconciler's pass: one index, each placement reserved on its node.
    theirs = copies(nodes)
    by_id = {n.node_id: n for n in theirs}
    index = NodeIndex(nodes)
    for i, req in enumerate(reqs * 2):
        req = req.model_copy(update={"model": f"{req.model}-{i % 3}"})
        expected = scan(req, theirs, explain=False)
        with patch.object(search, "FEW_GROUPS", few):
            got = place(req, index, explain=False)
        assert got.placement == expected.placement
        assert got.refused == expected.refused
        if got.placement is not None:
            p = got.placement
            index.get(p.node_id).reserve(p.per_gpu_bytes, p.host_memory_bytes, p.cores)
            by_id[p.node_id].reserve(p.per_gpu_bytes, p.host_memory_bytes, p.cores)


@SETTINGS
@given(nodes=nodes_strategy(), req=request_strategy())
def test_reasons_read_after_later_reservations_are_those_of_the_moment_of_the_decision(nodes, req):
    expected = scan(req, copies(nodes))
    index = NodeIndex(nodes)
    decision = place(req, index)
    for _ in range(2):  # the same placement taken twice more, as a pass would go on
        again = place(req, index, explain=False)
        if again.placement is None:
            break
        p = again.placement
        index.get(p.node_id).reserve(p.per_gpu_bytes, p.host_memory_bytes, p.cores)

    assert decision.reasons == expected.reasons
    assert (decision.counts, decision.fitting) == (expected.counts, expected.fitting)


def test_the_index_follows_a_reservation_made_on_its_node():
    nodes = [node(H100), node("h100-b", fixture="h100_80g_x8")]
    index = NodeIndex(nodes)
    req = request(card_layout(1, 60 * GIB))

    first = place(req, index).placement
    index.get(first.node_id).reserve(first.per_gpu_bytes, first.host_memory_bytes)
    second = place(req, index).placement

    assert (first.node_id, first.gpu_indexes) == (H100, [0])
    # Pack before spread: the node now in use takes the next one, on its next card.
    assert (second.node_id, second.gpu_indexes) == (H100, [1])


def test_a_decision_on_the_index_fills_in_its_reasons_when_first_read():
    nodes = [node(H100), node("h100-b", fixture="h100_80g_x8", cordoned=True)]

    decision = place(request(card_layout(1, 60 * GIB)), NodeIndex(nodes))

    assert "reasons" not in decision.__dict__  # nothing worked out that nobody read
    assert decision.reasons == {"h100-b": "cordoned: takes no new replicas"}
    assert (decision.counts, decision.fitting) == ({"cordoned": 1}, 1)


def test_a_refusal_on_the_index_sums_up_at_once_as_the_scan_does():
    nodes = [node(H100), node("h100-b", fixture="h100_80g_x8", gpu_used_bytes={0: 70 * GIB})]
    req = request(card_layout(1, 90 * GIB), card_layout(2, 90 * GIB))

    decision = place(req, NodeIndex(nodes))

    assert decision.placement is None
    assert decision.refused == scan(req, nodes).refused
    assert decision.refused.startswith("no node can run it: 2 short of GPU memory")


def test_an_index_refuses_two_nodes_of_one_id():
    with pytest.raises(ValueError, match="unique"):
        NodeIndex([node(H100), node(H100)])


def test_a_plan_with_nothing_to_place_is_refused_alike_on_the_index():
    req = PlacementRequest(model="huge", engine="vllm", plan=plan(refused="needs 1.2 TB"))
    nodes = [node(H100)]

    assert place(req, NodeIndex(nodes)).model_dump() == scan(req, nodes).model_dump()


def test_a_node_in_an_index_still_pickles_and_copies_equal():
    n = node(H100)
    index = NodeIndex([n])
    place(request(card_layout(1, 60 * GIB)), index)

    assert pickle.loads(pickle.dumps(n)) == n
    assert n.model_copy(deep=True) == n
