"""How a node's cards are joined: NVLink between them, PCIe to the host.

Tensor parallel cuts every layer across cards that talk for every token, so
placement needs to know which cards share NVLink; a card whose PCIe link runs
slower than it and its slot could (a Gen5 card in a Gen3 slot, 8 lanes of 16
after a bad seating) loads weights and talks to its peers at a fraction of
its speed, which the operator is told as a node warning.

NVML first (``nvmlDeviceGetNvLinkState`` and the remote end's PCI bus id per
link). Where NVML says nothing about NVLink at all (an old driver, a build of
nvidia-ml-py without the calls), ``nvidia-smi topo -m`` is read instead: its
matrix marks NVLink-joined pairs "NV<links>".
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml

log = logging.getLogger(__name__)

# A card has at most this many NVLinks (18 on Hopper; pynvml's constant grows
# with newer generations).
MAX_LINKS = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
SWITCH = getattr(pynvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
TOPO_TIMEOUT_S = 10.0

# GB/s one lane carries each way, after line coding (128b/130b from Gen3 on).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

_BUS = re.compile(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def bus_key(bus_id: str | bytes) -> tuple[int, int, int, int] | None:
    """A PCI address as numbers, so "00000000:18:00.0" and "0000:18:00.0" compare equal."""
    m = _BUS.search(_text(bus_id))
    if m is None:
        return None
    domain, bus, dev, fn = m.groups()
    return int(domain, 16), int(bus, 16), int(dev, 16), int(fn)


# ---- NVLink through NVML ---------------------------------------------------


def _remote_ends(lib: Any, handle: Any) -> tuple[bool, list[tuple[tuple | None, bool]]]:
    """(whether NVML answers about NVLink for this card, its active links' far ends).

    Each far end is (its bus key, whether it is an NVSwitch).
    """
    state_fn = getattr(lib, "nvmlDeviceGetNvLinkState", None)
    remote_fn = getattr(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or getattr(
        lib, "nvmlDeviceGetNvLinkRemotePciInfo", None
    )
    type_fn = getattr(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    if state_fn is None or remote_fn is None:
        return False, []
    answered = False
    ends: list[tuple[tuple | None, bool]] = []
    for link in range(MAX_LINKS):
        try:
            state = state_fn(handle, link)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            break  # no NVLink on this card, or a driver without the call
        except pynvml.NVMLError:
            continue  # past this card's last link, or a link NVML cannot read
        answered = True
        if state != pynvml.NVML_FEATURE_ENABLED:
            continue
        try:
            far = bus_key(remote_fn(handle, link).busId)
        except pynvml.NVMLError as e:
            log.debug("NVLink %s: far end not read: %s", link, e)
            continue
        is_switch = False
        if type_fn is not None:
            try:
                is_switch = type_fn(handle, link) == SWITCH
            except pynvml.NVMLError:
                pass
        ends.append((far, is_switch))
    return answered, ends


def nvml_peers(lib: Any, cards: Mapping[int, tuple[Any, str]]) -> dict[int, list[int]] | None:
    """Card index -> the cards it reaches over NVLink; None when NVML says nothing.

    ``cards``: index -> (NVML handle, PCI bus id) of the physical cards. A link
    whose far end is no card of ours is an NVSwitch: every card linked to the
    switches reaches every other one (an HGX board has one NVSwitch fabric).
    """
    by_bus = {bus_key(bus): index for index, (_, bus) in cards.items()}
    answered_any = False
    direct: dict[int, set[int]] = {i: set() for i in cards}
    on_switch: set[int] = set()
    for index, (handle, _) in cards.items():
        answered, ends = _remote_ends(lib, handle)
        answered_any = answered_any or answered
        for far, is_switch in ends:
            peer = by_bus.get(far) if far is not None else None
            if is_switch or peer is None:
                on_switch.add(index)
            elif peer != index:
                direct[index].add(peer)
                direct[peer].add(index)
    if not answered_any:
        return None
    for index in on_switch:
        direct[index] |= on_switch - {index}
    return {i: sorted(p) for i, p in direct.items()}


# ---- NVLink through nvidia-smi topo -m ---------------------------------------


def parse_topo_matrix(text: str) -> dict[int, list[int]]:
    """Card index -> NVLink peers, from ``nvidia-smi topo -m``'s matrix.

                GPU0    GPU1    CPU Affinity    NUMA Affinity
        GPU0     X      NV12    0-63            N/A
        GPU1    NV12     X      0-63            N/A

    Columns after the GPUs (NICs, affinities) and the legend are ignored.
    """
    gpu = re.compile(r"GPU(\d+)")
    columns: list[int] | None = None
    peers: dict[int, list[int]] = {}
    for line in text.splitlines():
        words = _ANSI.sub("", line).split()
        if not words or not gpu.fullmatch(words[0]):
            continue
        if columns is None:
            # The header names the GPUs first; a data row has its "X" on the diagonal.
            if "X" in words:
                continue
            columns = []
            for w in words:
                m = gpu.fullmatch(w)
                if m is None:
                    break
                columns.append(int(m.group(1)))
            continue
        cells = words[1 : 1 + len(columns)]
        peers[int(words[0][3:])] = sorted(
            col for col, cell in zip(columns, cells, strict=False) if re.fullmatch(r"NV\d+", cell)
        )
    return peers


def run_topo() -> str:
    """``nvidia-smi topo -m``'s output; "" when it is not there or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        done = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=TOPO_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("nvidia-smi topo -m: %s", e)
        return ""
    return done.stdout if done.returncode == 0 else ""


def topo_peers(run: Callable[[], str] = run_topo) -> dict[int, list[int]]:
    """NVLink peers as nvidia-smi reads them; {} when it cannot be asked."""
    return parse_topo_matrix(run())


# ---- PCIe --------------------------------------------------------------------


def pcie_gbs(gen: int, width: int) -> float:
    """GB/s a link of this generation and width carries each way."""
    return PCIE_LANE_GBS.get(gen, 0.0) * width


def pcie_warning(
    index: int,
    name: str,
    bus_id: str,
    *,
    width: int,
    gen_max: int,
    width_max: int,
    card_gen_max: int,
) -> str:
    """A node warning for a card linked slower than it could be; "" when it is not.

    The current generation is not compared: a card drops to Gen1 while it
    idles. A slot of an older generation than the card (``gen_max`` is what
    card and slot can do together, ``card_gen_max`` the card alone), or fewer
    lanes in use than card and slot allow, is said with the GB/s it carries
    against what it could.
    """
    problems = []
    if card_gen_max and gen_max and gen_max < card_gen_max:
        problems.append(f"sits in a PCIe Gen{gen_max} slot but can do Gen{card_gen_max}")
    if width and width_max and width < width_max:
        problems.append(f"runs on {width} of its {width_max} PCIe lanes")
    if not problems:
        return ""
    carried = pcie_gbs(gen_max, width or width_max)
    could = pcie_gbs(max(card_gen_max, gen_max), width_max or width)
    where = f" -s {bus_id.split(':', 1)[-1]}" if bus_id else ""
    return (
        f"GPU {index} ({name}) {' and '.join(problems)}: it carries {carried:.1f} GB/s of "
        f"the {could:.1f} GB/s it could, so loading weights and talking to other cards is "
        f"slower; move it to a slot of its generation and width (lspci -vv{where}: LnkCap "
        "is what it can do, LnkSta what it does)"
    )


def read_pcie(lib: Any, handle: Any, optional: Callable[..., Any]) -> dict[str, int]:
    """The PCIe link's figures NVML gives for a card; each one it does not is 0."""
    return {
        "pcie_gen": optional(lib, "nvmlDeviceGetCurrPcieLinkGeneration", handle, default=0),
        "pcie_width": optional(lib, "nvmlDeviceGetCurrPcieLinkWidth", handle, default=0),
        "pcie_gen_max": optional(lib, "nvmlDeviceGetMaxPcieLinkGeneration", handle, default=0),
        "pcie_width_max": optional(lib, "nvmlDeviceGetMaxPcieLinkWidth", handle, default=0),
        "card_gen_max": optional(lib, "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle, default=0),
    }


def with_fallback(
    nvml: dict[int, list[int]] | None,
    indexes: Sequence[int],
    run: Callable[[], str] = run_topo,
) -> dict[int, list[int]]:
    """NVML's peers, or nvidia-smi's where NVML said nothing (and there are two cards)."""
    if nvml is not None:
        return nvml
    if len(indexes) < 2:
        return {}
    known = set(indexes)
    found = topo_peers(run)
    return {i: [p for p in found.get(i, []) if p in known] for i in indexes}
