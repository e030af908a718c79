"""The ``nvlink`` check (gfd.health.checks.nvlink): links seen up that go down, by GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gfd.facts import NodeFacts, NvLink
from gfd.health import FAILING, NVLINK, OK, HealthMonitor
from gfd.health.checks.nvlink import model_links
from gfd.sim import BUNDLED_PROFILES, load_profile
from tests.factories import make_facts, make_gpu
from tests.health.doubles import BRIDGED_CARD, links


def test_links_that_were_up_and_are_down_degrade_until_they_come_back(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    up = make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, True, True, True))])
    assert monitor.observe(up).results[0].state == OK
    down = make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, False, True, False))])
    result = monitor.observe(down).results[0]
    assert result.state == FAILING
    assert result.problems[0].message == "GPU 0 (0000:1b:00.0): NVLinks 1, 3 down (active earlier)"
    # A link that vanished from NVML's answers altogether is down too.
    gone = make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, True, True))])
    assert "NVLink 3 down" in monitor.observe(gone).results[0].problems[0].message
    assert monitor.observe(up).results[0].state == OK


def test_links_never_seen_up_are_not_reported(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    facts = make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, False))])
    assert monitor.observe(facts).results[0].state == OK
    assert monitor.observe(facts).results[0].state == OK


# --------------------------------------------------------------------------- expected links

#: NVLinks per GPU as NVIDIA publishes them (its NVLink page's "maximum links per GPU" by
#: generation, and the architecture whitepapers): Volta 6, Ampere 12, Hopper 18, Blackwell 18.
PUBLISHED = {
    "Tesla V100-SXM2-16GB": 6,
    "Tesla V100-SXM3-32GB": 6,
    "NVIDIA A100-SXM4-40GB": 12,
    "NVIDIA A100-SXM4-80GB": 12,
    "NVIDIA H100 80GB HBM3": 18,
    "NVIDIA H200": 18,
    "NVIDIA B200": 18,
    "NVIDIA GB200": 18,
}
#: Cards whose NVLinks are bridges, and SXM chips' PCIe and NVL cards: no count expected.
NOT_LISTED = (
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-PCIE-40GB",
    "Tesla V100-PCIE-32GB",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA H200 NVL",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA RTX A6000",
)


def test_the_model_table_holds_nvidias_published_counts() -> None:
    for name, count in PUBLISHED.items():
        known = model_links(name)
        assert known is not None, name
        assert known.links == count, name
    for name in NOT_LISTED:
        assert model_links(name) is None, name


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_no_bundled_machine_is_degraded_on_its_first_cycle(tmp_path: Path, profile: str) -> None:
    facts = load_profile(profile).facts
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    assert monitor.observe(facts).results[0].state == OK
    # The machines modelled on NVIDIA's SXM systems use every link their model has.
    for gpu in facts.gpus:
        if gpu.name in PUBLISHED:
            assert sum(link.active for link in gpu.nvlinks) == PUBLISHED[gpu.name]


def with_links_down(facts: NodeFacts, gpu: int, down: set[int]) -> NodeFacts:
    target = facts.gpus[gpu]
    nvlinks = tuple(
        NvLink(link.index, False) if link.index in down else link for link in target.nvlinks
    )
    gpus = list(facts.gpus)
    gpus[gpu] = dataclasses.replace(target, nvlinks=nvlinks)
    return dataclasses.replace(facts, gpus=tuple(gpus))


def test_a_gpu_that_booted_with_links_down_is_degraded_from_the_first_cycle(
    tmp_path: Path,
) -> None:
    facts = with_links_down(load_profile("dgx-h100").facts, 3, {4, 11})
    result = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK]).observe(facts).results[0]
    assert result.state == FAILING
    assert [problem.message for problem in result.problems] == [
        "GPU 3 (0000:61:00.0): 16 of 18 NVLinks active (NVLinks 4, 11 down): H100 SXM5 GPUs have 18"
    ]


def test_a_model_outside_the_table_is_held_to_its_peers_on_an_nvswitch(tmp_path: Path) -> None:
    dgx = load_profile("dgx-h100").facts
    renamed = dataclasses.replace(
        dgx, gpus=tuple(dataclasses.replace(gpu, name="NVIDIA H20") for gpu in dgx.gpus)
    )
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    assert monitor.observe(renamed).results[0].state == OK
    result = monitor.observe(with_links_down(renamed, 5, {0})).results[0]
    assert [problem.message for problem in result.problems] == [
        "GPU 5 (0000:c3:00.0): 17 of 18 NVLinks active (NVLink 0 down): "
        "the other NVIDIA H20 GPUs here have 18 active"
    ]


def test_bridged_pcie_cards_are_not_held_to_a_count(tmp_path: Path) -> None:
    """Two A100 PCIe cards joined by bridges (links to the other GPU) and two without."""
    bridged = tuple(NvLink(i, True, "00000000:1C:00.0", "gpu") for i in range(12))
    facts = make_facts(
        [
            make_gpu(0, name=BRIDGED_CARD, nvlinks=bridged),
            make_gpu(1, name=BRIDGED_CARD, nvlinks=bridged),
            make_gpu(2, name=BRIDGED_CARD, nvlinks=links(*[False] * 12)),
            make_gpu(3, name=BRIDGED_CARD, nvlinks=links(*[False] * 12)),
        ]
    )
    assert HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK]).observe(facts).results[0].state == OK


def test_an_sxm_gpu_whose_links_are_all_unused_or_unreported_is_not_judged(tmp_path: Path) -> None:
    """One SXM GPU passed to a virtual machine: NVML lists its links inactive, or (the real
    H200 captured, ../shared/reference/real-gpu-h200-*) reports no link count at all."""
    alone = make_facts([make_gpu(0, nvlinks=links(*[False] * 18))])
    unreported = make_facts([make_gpu(0, name="NVIDIA H200", nvlinks=())])
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    assert monitor.observe(alone).results[0].state == OK
    assert monitor.observe(unreported).results[0].state == OK


def test_links_active_earlier_and_short_of_the_count_are_one_problem(tmp_path: Path) -> None:
    dgx = load_profile("dgx-h100").facts
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    assert monitor.observe(dgx).results[0].state == OK
    gone = list(dgx.gpus)
    gone[2] = dataclasses.replace(dgx.gpus[2], nvlinks=dgx.gpus[2].nvlinks[:17])
    result = monitor.observe(dataclasses.replace(dgx, gpus=tuple(gone))).results[0]
    assert [problem.message for problem in result.problems] == [
        "GPU 2 (0000:52:00.0): 17 of 18 NVLinks active (NVLink 17 down): H100 SXM5 GPUs have 18"
    ]
