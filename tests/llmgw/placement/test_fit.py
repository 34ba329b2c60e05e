"""fit_node(): on one node, the first layout that fits and its cards, or the shortfall in words."""

from __future__ import annotations

import pytest

from llmgw.placement import Fit, Misfit, fit_node
from llmgw.placement.fit import SHORT_CORES, SHORT_GPU, SHORT_HOST, TOO_FEW_GPUS
from tests.llmgw.placement.cluster import (
    A100,
    A100_CARD,
    CPU,
    GB,
    GIB,
    H100,
    L4,
    RTX,
    cpu_layout,
    gpu_layout,
    inventory,
    node,
    request,
)


def bridged_pairs(**fields):
    """Four L4 cards where 0-2 and 1-3 are bridged by NVLink, nothing else."""
    inv = inventory("l4_24g_x4")
    peers = {0: [2], 1: [3], 2: [0], 3: [1]}
    inv.gpus = [g.model_copy(update={"nvlink_peers": peers[g.index]}) for g in inv.gpus]
    return node("bridged", inventory=inv, **fields)


def test_tensor_parallel_prefers_two_cards_joined_by_nvlink():
    fit = fit_node(request(gpu_layout(2, 10 * GB)), bridged_pairs())

    assert isinstance(fit, Fit)
    assert (fit.gpu_indexes, fit.linked) == ((0, 2), True)


def test_with_gpu_0_full_the_other_bridged_pair_is_taken():
    fit = fit_node(request(gpu_layout(2, 10 * GB)), bridged_pairs(gpu_used_bytes={0: 20 * GB}))

    assert (fit.gpu_indexes, fit.linked) == ((1, 3), True)


def test_when_no_joined_pair_has_room_unjoined_cards_are_taken_and_said_to_be():
    used = {0: 20 * GB, 3: 20 * GB}

    fit = fit_node(request(gpu_layout(2, 10 * GB)), bridged_pairs(gpu_used_bytes=used))

    assert (fit.gpu_indexes, fit.linked) == ((1, 2), False)


def test_a_layer_split_does_not_look_for_nvlink_nor_lose_for_lack_of_it():
    # tp 1: llama.cpp takes turns between the cards, the link barely matters.
    fit = fit_node(request(gpu_layout(2, 10 * GB, tp=1)), bridged_pairs())

    assert (fit.gpu_indexes, fit.linked) == ((0, 1), True)


def test_four_cards_are_never_all_joined_on_two_bridged_pairs():
    n = bridged_pairs()

    fit = fit_node(request(gpu_layout(4, 10 * GB)), n)

    assert n.static().largest_linked == 2
    assert (fit.gpu_indexes, fit.linked) == ((0, 1, 2, 3), False)


@pytest.mark.parametrize(("name", "linked"), [(H100, 8), (A100, 2), (L4, 1), (RTX, 1)])
def test_the_largest_set_of_joined_cards_is_read_from_the_recorded_topology(name, linked):
    assert node(name).static().largest_linked == linked


def test_the_fullest_card_that_still_fits_is_taken_first():
    n = node(H100, gpu_used_bytes={2: 10 * GB, 5: 50 * GB})

    fit = fit_node(request(gpu_layout(1, 30 * GB)), n)

    assert fit.gpu_indexes == (5,)
    assert fit.leftover_bytes == 85_520_809_984 - 50 * GB - 30 * GB


def test_a_card_too_full_for_the_need_is_passed_over_for_the_next():
    n = node(H100, gpu_used_bytes={5: 60 * GB})

    assert fit_node(request(gpu_layout(1, 30 * GB)), n).gpu_indexes == (0,)


