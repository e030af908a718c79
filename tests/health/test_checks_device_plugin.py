"""The ``device-plugin`` check (gfd.health.checks.device_plugin): what the plugin should
advertise, and the Node's allocatable held against it with a grace period.

Expectations come from how NVIDIA's device plugin builds its resources (k8s-device-plugin
``internal/rm/device_map.go`` and ``internal/rm/rm.go``: MIG-enabled GPUs skipped under
single/mixed, ``mig-<profile>`` with ``+`` made ``.`` and only profiles whose compute
instance spans the GPU instance, replicas per device, ``.shared`` under
``renameByDefault``), and ``nvidia-smi mig -lgip`` shapes (tests/mig_factories.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gfd.config import SharedResource, Sharing
from gfd.health import DEVICE_PLUGIN, FAILING, OK, PENDING, HealthMonitor
from gfd.health.dra_node import expected_resources
from tests.factories import make_facts, make_gpu
from tests.health.doubles import EIGHT, Clock, Log, node
from tests.mig_factories import A100_SHAPES, a100, a100_split, mig


def test_full_gpus_are_nvidia_com_gpu() -> None:
    facts = make_facts([make_gpu(i) for i in range(8)])
    assert expected_resources(facts, "none", None) == {"nvidia.com/gpu": 8}


def test_mig_strategy_none_advertises_mig_enabled_gpus_whole() -> None:
    facts = make_facts([a100_split(0, "3g.20gb", "3g.20gb"), a100(1)])
    assert expected_resources(facts, "none", None) == {"nvidia.com/gpu": 2}


def test_single_strategy_advertises_mig_devices_as_gpus() -> None:
    facts = make_facts([a100_split(0, *["1g.5gb"] * 7), a100_split(1, *["1g.5gb"] * 7)])
    assert expected_resources(facts, "single", None) == {"nvidia.com/gpu": 14}


def test_mixed_strategy_advertises_one_resource_per_profile_and_whole_gpus_apart() -> None:
    facts = make_facts(
        [
            a100_split(0, "3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb+me"),
            a100(1),
        ]
    )
    assert expected_resources(facts, "mixed", None) == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-3g.20gb": 1,
        "nvidia.com/mig-2g.10gb": 1,
        "nvidia.com/mig-1g.5gb": 1,
        # The plugin turns "+" into "." in resource names.
        "nvidia.com/mig-1g.5gb.me": 1,
    }


def test_compute_instance_profiles_are_not_registered_by_the_plugin() -> None:
    facts = make_facts([a100(0, mig(A100_SHAPES["2g.10gb"], 0, ci_slices=1))])
    assert expected_resources(facts, "mixed", None) == {}


@pytest.mark.parametrize(
    ("rename", "resource"), [(False, "nvidia.com/gpu"), (True, "nvidia.com/gpu.shared")]
)
def test_time_slicing_replicates_every_device(rename: bool, resource: str) -> None:
    sharing = Sharing(
        strategy="time-slicing",
        rename_by_default=rename,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=4),),
    )
    facts = make_facts([make_gpu(i) for i in range(8)])
    assert expected_resources(facts, "none", sharing) == {resource: 32}


def test_sharing_a_mig_profile_replicates_only_that_profile() -> None:
    sharing = Sharing(
        strategy="time-slicing",
        resources=(SharedResource(name="nvidia.com/mig-1g.5gb", replicas=2),),
    )
    facts = make_facts([a100_split(0, "1g.5gb", "1g.5gb", "2g.10gb")])
    assert expected_resources(facts, "mixed", sharing) == {
        "nvidia.com/mig-1g.5gb": 4,
        "nvidia.com/mig-2g.10gb": 1,
    }


def plugin_monitor(tmp_path: Path, clock: Clock, **kwargs: Any) -> HealthMonitor:
    return HealthMonitor(
        sysfs_root=tmp_path, checks=[DEVICE_PLUGIN], grace_period=300, clock=clock, **kwargs
    )


def test_a_missing_resource_is_reported_only_after_the_grace_period(tmp_path: Path) -> None:
    clock = Clock()
    monitor = plugin_monitor(tmp_path, clock)
    assert monitor.observe(EIGHT, node=node({"cpu": "64"})).results[0].state == PENDING
    clock.now += 299
    assert monitor.observe(EIGHT, node=node({"cpu": "64"})).results[0].state == PENDING
    clock.now += 1
    result = monitor.observe(EIGHT, node=node({"cpu": "64"})).results[0]
    assert result.state == FAILING
    assert result.problems[0].reason == "DevicePluginMissing"
    assert result.problems[0].message == (
        "the kubelet does not advertise nvidia.com/gpu (expected 8): "
        "the device plugin is not registered"
    )


def test_fewer_devices_than_nvml_sees_is_an_allocatable_mismatch(tmp_path: Path) -> None:
    clock = Clock()
    monitor = plugin_monitor(tmp_path, clock)
    monitor.observe(EIGHT, node=node({"nvidia.com/gpu": "6"}))
    clock.now += 300
    result = monitor.observe(EIGHT, node=node({"nvidia.com/gpu": "6"})).results[0]
    assert (result.state, result.problems[0].reason) == (FAILING, "AllocatableMismatch")
    assert "advertises 6 nvidia.com/gpu, expected 8" in result.problems[0].message


def test_the_plugin_registering_ends_a_pending_problem(tmp_path: Path) -> None:
    clock = Clock()
    monitor = plugin_monitor(tmp_path, clock)
    monitor.observe(EIGHT, node=node({}))
    clock.now += 200
    assert monitor.observe(EIGHT, node=node({"nvidia.com/gpu": "8"})).results[0].state == OK
    clock.now += 200
    # A new problem gets a whole grace period of its own.
    assert monitor.observe(EIGHT, node=node({})).results[0].state == PENDING


def test_a_changed_expectation_restarts_the_grace_period(tmp_path: Path) -> None:
    clock = Clock()
    monitor = plugin_monitor(tmp_path, clock)
    monitor.observe(EIGHT, node=node({}))
    clock.now += 299
    seven = make_facts([make_gpu(i) for i in range(7)])
    assert monitor.observe(seven, node=node({})).results[0].state == PENDING
    clock.now += 299
    assert monitor.observe(seven, node=node({})).results[0].state == PENDING


def test_more_devices_than_expected_is_not_this_checks_problem(tmp_path: Path) -> None:
    monitor = plugin_monitor(tmp_path, Clock())
    assert monitor.observe(EIGHT, node=node({"nvidia.com/gpu": "16"})).results[0].state == OK


def test_a_plugin_sharing_differently_is_logged_not_reported(tmp_path: Path) -> None:
    log = Log()
    monitor = plugin_monitor(tmp_path, Clock(), log=log)
    verdict = monitor.observe(EIGHT, node=node({"nvidia.com/gpu.shared": "32"}))
    assert verdict.results[0].state == OK
    monitor.observe(EIGHT, node=node({"nvidia.com/gpu.shared": "32"}))
    assert [line[1] for line in log.lines] == ["device plugin sharing config differs from gfd's"]


@pytest.mark.parametrize("value", ["8k", "1e3", "", "-1", "8.5"])
def test_an_allocatable_that_is_no_whole_number_is_not_judged(tmp_path: Path, value: str) -> None:
    monitor = plugin_monitor(tmp_path, Clock(), log=Log())
    assert monitor.observe(EIGHT, node=node({"nvidia.com/gpu": value})).results[0].state == OK


@pytest.mark.parametrize("status", [None, "garbage", {"allocatable": ["a"]}])
def test_a_malformed_node_status_reads_as_nothing_advertised(tmp_path: Path, status: Any) -> None:
    monitor = plugin_monitor(tmp_path, Clock())
    body = {"metadata": {"name": "n"}, "status": status}
    assert monitor.observe(EIGHT, node=body).results[0].state == PENDING


def test_without_a_node_the_device_plugin_check_does_not_run(tmp_path: Path) -> None:
    monitor = plugin_monitor(tmp_path, Clock())
    assert monitor.observe(EIGHT).results == ()
