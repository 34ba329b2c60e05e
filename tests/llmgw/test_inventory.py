"""The inventory models and their trip through the proto contract."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import ValidationError

from agentd.discovery.fake import FIXTURES_DIR
from llmgw.inventory import (
    GpuInfo,
    GpuSampleInfo,
    HostInfo,
    Inventory,
    gpu_to_proto,
    host_to_proto,
    inventory_from_proto,
    inventory_to_proto,
    sample_to_proto,
)
from proto.llmgw.v1 import Gpu, HostFacts

FIXTURES = sorted(FIXTURES_DIR.glob("*.json"))


def test_there_are_recorded_inventories_to_test_with():
    assert len(FIXTURES) >= 5


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_fixture_round_trips_through_proto(path):
    inventory = Inventory.model_validate_json(path.read_text())
    host, gpus = inventory_to_proto(inventory)
    # Through the wire format too, not just the message objects.
    host = HostFacts.parse(bytes(host))
    gpus = [Gpu.parse(bytes(g)) for g in gpus]
    back = inventory_from_proto(host, gpus)
    # Everything survives, NVLink peers included (placement on the control
    # plane pairs cards by them).
    assert back == inventory


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_fixture_is_its_own_json_dump(path):
    # A hand edit that drifts from what Inventory writes would be caught here.
    data = json.loads(path.read_text())
    assert Inventory.model_validate(data).model_dump(mode="json") == data


def test_host_facts_carry_every_field_of_the_proto_message():
    proto_fields = {f.name for f in dataclasses.fields(HostFacts)}
    assert set(HostInfo.model_fields) == proto_fields


def test_gpu_fields_match_the_proto_message():
    proto_fields = {f.name for f in dataclasses.fields(Gpu)}
    assert set(GpuInfo.model_fields) == proto_fields


def test_a_gpu_converts_to_proto_field_for_field():
    gpu = GpuInfo(
        index=3,
        uuid="GPU-x",
        name="NVIDIA L4",
        memory_total_bytes=24152899584,
        compute_capability="8.9",
        pci_bus_id="00000000:00:03.0",
    )
    msg = gpu_to_proto(gpu)
    assert (msg.index, msg.memory_total_bytes, msg.compute_capability, msg.mig_mode) == (
        3,
        24152899584,
        "8.9",
        "",
    )


def test_a_host_converts_to_proto_with_its_lists():
    msg = host_to_proto(HostInfo(os_id="rocky", os_id_like=["rhel", "fedora"], avx2=True))
    assert msg.os_id_like == ["rhel", "fedora"] and msg.avx2 is True


def test_an_unknown_mig_mode_from_the_wire_reads_as_no_mig():
    back = inventory_from_proto(HostFacts(), [Gpu(index=0, uuid="u", name="n", mig_mode="weird")])
    assert back.gpus[0].mig_mode == ""


def test_a_misspelt_key_in_a_recorded_inventory_is_refused():
    with pytest.raises(ValidationError):
        Inventory.model_validate({"host": {"hostnme": "x"}, "gpus": []})


def test_compute_capability_reads_as_numbers_for_comparisons():
    gpu = GpuInfo(index=0, uuid="u", name="n", memory_total_bytes=1, compute_capability="8.9")
    assert gpu.compute_capability_tuple == (8, 9)
    assert gpu.model_copy(update={"compute_capability": ""}).compute_capability_tuple is None


def test_a_sample_converts_to_proto():
    msg = sample_to_proto(GpuSampleInfo(index=1, memory_used_bytes=5, temperature_c=35))
    assert (msg.index, msg.memory_used_bytes, msg.temperature_c) == (1, 5, 35)
