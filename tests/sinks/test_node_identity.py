"""The per-GPU identity annotation ``nvidia.com/gpu.devices``: its fields and their formats
(NVIDIA's DRA driver's attribute names, ``cmd/gpu-kubelet-plugin/deviceinfo.go``; the bus id
as go-nvlib's ``GetPCIBusID`` writes it), its determinism and its bound.

The expected values come from the bundled profiles' facts as written in their files and
from go-nvlib's rule for the bus id (lower case; a leading ``0000`` of the domain
dropped), never from the module's own output.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from gfd.facts import NodeFacts
from gfd.facts.limits import MAX_GPUS
from gfd.sim import load_profile
from gfd.sinks.node_identity import (
    IDENTITY_ANNOTATION,
    IDENTITY_LIMIT,
    dra_bus_id,
    identity_annotation,
)
from gfd.sinks.node_update import OWNED_ANNOTATIONS
from tests.factories import make_facts, make_gpu

#: nvml.h's buffers, less the NUL: NVML_DEVICE_UUID_V2_BUFFER_SIZE and
#: NVML_DEVICE_NAME_V2_BUFFER_SIZE are 96, NVML_DEVICE_SERIAL_BUFFER_SIZE 30.
LONGEST_UUID = 95
LONGEST_NAME = 95
LONGEST_SERIAL = 29


def devices(facts: NodeFacts) -> list[dict[str, Any]]:
    value = identity_annotation(facts)[IDENTITY_ANNOTATION]
    document = json.loads(value)
    assert document["v"] == 1
    return list(document["devices"])


@pytest.mark.parametrize(
    ("nvml", "dra"),
    [
        # go-nvlib GetPCIBusID: strings.ToLower, then TrimPrefix "0000" (unless all of it).
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("00000008:01:00.0", "0008:01:00.0"),
        ("0000ABCD:DF:1F.7", "abcd:df:1f.7"),
        ("00010000:01:00.0", "00010000:01:00.0"),
    ],
)
def test_the_bus_id_is_written_as_nvidias_dra_driver_writes_it(nvml: str, dra: str) -> None:
    assert dra_bus_id(nvml) == dra


def test_a_dgx_h100_carries_each_gpus_identity_by_index() -> None:
    facts = load_profile("dgx-h100").facts
    entries = devices(facts)
    assert [entry["index"] for entry in entries] == list(range(8))
    first = entries[0]
    # gfd/sim/profiles/dgx-h100.yaml, GPU 0.
    assert first == {
        "index": 0,
        "uuid": "GPU-50679f0e-63af-04db-1989-74b23d854dbf",
        "pcieBusID": "0000:1b:00.0",
        "serial": "0123456102000",
        "productName": "NVIDIA H100 80GB HBM3",
        # MIG capable, disabled (the profile's header says so).
        "migEnabled": False,
    }
    assert list(first) == ["index", "uuid", "pcieBusID", "serial", "productName", "migEnabled"]
    assert len({entry["uuid"] for entry in entries}) == 8


def test_which_gpus_have_mig_on_and_none_for_a_gpu_without_mig() -> None:
    # hgx-h200-mig has MIG on for every GPU: here GPU 2's was turned off again.
    mig = load_profile("hgx-h200-mig").facts
    gpus = tuple(
        dataclasses.replace(gpu, mig_mode_current=False, mig_devices=()) if gpu.index == 2 else gpu
        for gpu in mig.gpus
    )
    facts = dataclasses.replace(mig, gpus=gpus)
    assert [entry["migEnabled"] for entry in devices(facts)] == [True] * 2 + [False] + [True] * 5
    # rtx4090x8: GeForce, no MIG at all.
    assert all("migEnabled" not in entry for entry in devices(load_profile("rtx4090x8").facts))


def test_a_gpu_without_a_serial_has_no_serial_field() -> None:
    # GeForce boards have no inforom: nvmlDeviceGetSerial answers NOT_SUPPORTED.
    entries = devices(load_profile("rtx4090x8").facts)
    assert all("serial" not in entry for entry in entries)
    assert entries[0]["productName"] == "NVIDIA GeForce RTX 4090"


def test_the_text_is_compact_and_the_same_for_the_same_gpus_in_any_order() -> None:
    facts = load_profile("gb200-nvl4").facts
    value = identity_annotation(facts)[IDENTITY_ANNOTATION]
    assert " " not in value.replace("NVIDIA GB200", "")
    shuffled = dataclasses.replace(facts, gpus=tuple(reversed(facts.gpus)))
    assert identity_annotation(shuffled)[IDENTITY_ANNOTATION] == value
    assert value.startswith('{"v":1,"devices":[{"index":0,')
    assert devices(facts)[0]["pcieBusID"] == "0008:01:00.0"


def test_a_node_without_gpus_has_no_identity_annotation() -> None:
    assert identity_annotation(make_facts([])) == {}


def test_the_annotation_is_one_the_node_sink_owns() -> None:
    assert IDENTITY_ANNOTATION in OWNED_ANNOTATIONS


def test_72_gpus_and_the_most_gpus_of_the_longest_texts_stay_under_the_bound() -> None:
    """A GB200 NVL72 rack's 72 GPUs (were they one node) and the facts' most GPUs with
    every text as long as NVML's buffers allow."""
    nvl72 = make_facts([make_gpu(i, serial=f"0123456106{i:03d}") for i in range(72)])
    assert len(identity_annotation(nvl72)[IDENTITY_ANNOTATION]) < 16 * 1024
    longest = make_facts(
        [
            make_gpu(
                i,
                uuid=f"GPU-{i:03d}" + "f" * (LONGEST_UUID - 7),
                name="N" * LONGEST_NAME,
                serial=f"{i:03d}" + "9" * (LONGEST_SERIAL - 3),
                bus_id=f"0000{i // 256:04X}:{i % 256:02X}:1F.7",
            )
            for i in range(MAX_GPUS)
        ]
    )
    value = identity_annotation(longest)[IDENTITY_ANNOTATION]
    assert len(value) <= IDENTITY_LIMIT
    # The whole Node's annotations share 256 KiB.
    assert IDENTITY_LIMIT <= 256 * 1024 // 4


def test_absurd_texts_past_the_bound_leave_the_annotation_out() -> None:
    huge = make_facts([make_gpu(i, name="\u2603" * 4096) for i in range(4)])
    assert identity_annotation(huge) == {}
