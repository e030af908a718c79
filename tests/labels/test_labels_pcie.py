"""``gpu.pcie.generation`` and ``gpu.pcie.width`` (gfd.labels.pcie): what the GPUs' links
could reach, the node's lowest, withheld rather than guessed, and none for GPUs attached
over NVLink-C2C. Expected values come from the hardware's published PCIe interfaces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gfd.facts import NodeFacts, PcieLink
from gfd.labels import LabelOptions, build_labels
from gfd.labels.pcie import GENERATION_KEY, WIDTH_KEY, pcie_labels
from gfd.sim import BUNDLED_PROFILES, load_profile
from tests.factories import make_facts, make_gpu

GEN5_X16 = PcieLink(5, 16, 5, 16, 5, 0)

#: What each bundled machine's GPUs can reach, from their published PCIe interfaces (and
#: the slots of the servers the profiles model; docs/simulator.md, "The PCIe link").
PUBLISHED = {
    "dgx-a100": ("4", "16"),  # A100 SXM4: PCIe Gen4 x16
    "dgx-a100-mig-mixed": ("4", "16"),
    "dgx-a100-mig-single": ("4", "16"),
    "dgx-h100": ("5", "16"),  # H100 SXM5: PCIe Gen5 x16
    "hgx-h200": ("5", "16"),  # H200 SXM: PCIe Gen5 x16 (as the real one reported)
    "hgx-h200-mig": ("5", "16"),
    "dgx1-v100": ("3", "16"),  # V100 SXM2: PCIe Gen3 x16
    "dgx2-v100": ("3", "16"),  # V100 SXM3: PCIe Gen3 x16
    "k80-pcie-tree": ("3", "16"),  # K80: PCIe Gen3 x16
    "t4-single": ("3", "16"),  # T4: PCIe Gen3 x16
    "pcie-l4x4": ("4", "16"),  # L4: PCIe Gen4 x16
    "rtx4090x8": ("4", "16"),  # RTX 4090: PCIe Gen4 x16
    # A100 PCIe (Gen4) beside H100 PCIe (Gen5) in an EPYC 7003 server's Gen4 slots.
    "mixed-a100-h100": ("4", "16"),
    # Grace-attached (NVLink-C2C): no PCIe labels.
    "gb200-nvl4": None,
    "gb200-nvl4-fabric-broken": None,
}


def test_every_bundled_profile_is_listed() -> None:
    assert sorted(PUBLISHED) == sorted(BUNDLED_PROFILES)


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_bundled_machines_label_what_their_hardware_reaches(profile: str) -> None:
    labels = build_labels(load_profile(profile).facts, LabelOptions()).labels
    expected = PUBLISHED[profile]
    got = (labels.get(GENERATION_KEY), labels.get(WIDTH_KEY))
    assert got == (expected if expected is not None else (None, None))


def facts(*links: PcieLink | None, **fields: object) -> NodeFacts:
    return make_facts([make_gpu(i, pcie=link, **fields) for i, link in enumerate(links)])


def test_the_node_gets_its_lowest_gpu_reach_not_the_current_link() -> None:
    idle = replace(GEN5_X16, current_generation=1)
    x8_slot = replace(GEN5_X16, max_width=8, current_width=8)
    assert pcie_labels(facts(idle, x8_slot, GEN5_X16)) == {GENERATION_KEY: "5", WIDTH_KEY: "8"}


def test_never_above_the_gpus_own_generation() -> None:
    odd = PcieLink(current_generation=4, max_generation=5, gpu_max_generation=4, max_width=16)
    assert pcie_labels(facts(odd)) == {GENERATION_KEY: "4", WIDTH_KEY: "16"}


def test_a_gpu_that_does_not_answer_leaves_the_label_out_without_a_warning() -> None:
    """NOT_SUPPORTED is an answer: nothing was left unread, so nothing is withheld."""
    width_only = PcieLink(current_width=16, max_width=16)
    seen = facts(GEN5_X16, width_only, None)
    assert pcie_labels(seen) == {}
    assert not [key for key, _ in build_labels(seen, LabelOptions()).withheld if "pcie" in key]
    assert pcie_labels(facts(GEN5_X16, width_only)) == {WIDTH_KEY: "16"}


def test_gpus_attached_over_nvlink_c2c_get_none_and_nothing_is_withheld() -> None:
    # A GB10 answers a placeholder Gen1 x1 for its NVLink-C2C link (nvtop pull request 499).
    placeholder = PcieLink(1, 1, 1, 1, 1, 0)
    seen = facts(placeholder, gpu_numa_id=1)
    assert pcie_labels(seen) == {}
    assert not [key for key, _ in build_labels(seen, LabelOptions()).withheld if "pcie" in key]


def test_a_node_without_gpus_gets_none() -> None:
    empty = make_facts([])
    assert pcie_labels(empty) == {}
