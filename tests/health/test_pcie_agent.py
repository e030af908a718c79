"""The PCIe link end to end: a simulated machine with a link trained down or replaying,
read by gfd's reader, judged by the ``pcie`` check and reported.

- One-shot runs of ``gfd --simulate P --oneshot --health-label -o -`` (in this process):
  a link trained down from the start labels ``PCIeLinkDegraded`` (a one-shot run reads
  once: no grace). That every bundled profile without faults labels ``healthy``, pcie
  check included, is ``tests/health/test_oneshot_health_label.py``'s.
- The periodic agent on the API server emulator, on a clock of the test's (the assembly of
  tests/health/test_xid_memory_agent.py): replays rising by a call's worth per call are
  judged per minute between cycles, the ``GPUHealthy`` condition and the taint carry each
  reason, and clear when the link retrains or the replays slow down.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from gfd.facts import dump_facts
from gfd.health.taint import TAINT_KEY
from gfd.kube_api import KubeClient
from gfd.sim import load_profile
from gfd.sim.faults import Faults, PcieLinkDown, PcieReplays, faults_to_dict
from tests.emulator import ApiServerEmulator
from tests.host import gfd_main

from .test_xid_memory_agent import DUE_AFTER, address, gfd_on, make_due, profile

HEALTH = "nvidia.com/gpu.health"


def oneshot_labels(source: str | Path, *extra: str) -> dict[str, str]:
    out = io.StringIO()
    args = ["--simulate", str(source), "--oneshot", "--health-label", "-o", "-", *extra]
    code = gfd_main([*args, "--log-level", "error"], env={}, stdout=out)
    assert code == 0, f"gfd {' '.join(args)} exited {code}"
    return dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)


def with_faults(tmp_path: Path, name: str, faults: Faults) -> Path:
    import yaml

    path = tmp_path / f"{name}.yaml"
    document = {key: value for key, value in faults_to_dict(faults).items() if value}
    path.write_text(dump_facts(load_profile(name).facts) + yaml.safe_dump({"faults": document}))
    return path


@pytest.mark.parametrize(
    ("name", "down"),
    [
        ("dgx-h100", PcieLinkDown(gpu=3, after_calls=0, width=8)),
        ("pcie-l4x4", PcieLinkDown(gpu=1, after_calls=0, generation=1, gpu_utilization=100)),
        ("k80-pcie-tree", PcieLinkDown(gpu=7, after_calls=0, width=4, generation=2)),
    ],
)
def test_a_one_shot_run_reports_a_link_trained_down(
    tmp_path: Path, name: str, down: PcieLinkDown
) -> None:
    labels = oneshot_labels(with_faults(tmp_path, name, Faults(pcie_link_down=(down,))))
    assert labels[HEALTH] == "PCIeLinkDegraded"
    # The labels say what the link could reach, not what it trained at.
    reach = oneshot_labels(name)
    assert labels["nvidia.com/gpu.pcie.width"] == reach["nvidia.com/gpu.pcie.width"]
    assert labels["nvidia.com/gpu.pcie.generation"] == reach["nvidia.com/gpu.pcie.generation"]


def test_a_slower_link_of_an_idle_gpu_is_no_problem(tmp_path: Path) -> None:
    idle = PcieLinkDown(gpu=0, after_calls=0, generation=1, gpu_utilization=0)
    path = with_faults(tmp_path, "t4-single", Faults(pcie_link_down=(idle,)))
    assert oneshot_labels(path)[HEALTH] == "healthy"


def test_replays_in_a_one_shot_run_are_a_baseline_not_a_rise(tmp_path: Path) -> None:
    """One read measures no rate: a counter that grew before gfd started is not rising."""
    path = with_faults(
        tmp_path, "t4-single", Faults(pcie_replays=(PcieReplays(0, after_calls=0, per_call=50),))
    )
    assert oneshot_labels(path)[HEALTH] == "healthy"


def test_replays_rising_turn_the_condition_and_clear_when_they_slow_down(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    # Every call on GPU 2 adds a replay: about 30 a cycle (a steady read's calls on it).
    replays = Faults(pcie_replays=(PcieReplays(gpu=2, after_calls=0, per_call=1),))
    with gfd_on(profile(faults=replays), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        # Within the first minute nothing is measured.
        node.clock.now += 30
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        node.clock.now += 30
        assert node.agent.cycle().ok
        rising = node.condition()
        assert (rising["status"], rising["reason"]) == ("False", "PCIeReplaysRising")
        assert rising["message"].startswith(
            f"{address('dgx-h100', 2)}: PCIe replay counter rose by "
        )
        assert "a minute, more than 8; now " in rising["message"]
        assert node.gauge("gfd_health_check_failing", "pcie") == 1
        assert node.gauge("gfd_health_check_problems", "pcie") == 1
        # The same calls spread over ten minutes: under 8 a minute, and healthy again.
        node.clock.now += 600
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        assert node.events() == [("PCIeReplaysRising", "Warning"), ("GPUsHealthy", "Normal")]
        assert node.gauge("gfd_health_check_failing", "pcie") == 0


def test_a_link_trained_down_taints_the_node_after_the_grace_period_until_it_retrains(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    down = Faults(
        pcie_link_down=(
            PcieLinkDown(gpu=5, after_calls=DUE_AFTER, width=8),
            PcieLinkDown(gpu=5, after_calls=3 * DUE_AFTER, width=16),
        )
    )
    with gfd_on(profile(faults=down), client, stop, emulator, taint=True) as node:
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        make_due(5)
        # Seen once: within the grace period (5 minutes by default) nothing changes ...
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        assert node.taints() == []
        assert node.gauge("gfd_health_check_problems", "pcie") == 1
        # ... seen again once it has passed: reported, and the node tainted.
        node.clock.now += 300
        assert node.agent.cycle().ok
        degraded = node.condition()
        assert (degraded["status"], degraded["reason"], degraded["message"]) == (
            "False",
            "PCIeLinkDegraded",
            f"{address('dgx-h100', 5)}: PCIe link runs at Gen5 x8, below the Gen5 x16 the GPU "
            "and its slot allow",
        )
        assert node.taints() == [
            {"key": TAINT_KEY, "value": "PCIeLinkDegraded", "effect": "NoSchedule"}
        ]
        # The link retrains (a GPU reset, a reseat): healthy at the next read, untainted.
        make_due(5, 2 * DUE_AFTER)
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        assert node.taints() == []
        assert [reason for reason, _ in node.events()] == [
            "PCIeLinkDegraded",
            "HealthTaintAdded",
            "GPUsHealthy",
            "HealthTaintRemoved",
        ]
