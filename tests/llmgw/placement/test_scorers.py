"""Scoring the nodes that fit: fewest cards, pack before spread, cached weights, node id."""

from __future__ import annotations

from llmgw.placement import place
from tests.llmgw.placement.cluster import A100, GB, H100, L4, gpu_layout, node, request


def h100(name: str, **fields):
    return node(name, fixture="h100_80g_x8", **fields)


def test_pack_before_spread_a_used_node_is_filled_before_an_empty_one_is_opened():
    nodes = [h100("h100-a"), h100("h100-b", gpu_used_bytes={3: 40 * GB})]

    decision = place(request(gpu_layout(1, 20 * GB)), nodes)

    p = decision.placement
    assert (p.node_id, p.gpu_indexes) == ("h100-b", [3])
    assert not p.score.opens_empty_node
    assert decision.reasons["h100-a"] == (
        "fits on GPU 0 but scored lower "
        "(it is empty and h100-b is not: pack before spread keeps whole nodes free)"
    )


def test_of_two_used_nodes_the_more_used_one_is_filled_first():
    nodes = [
        h100("h100-b", gpu_used_bytes={3: 40 * GB}),
        h100("h100-c", gpu_used_bytes={3: 40 * GB, 4: 40 * GB}),
    ]

    decision = place(request(gpu_layout(1, 20 * GB)), nodes)

    assert decision.placement.node_id == "h100-c"
    assert decision.reasons["h100-b"] == (
        "fits on GPU 3 but scored lower (5.8% used against 11.7% on h100-c: pack before spread)"
    )


def test_cached_weights_tip_a_tie():
    nodes = [h100("h100-a"), h100("h100-b", models_cached={"qwen"})]

    decision = place(request(gpu_layout(1, 20 * GB)), nodes)

    assert decision.placement.node_id == "h100-b"
    assert decision.placement.score.weights_cached
    assert decision.reasons["h100-a"] == (
        "fits on GPU 0 but scored lower (the weights are not on its disk; h100-b has them)"
    )


def test_cached_weights_do_not_open_an_empty_node_while_a_used_one_fits():
    # A download is paid once; a node opened for one small model stays
    # fragmented for as long as that replica lives.
    nodes = [h100("h100-a", gpu_used_bytes={0: 10 * GB}), h100("h100-b", models_cached={"qwen"})]

    assert place(request(gpu_layout(1, 20 * GB)), nodes).placement.node_id == "h100-a"


def test_fewest_cards_a_node_that_holds_the_model_on_one_card_wins():
    req = request(gpu_layout(1, 60 * GB), gpu_layout(2, 35 * GB))

    decision = place(req, [node(H100), node(A100)])

    assert decision.placement.node_id == H100
    assert decision.placement.score.cards == 1
    assert decision.reasons[A100] == (
        "fits on GPUs [0, 1] but scored lower (needs 2 cards here, 1 on dgx-h100-01: "
        "fewest cards first)"
    )


def test_cards_joined_by_nvlink_win_over_cards_that_are_not():
    decision = place(request(gpu_layout(2, 15 * GB)), [node(L4), node(A100)])

    assert decision.placement.node_id == A100
    assert decision.reasons[L4] == (
        "fits on GPUs [0, 1] but scored lower "
        "(its cards are not joined by NVLink; those on a100-pair are)"
    )


def test_equal_nodes_are_decided_by_node_id():
    decision = place(request(gpu_layout(1, 20 * GB)), [h100("h100-b"), h100("h100-a")])

    assert decision.placement.node_id == "h100-a"
    assert decision.reasons["h100-b"] == (
        "fits on GPU 0 but scored lower (a tie with h100-a, which sorts first by node id)"
    )
