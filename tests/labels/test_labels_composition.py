"""The composition of the label families: one list, one order, validated once, no-GPU nodes
as a property of the list."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gfd.facts import VgpuInfo
from gfd.labels import LABELERS, CycleInputs, LabelOptions, build_labels, compose
from gfd.labels.labeler import FamilyLabeler
from tests.factories import make_facts, make_gpu

P = "nvidia.com/"
TWO_GPUS = make_facts([make_gpu(0), make_gpu(1)])
NO_GPUS = make_facts([], vgpu=VgpuInfo(present=False))
TOPOLOGY = {f"{P}gpu.interconnect": "nvlink"}
HEALTHY = {f"{P}gpu.health": "healthy"}


def test_the_families_are_listed_in_the_documented_order() -> None:
    assert [labeler.name for labeler in LABELERS] == [
        "timestamp",
        "driver and CUDA versions",
        "machine",
        "product",
        "product (hardware)",
        "GPU mode",
        "MIG capability",
        "MIG strategy",
        "MIG layout",
        "MPS capability",
        "per-model counts",
        "vGPU",
        "fabric clique",
        "PCIe link",
        "topology",
        "health",
    ]


def test_topology_and_health_join_the_labels_of_the_facts() -> None:
    inputs = CycleInputs(TWO_GPUS, LabelOptions(), topology_labels=TOPOLOGY, health_labels=HEALTHY)
    plain = build_labels(TWO_GPUS, LabelOptions()).labels
    assert dict(compose(inputs).labels) == {**plain, **TOPOLOGY, **HEALTHY}


def test_a_later_family_wins_and_health_comes_last() -> None:
    count = f"{P}gpu.count"
    inputs = CycleInputs(
        TWO_GPUS,
        topology_labels={count: "topology", f"{P}gpu.health": "topology"},
        health_labels={f"{P}gpu.health": "health"},
    )
    labels = compose(inputs).labels
    assert (labels[count], labels[f"{P}gpu.health"]) == ("topology", "health")


def test_a_node_without_gpus_gets_only_the_families_that_apply_without_gpus() -> None:
    assert [labeler.name for labeler in LABELERS if labeler.applies_without_gpus] == [
        "timestamp",
        "vGPU",
        "health",
    ]
    inputs = CycleInputs(
        NO_GPUS, LabelOptions(timestamp=1700000000), topology_labels=TOPOLOGY, health_labels=HEALTHY
    )
    assert dict(compose(inputs).labels) == {
        f"{P}gfd.timestamp": "1700000000",
        f"{P}gpu.health": "healthy",
        f"{P}vgpu.present": "false",
    }


def test_the_health_label_is_validated_like_every_other() -> None:
    # The reported state may be adopted from a Node condition anyone can edit: a reason
    # that is no label value is dropped and reported, never handed to a sink.
    inputs = CycleInputs(TWO_GPUS, health_labels={f"{P}gpu.health": "GPU lost"})
    label_set = compose(inputs)
    assert f"{P}gpu.health" not in label_set.labels
    assert [key for key, _why in label_set.dropped] == [f"{P}gpu.health"]


def test_withheld_labels_are_reported_in_the_order_of_the_families() -> None:
    facts = make_facts([make_gpu(0)], driver_version="550", vgpu=None)
    withheld = [key for key, _why in compose(CycleInputs(facts)).withheld]
    assert withheld[0] == f"{P}cuda.driver-version.major"
    # The vGPU family last (a GPU that reports no PCIe link withholds nothing: NOT_SUPPORTED).
    assert withheld[-1] == f"{P}vgpu.present"


def test_a_family_that_does_not_apply_without_gpus_withholds_nothing_there() -> None:
    def unreadable(_inputs: CycleInputs) -> tuple[tuple[str, str], ...]:
        return ((f"{P}gpu.rack", "the rack file is unreadable"),)

    rack = FamilyLabeler("rack", lambda _inputs: {}, report_withheld=unreadable)
    assert compose(CycleInputs(TWO_GPUS), (rack,)).withheld == unreadable(CycleInputs(TWO_GPUS))
    assert compose(CycleInputs(NO_GPUS), (rack,)).withheld == ()


def test_a_new_family_is_one_labeler_in_the_list() -> None:
    def rack(inputs: CycleInputs) -> Mapping[str, str]:
        return {f"{P}gpu.rack": str(len(inputs.facts.gpus))}

    labelers = (*LABELERS, FamilyLabeler("rack", rack))
    assert compose(CycleInputs(TWO_GPUS), labelers).labels[f"{P}gpu.rack"] == "2"
    assert f"{P}gpu.rack" not in compose(CycleInputs(NO_GPUS), labelers).labels


def test_a_labeler_that_raises_is_named_in_the_traceback() -> None:
    def broken(_inputs: CycleInputs) -> Mapping[str, str]:
        raise KeyError("no such field")

    with pytest.raises(KeyError) as raised:
        compose(CycleInputs(TWO_GPUS), (*LABELERS, FamilyLabeler("broken", broken)))
    assert raised.value.__notes__ == ["in the broken labeler"]