def test_several_cards_short_say_how_many_have_room_and_the_next_most_free():
    n = node(A100, gpu_used_bytes={1: 30 * GB})

    miss = fit_node(request(gpu_layout(2, 20 * GB)), n)

    assert isinstance(miss, Misfit)
    assert miss.reason == (
        "needs 18.6 GiB free on each of 2 cards, 1 of 2 have it "
        "(the next most free, GPU 1, has 12.1 GiB)"
    )
    assert (miss.category, miss.largest_free_bytes) == (SHORT_GPU, A100_CARD)


def test_every_layout_tried_is_named_when_none_fits():
    miss = fit_node(request(gpu_layout(1, 50 * GB), gpu_layout(2, 30 * GB)), node(L4))

    assert miss.reason == (
        "1 card: GPU 0 has 22.5 GiB free, needs 46.6 GiB; "
        "2 cards, TP 2: needs 27.9 GiB free on each of 2 cards, 0 of 4 have it "
        "(the next most free, GPU 0, has 22.5 GiB)"
    )


def test_too_few_cards_for_a_layout_are_counted_not_measured():
    miss = fit_node(request(gpu_layout(2, 10 * GB)), node(RTX))

    assert (miss.reason, miss.category, miss.suitable_cards) == (
        "needs 2 GPUs, has 1",
        TOO_FEW_GPUS,
        1,
    )


def test_cards_below_the_compute_capability_do_not_count_towards_a_layout():
    inv = inventory("a100_40g_x2_nvlink")
    inv.gpus[1] = inv.gpus[1].model_copy(update={"compute_capability": "7.0"})
    n = node(A100, inventory=inv)

    miss = fit_node(request(gpu_layout(2, 10 * GB), min_cc="8.0"), n)

    assert miss.reason == "needs 2 suitable GPUs, has 1"


def test_free_bytes_is_the_card_less_what_is_reserved_and_never_negative():
    n = node(A100, gpu_used_bytes={0: 10 * GB, 1: 50 * GB})

    assert n.free_bytes(0) == A100_CARD - 10 * GB
    assert n.free_bytes(n.inventory.gpus[0]) == A100_CARD - 10 * GB
    assert n.free_bytes(1) == 0
    assert n.free_bytes(7) == 0  # no such card


def test_a_node_without_gpus_says_so_for_the_gpu_layouts_of_a_mixed_plan():
    req = request(gpu_layout(1, 10 * GB), cpu_layout(100 * GIB), engine="llama.cpp")

    miss = fit_node(req, node(CPU))

    assert miss.reason == "1 card: has no GPU; CPU: host has 62.8 GiB free, needs 100.0 GiB"
    assert miss.category == SHORT_HOST


def test_a_cpu_layout_takes_the_cores_it_reserves_from_those_free():
    req = request(cpu_layout(8 * GIB), engine="llama.cpp", cores=6)

    fits = fit_node(req, node(CPU, cores_used=10))
    miss = fit_node(req, node(CPU, cores_used=11))

    assert isinstance(fits, Fit) and fits.need.cores == 6
    assert miss.category == SHORT_CORES
    assert miss.reason == "host has 5 of 16 CPU cores free, needs 6"
    assert miss.free_cores == 5


def test_memory_short_is_said_before_cores_short():
    req = request(cpu_layout(100 * GIB), engine="llama.cpp", cores=32)

    miss = fit_node(req, node(CPU))

    assert miss.category == SHORT_HOST
    assert miss.reason == "host has 62.8 GiB free, needs 100.0 GiB"


def test_a_gpu_layout_reserves_no_cores():
    req = request(gpu_layout(1, 10 * GB), engine="llama.cpp", cores=8)

    fit = fit_node(req, node(RTX, cores_used=16))

    assert isinstance(fit, Fit) and fit.need.cores == 0


def test_a_node_that_does_not_say_its_cores_is_not_counted_short():
    inv = inventory("cpu_only_16c")
    inv.host.cpu_count = 0
    req = request(cpu_layout(8 * GIB), engine="llama.cpp", cores=4)

    assert isinstance(fit_node(req, node("unsaid", inventory=inv, cores_used=99)), Fit)
