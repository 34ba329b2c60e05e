"""How a node's cards read in `ctl node show` and the consoles: links, MIG, bandwidth."""

from __future__ import annotations

import io

from rich.console import Console

from llmgw.present.nodefmt import bandwidth_text, index_ranges, mig_text, node_details, pcie_text
from proto.llmgw.v1 import Gpu, HostFacts, NodeView


def test_the_pcie_link_reads_as_generation_by_lanes_with_the_most_it_can_do():
    assert pcie_text(Gpu(pcie_gen=4, pcie_width=16, pcie_gen_max=4, pcie_width_max=16)) == "4×16"
    # A card idles at Gen1: what it runs now, and the most card and slot allow.
    assert pcie_text(Gpu(pcie_gen=1, pcie_width=16, pcie_gen_max=5, pcie_width_max=16)) == (
        "1×16 (max 5×16)"
    )
    assert pcie_text(Gpu()) == "-"


def test_nvlink_peers_read_as_runs():
    assert index_ranges([1, 2, 3, 4, 5, 6, 7]) == "1-7"
    assert index_ranges([0, 2, 3, 4, 6, 7]) == "0,2-4,6,7"
    assert index_ranges([]) == "-"


def test_a_mig_instance_says_its_size_and_its_card():
    assert mig_text(Gpu(mig_instance=True, mig_profile="3g.40gb", mig_parent_index=2)) == (
        "3g.40gb of GPU 2"
    )
    assert mig_text(Gpu(mig_mode="enabled")) == "enabled" and mig_text(Gpu()) == "-"


def test_the_bandwidth_says_when_it_is_not_measured_yet():
    assert bandwidth_text(0.0) == "not measured yet"
    assert bandwidth_text(24.94) == "24.9 GB/s (measured)"


def test_a_bus_id_is_drawn_as_written_not_as_an_emoji():
    # Regression: rich read "00000000:AB:00.0" as the ":ab:" emoji code.
    view = NodeView(
        node_id="n",
        host=HostFacts(warnings=["GPU 0 (x) runs on 8 of its 16 PCIe lanes"]),
        gpus=[Gpu(index=0, name="H100", pci_bus_id="00000000:AB:00.0", nvlink_peers=[1])],
    )
    out = io.StringIO()
    Console(file=out, width=160).print(node_details(view))
    shown = out.getvalue()
    assert "00000000:AB:00.0" in shown
    assert "runs on 8 of its 16 PCIe lanes" in shown
