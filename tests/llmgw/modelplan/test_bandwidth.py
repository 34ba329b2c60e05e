"""Speed estimates: the bandwidth table and the reference's calibration measurements."""

from __future__ import annotations

import pytest

from llmgw.modelplan import bandwidth
from llmgw.modelplan.types import ModelFacts


@pytest.mark.parametrize(
    ("name", "gbs"),
    [
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA H100 NVL", 3900),
        ("NVIDIA H200", 4800),
        ("NVIDIA GH200 480GB", 4000),  # not the H200's figure
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA A100-SXM4-40GB", 1555),
        ("NVIDIA A100 80GB PCIe", 1935),
        ("NVIDIA A10", 600),  # not an A100
        ("NVIDIA L40S", 864),
        ("NVIDIA L4", 300),  # not an L40
        ("NVIDIA RTX 6000 Ada Generation", 960),
        ("Quadro RTX 6000", 672),
        ("NVIDIA GeForce RTX 4090", 1008),
        ("Tesla T4", 320),
        ("Tesla V100-SXM2-32GB", 900),
    ],
)
def test_cards_are_found_in_the_table_by_their_nvml_names(name, gbs):
    assert bandwidth.lookup_card_bandwidth_gbs(name) == gbs


def test_an_unknown_card_gets_the_conservative_default():
    assert bandwidth.lookup_card_bandwidth_gbs("Imaginary X1") is None
    assert bandwidth.card_bandwidth_gbs("Imaginary X1") == bandwidth.DEFAULT_CARD_BANDWIDTH_GBS


def test_the_gpu_estimate_meets_the_reference_measurement_on_an_rtx_6000():
    # qwen3-vl-8b Q8 (8.7 GB) on cuda01's Quadro RTX 6000: 62.1 tok/s measured.
    estimate = bandwidth.gpu_tokens_per_s(8_700_000_000, 672)
    assert estimate == pytest.approx(62.1, rel=0.15)


def test_a_model_of_experts_reads_one_point_six_times_its_active_share():
    # Qwen3-Coder-30B-A3B Q4_K_M (18.6 GB, about 3.3B of 30.5B active): 144 measured.
    facts = ModelFacts(
        format="gguf",
        weights_bytes=18_600_000_000,
        experts=128,
        experts_used=8,
        active_weights_bytes=int(18_600_000_000 * 3.3 / 30.5),
    )
    read = bandwidth.bytes_read_per_token(facts)
    assert read == int(facts.active_weights_bytes * 1.6)
    assert bandwidth.gpu_tokens_per_s(read, 672) == pytest.approx(144, rel=0.15)


def test_a_dense_model_reads_all_its_weights():
    facts = ModelFacts(format="gguf", weights_bytes=1000, active_weights_bytes=1000)
    assert bandwidth.bytes_read_per_token(facts) == 1000


@pytest.mark.parametrize(
    ("gbs", "model_bytes", "measured"),
    [
        (24.9, 1_120_000_000, 14.5),  # node01, qwen2.5-1.5b Q4_K_M
        (41.9, 8_990_000_000, 3.3),  # node05, qwen2.5-14b Q4_K_M
    ],
)
def test_the_cpu_estimate_meets_the_reference_measurements(gbs, model_bytes, measured):
    assert bandwidth.cpu_tokens_per_s(model_bytes, gbs) == pytest.approx(measured, rel=0.15)


def test_the_cpu_estimate_is_the_calibrated_rate_over_the_bytes():
    bytes_per_token, gbs = 2_000_000_000, 50.0
    expected = 1 / (bytes_per_token / (gbs * 1e9 * 0.68) + 0.005)
    assert bandwidth.cpu_tokens_per_s(bytes_per_token, gbs) == pytest.approx(expected)


def test_an_unmeasured_cpu_gives_no_figure():
    assert bandwidth.cpu_tokens_per_s(1_000_000_000, 0.0) == 0.0


def test_tensor_parallel_divides_the_reads_but_pays_for_all_reduces():
    one = bandwidth.gpu_tokens_per_s(140_000_000_000, 3350)
    nvlink = bandwidth.gpu_tokens_per_s(
        140_000_000_000, 3350, tensor_parallel=4, layers=80, nvlink=True
    )
    pcie = bandwidth.gpu_tokens_per_s(140_000_000_000, 3350, tensor_parallel=4, layers=80)
    assert pcie < nvlink < 4 * one
    assert nvlink > 3 * one
    step_nvlink = 1 / nvlink
    step_pcie = 1 / pcie
    assert step_pcie - step_nvlink == pytest.approx(2 * 80 * (25e-6 - 8e-6))


def test_a_layer_split_takes_turns_and_is_no_faster_than_one_card():
    assert bandwidth.layer_split_tokens_per_s(40_000_000_000, 300, 3) == pytest.approx(
        bandwidth.gpu_tokens_per_s(40_000_000_000, 300)
    )
