"""How fast a model would answer: memory bandwidth over the bytes a token reads.

Generating a token reads every weight it uses once, so one reply's speed is
about the memory's read rate over those bytes. Pure; no I/O. Bandwidths are
GB/s in powers of ten, as vendors rate them and the agent measures them.
"""

from __future__ import annotations

from llmgw.modelplan.types import ModelFacts

# Rated memory bandwidth by card, matched as a case-insensitive substring of
# the name NVML reports, first match wins: so the more specific names come
# first ("GH200" before "H200", "H200" before "H20", "A100" before "A10",
# "L40S" and "L40" before "L4", "RTX 6000 Ada" before "RTX 6000").
# Figures from the vendors' data sheets; an H100 SXM and an H100 PCIe differ
# by almost half, so they are told apart.
CARD_BANDWIDTH_GBS: tuple[tuple[str, float], ...] = (
    ("GB200", 8000.0),
    ("B200", 8000.0),
    ("B100", 8000.0),
    ("GH200", 4000.0),
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),  # SXM5, NVML: "NVIDIA H100 80GB HBM3"
    ("H800 PCIe", 2000.0),
    ("H800", 3350.0),
    ("H20", 4000.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100-SXM-80GB", 2039.0),
    ("A100 80GB", 2039.0),
    ("A100", 1555.0),  # the 40 GB cards, SXM4 and PCIe alike
    ("A800", 2039.0),
    ("A10G", 600.0),
    ("A10", 600.0),
    ("A30", 933.0),
    ("L40S", 864.0),
    ("L40", 864.0),
    ("L20", 864.0),
    ("L4", 300.0),
    ("RTX PRO 6000", 1792.0),
    ("RTX 6000 Ada", 960.0),
    ("RTX 5000 Ada", 576.0),
    ("RTX 4000 Ada", 360.0),
    ("Quadro RTX 8000", 672.0),
    ("Quadro RTX 6000", 672.0),
    ("RTX A6000", 768.0),
    ("RTX A5000", 768.0),
    ("RTX A4000", 448.0),
    ("A40", 696.0),
    ("RTX 5090", 1792.0),
    ("RTX 4090", 1008.0),
    ("RTX 4080", 717.0),
    ("RTX 3090", 936.0),
    ("RTX 3080", 760.0),
    ("V100", 900.0),
    ("T4", 320.0),
    ("P100", 732.0),
    ("P40", 346.0),
)

# A card not in the table: as slow as the slowest data-centre cards in it (L4,
# T4), so an estimate for an unknown card errs low rather than promising.
DEFAULT_CARD_BANDWIDTH_GBS = 300.0

# A GPU reaches about 80% of its rated bandwidth in the decode kernels, and each
# token pays ~0.75 ms of its own (kernel launches, sampling). Chosen to meet
# the reference's calibration on a Quadro RTX 6000 (672 GB/s): qwen3-vl-8b Q8,
# 8.7 GB, 62.1 tok/s measured (this gives 59); Qwen3-Coder-30B-A3B Q4_K_M,
# 144 measured (this gives about 149).
GPU_BANDWIDTH_EFFICIENCY = 0.8
GPU_PER_TOKEN_S = 0.00075

# Tensor parallel adds two all-reduces a layer per token: about 8 us over
# NVLink, 25 us and up over PCIe (what NCCL is known to take; the reference
# did not measure its own).
ALLREDUCES_PER_LAYER = 2
ALLREDUCE_NVLINK_S = 8e-6
ALLREDUCE_PCIE_S = 25e-6

# On a CPU: 0.68 of the measured read rate, plus 5 ms a token, calibrated
# against llama.cpp's predicted_per_second (reference: node01 at 24.9 GB/s,
# qwen2.5-1.5b, 14.5 tok/s measured, 14.7 estimated; node05 at 41.9 GB/s,
# qwen2.5-14b, 3.3 and 3.2).
CPU_BANDWIDTH_EFFICIENCY = 0.68
CPU_PER_TOKEN_S = 0.005

# A model of experts reads more than its active share: routing differs token
# to token within a batch of layers, and the shared parts are read in full.
# Qwen3-Coder-30B-A3B's 144 tok/s on the RTX 6000 put it at 1.6 times.
MOE_ACTIVE_READ_FACTOR = 1.6


def lookup_card_bandwidth_gbs(card_name: str) -> float | None:
    """The card's rated memory bandwidth from the table, or None when it is not there."""
    name = card_name.casefold()
    for pattern, gbs in CARD_BANDWIDTH_GBS:
        if pattern.casefold() in name:
            return gbs
    return None


def card_bandwidth_gbs(card_name: str) -> float:
    """The card's memory bandwidth, or the conservative default for an unknown card."""
    known = lookup_card_bandwidth_gbs(card_name)
    return DEFAULT_CARD_BANDWIDTH_GBS if known is None else known


def bytes_read_per_token(facts: ModelFacts) -> int:
    """The weights one token reads: all of them, or for experts their active part."""
    total = facts.weights_bytes
    if facts.experts > 1 and 0 < facts.active_weights_bytes < total:
        return min(total, int(facts.active_weights_bytes * MOE_ACTIVE_READ_FACTOR))
    return total


def gpu_tokens_per_s(
    bytes_per_token: int,
    bandwidth_gbs: float,
    *,
    tensor_parallel: int = 1,
    layers: int = 0,
    nvlink: bool = False,
) -> float:
    """One reply's tokens a second on one card, or tensor parallel across several.

    Tensor parallel divides what each card reads but adds two all-reduces a
    layer, short over NVLink and longer over PCIe.
    """
    if bytes_per_token <= 0 or bandwidth_gbs <= 0:
        return 0.0
    tp = max(tensor_parallel, 1)
    read_s = bytes_per_token / tp / (bandwidth_gbs * 1e9 * GPU_BANDWIDTH_EFFICIENCY)
    step_s = read_s + GPU_PER_TOKEN_S
    if tp > 1:
        allreduce_s = ALLREDUCE_NVLINK_S if nvlink else ALLREDUCE_PCIE_S
        step_s += ALLREDUCES_PER_LAYER * layers * allreduce_s
    return 1.0 / step_s


def layer_split_tokens_per_s(bytes_per_token: int, bandwidth_gbs: float, cards: int) -> float:
    """llama.cpp across several cards: each holds a run of layers and they take turns.

    A token still reads every weight once, one card after the other, so a
    reply is no faster than on one card of the same kind.
    """
    del cards  # the turns add up to one card's read; kept for the caller's clarity
    return gpu_tokens_per_s(bytes_per_token, bandwidth_gbs)


def cpu_tokens_per_s(bytes_per_token: int, bandwidth_gbs: float) -> float:
    """One reply's tokens a second on a CPU whose memory reads bandwidth_gbs.

    0 when the bandwidth is not known yet (the agent measures it in the
    background after it starts).
    """
    if bytes_per_token <= 0 or bandwidth_gbs <= 0:
        return 0.0
    read_s = bytes_per_token / (bandwidth_gbs * 1e9 * CPU_BANDWIDTH_EFFICIENCY)
    return 1.0 / (read_s + CPU_PER_TOKEN_S)
