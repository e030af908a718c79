"""Fabric clique labels: attached, broken and disagreeing fabrics; v3/v2 fabric info reading."""

from __future__ import annotations

from dataclasses import replace

import pynvml
import pytest

from gfd.facts import FabricInfo, Gpu, NodeFacts
from gfd.labels import LabelOptions, build_labels
from gfd.labels.fabric import fabric_labels
from gfd.nvml.reader import read_facts
from gfd.sim import CallError, Faults, SimulationProfile, load_profile, simulate
from tests.factories import make_facts, make_gpu
from tests.mig_factories import fabric

P = "nvidia.com/"
CLUSTER = "6f1e1c2a-9b7d-4c35-8a4e-2d0b7e9f1a11"
OTHER = "0b9a8c7d-6e5f-4a3b-9c1d-e2f3a4b5c6d7"
ZERO = "00000000-0000-0000-0000-000000000000"


def node(*fabrics: FabricInfo | None) -> NodeFacts:
    return make_facts([make_gpu(i, fabric=f) for i, f in enumerate(fabrics)])


CASES: list[tuple[str, NodeFacts, dict[str, str]]] = [
    (
        "every GPU attached to one clique",
        node(*[fabric(CLUSTER, 7)] * 4),
        {f"{P}gpu.clique": f"{CLUSTER}.7"},
    ),
    (
        "upper-case UUIDs are the same cluster",
        node(fabric(CLUSTER.upper(), 3), fabric(CLUSTER, 3)),
        {f"{P}gpu.clique": f"{CLUSTER}.3"},
    ),
    ("one GPU still registering", node(fabric(CLUSTER, 7), fabric(CLUSTER, 7, "in-progress")), {}),
    ("registration not started", node(fabric(CLUSTER, 7, "not-started")), {}),
    ("registration failed", node(fabric(CLUSTER, 7), fabric(CLUSTER, 7, status=999)), {}),
    ("zero cluster UUID (single-node NVLink)", node(fabric(ZERO, 0), fabric(ZERO, 0)), {}),
    ("GPUs in different cliques", node(fabric(CLUSTER, 1), fabric(CLUSTER, 2)), {}),
    ("GPUs in different clusters", node(fabric(CLUSTER, 1), fabric(OTHER, 1)), {}),
    ("a GPU without fabric info", node(fabric(CLUSTER, 1), None), {}),
    ("no fabric at all", node(None, None), {}),
    ("no GPUs", make_facts([]), {}),
]


@pytest.mark.parametrize(("facts", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fabric_labels(facts: NodeFacts, expected: dict[str, str]) -> None:
    assert fabric_labels(facts) == expected
    plain = build_labels(
        replace(facts, gpus=tuple(replace(g, fabric=None) for g in facts.gpus)), LabelOptions()
    )
    assert dict(build_labels(facts, LabelOptions()).labels) == {**plain.labels, **expected}


def read(profile: SimulationProfile | str) -> NodeFacts:
    with simulate(profile) as machine:
        return read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )


def test_gb200_nvl4_profile_has_a_clique() -> None:
    facts = read("gb200-nvl4")
    labels = build_labels(facts, LabelOptions()).labels
    first = facts.gpus[0].fabric
    assert first is not None
    assert labels[f"{P}gpu.clique"] == f"{first.cluster_uuid}.{first.clique_id}"
    assert first.cluster_uuid != ZERO


@pytest.mark.parametrize("profile", ["gb200-nvl4-fabric-broken", "dgx-h100"])
def test_profiles_without_a_complete_fabric_have_no_clique(profile: str) -> None:
    labels = build_labels(read(profile), LabelOptions()).labels
    assert f"{P}gpu.clique" not in labels


def test_driver_refusing_the_v3_struct_is_read_through_v2() -> None:
    """Drivers before the v3 fabric struct answer ARGUMENT_VERSION_MISMATCH; v2 still works."""
    profile = load_profile("gb200-nvl4")
    gpus: tuple[Gpu, ...] = profile.facts.gpus
    refuse_v3 = tuple(
        CallError(
            call="nvmlDeviceGetGpuFabricInfoV",
            code=pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
            gpu=gpu.index,
            times=1,
        )
        for gpu in gpus
    )
    facts = read(SimulationProfile(facts=profile.facts, faults=Faults(errors=refuse_v3)))
    assert facts == profile.facts
