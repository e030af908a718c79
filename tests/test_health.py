"""The GPU health checks, their guards and the state they report (gfd.health).

Expectations come from published behaviour, not from gfd: what sysfs holds for a PCI
device (vendor, class, ``driver`` link, ``physfn`` of an SR-IOV virtual function),
how NVIDIA's device plugin builds its resources (k8s-device-plugin
``internal/rm/device_map.go`` and ``internal/rm/rm.go``: MIG-enabled GPUs skipped
under single/mixed, ``mig-<profile>`` with ``+`` made ``.`` and only profiles whose
compute instance spans the GPU instance, replicas per device, ``.shared`` under
``renameByDefault``), and ``nvidia-smi mig -lgip`` shapes (tests/mig_factories.py).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from gfd.config import SharedResource, Sharing
from gfd.config.values import parse_checks
from gfd.errors import NvmlError, NvmlGpuLost
from gfd.facts import NvLink
from gfd.health import (
    DEVICE_PLUGIN,
    FAILING,
    GPU_LOST,
    HEALTH_LABEL,
    NVLINK,
    OK,
    PENDING,
    UNKNOWN,
    HealthMonitor,
    HealthReporter,
    HealthState,
    PciScanner,
    Transition,
    expected_resources,
)
from tests.factories import make_facts, make_gpu
from tests.mig_factories import A100_SHAPES, a100, a100_split, mig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))


def pci_device(
    root: Path,
    address: str,
    *,
    vendor: int = 0x10DE,
    pci_class: int = 0x030200,
    driver: str | None = "nvidia",
    virtual_function: bool = False,
) -> None:
    device = root / "bus" / "pci" / "devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"0x{vendor:04x}\n")
    (device / "class").write_text(f"0x{pci_class:06x}\n")
    if driver is not None:
        drivers = root / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        os.symlink(drivers, device / "driver")
    if virtual_function:
        os.symlink(device, device / "physfn")


def sysfs_for(root: Path, count: int) -> Path:
    """One 3D controller per ``make_gpu`` index, at the bus ids ``make_gpu`` gives."""
    for index in range(count):
        pci_device(root, f"0000:{0x1B + index:02x}:00.0")
    return root


def node(allocatable: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "gpu-node-1", "uid": "u-1"}, "status": status}
    if allocatable is not None:
        body["status"]["allocatable"] = allocatable
    return body


# --------------------------------------------------------------------------- #
# The PCI bus


def test_the_scan_finds_nvidia_display_controllers_that_nvml_should_see(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:1b:00.0")  # 3D controller, nvidia driver
    pci_device(tmp_path, "0000:1c:00.0", pci_class=0x030000, driver=None)  # VGA, no driver
    pci_device(tmp_path, "0000:05:00.0", pci_class=0x068000)  # an NVSwitch: a bridge
    pci_device(tmp_path, "0000:1d:00.0", driver="vfio-pci")  # passed through to a VM
    pci_device(tmp_path, "0000:1e:00.4", virtual_function=True)  # an SR-IOV VF (vGPU)
    pci_device(tmp_path, "0000:1f:00.0", vendor=0x8086, pci_class=0x030000)  # not NVIDIA
    pci_device(tmp_path, "0000:20:00.0", driver="nouveau")
    found = PciScanner(tmp_path).scan()
    assert found is not None
    assert [device.address for device in found] == ["0000:1b:00.0", "0000:1c:00.0"]


def test_a_missing_pci_tree_is_unknown_not_healthy(tmp_path: Path) -> None:
    assert PciScanner(tmp_path / "nothing").scan() is None


def test_a_device_rebound_to_vfio_drops_out_of_the_scan(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:1b:00.0")
    scanner = PciScanner(tmp_path)
    assert len(scanner.scan() or ()) == 1
    link = tmp_path / "bus/pci/devices/0000:1b:00.0/driver"
    link.unlink()
    (tmp_path / "bus/pci/drivers/vfio-pci").mkdir(parents=True)
    os.symlink(tmp_path / "bus/pci/drivers/vfio-pci", link)
    assert scanner.scan() == ()


# --------------------------------------------------------------------------- #
# GPU lost


def test_a_gpu_on_the_bus_that_nvml_no_longer_lists_is_lost(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 4), checks=[GPU_LOST])
    four = make_facts([make_gpu(i) for i in range(4)])
    assert monitor.observe(four).results[0].state == OK
    three = make_facts([make_gpu(0), make_gpu(1), dataclasses.replace(make_gpu(3), index=2)])
    # The GPU at bus 1e is now NVML's index 2; bus 1d is gone.
    result = monitor.observe(three).results[0]
    assert result.state == FAILING
    assert [p.message for p in result.problems] == [
        "GPU 2 (0000:1d:00.0) is on the PCI bus but NVML does not see it"
    ]


def test_a_gpu_that_answers_gpu_is_lost_is_named_by_its_index(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 4), checks=[GPU_LOST])
    monitor.observe(make_facts([make_gpu(i) for i in range(4)]))
    error = NvmlGpuLost("nvmlDeviceGetMemoryInfo", 15, "NVML_ERROR_GPU_IS_LOST")
    error.gpu_index = 3
    result = monitor.observe(None, error=error).results[0]
    assert result.state == FAILING
    assert result.problems[0].message == (
        "GPU 3 (0000:1e:00.0) is lost: NVML answers NVML_ERROR_GPU_IS_LOST"
    )


def test_a_failed_read_for_another_reason_decides_nothing(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 1), checks=[GPU_LOST, NVLINK])
    verdict = monitor.observe(None, error=NvmlError("nvmlInit", 9, "NVML_ERROR_DRIVER_NOT_LOADED"))
    assert [r.state for r in verdict.results] == [UNKNOWN, UNKNOWN]


# --------------------------------------------------------------------------- #
# NVLink


def links(*states: bool) -> tuple[NvLink, ...]:
    return tuple(NvLink(index=i, active=up) for i, up in enumerate(states))


def test_links_that_were_up_and_are_down_degrade_until_they_come_back(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    up = make_facts([make_gpu(0, nvlinks=links(True, True, True, True))])
    assert monitor.observe(up).results[0].state == OK
    down = make_facts([make_gpu(0, nvlinks=links(True, False, True, False))])
    result = monitor.observe(down).results[0]
    assert result.state == FAILING
    assert result.problems[0].message == "GPU 0 (0000:1b:00.0): NVLinks 1, 3 down (active earlier)"
    # A link that vanished from NVML's answers altogether is down too.
    gone = make_facts([make_gpu(0, nvlinks=links(True, True, True))])
    assert "NVLink 3 down" in monitor.observe(gone).results[0].problems[0].message
    assert monitor.observe(up).results[0].state == OK


def test_links_never_seen_up_are_not_reported(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    facts = make_facts([make_gpu(0, nvlinks=links(True, False))])
    assert monitor.observe(facts).results[0].state == OK
    assert monitor.observe(facts).results[0].state == OK


def test_a_reload_keeps_the_links_seen_up(tmp_path: Path) -> None:
    first = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    first.observe(make_facts([make_gpu(0, nvlinks=links(True, True))]))
    second = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK], previous=first)
    down = make_facts([make_gpu(0, nvlinks=links(True, False))])
    assert second.observe(down).results[0].state == FAILING


# --------------------------------------------------------------------------- #
# What the device plugin advertises


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


# --------------------------------------------------------------------------- #
# The device plugin check


def plugin_monitor(tmp_path: Path, clock: Clock, **kwargs: Any) -> HealthMonitor:
    return HealthMonitor(
        sysfs_root=tmp_path, checks=[DEVICE_PLUGIN], grace_period=300, clock=clock, **kwargs
    )


EIGHT = make_facts([make_gpu(i) for i in range(8)])


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


# --------------------------------------------------------------------------- #
# Options


def test_checks_parse_from_a_list_in_canonical_order() -> None:
    assert parse_checks("nvlink, gpu-lost", "--health-checks") == ("gpu-lost", "nvlink")
    assert parse_checks("none", "--health-checks") == ()
    assert parse_checks("", "--health-checks") == ()


def test_an_unknown_check_is_refused_with_the_choices() -> None:
    with pytest.raises(Exception, match=r"--health-checks: 'gpu-lst' is not a health check"):
        parse_checks("gpu-lst", "--health-checks")


# --------------------------------------------------------------------------- #
# The reported state


class Writer:
    """Records what the reporter hands on, and serves a Node."""

    def __init__(self, node_body: dict[str, Any] | None = None) -> None:
        self.node_body = node_body
        self.writes: list[tuple[HealthState, Transition | None]] = []

    def read(self) -> dict[str, Any] | None:
        return self.node_body

    def saw(self, node: Any) -> None:
        return None

    def write(self, state: HealthState, transition: Transition | None) -> None:
        self.writes.append((state, transition))


def reporter(
    tmp_path: Path, clock: Clock, writer: Writer | None = None, **kwargs: Any
) -> HealthReporter:
    monitor = HealthMonitor(
        sysfs_root=sysfs_for(tmp_path, 8),
        checks=[GPU_LOST, DEVICE_PLUGIN, NVLINK],
        grace_period=300,
        clock=clock,
    )
    return HealthReporter(
        monitor,
        log=Log(),
        read_node=writer.read if writer else None,
        writer=writer,
        **kwargs,
    )


def test_a_problem_decides_at_once_and_its_end_restores_health(tmp_path: Path) -> None:
    writer = Writer(node({"nvidia.com/gpu": "8"}))
    health = reporter(tmp_path, Clock(), writer, label=True)
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}
    health.report()
    seven = make_facts([make_gpu(i) for i in range(7)])
    assert health.observe(seven) == {HEALTH_LABEL: "GPULost"}
    health.report()
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}
    health.report()
    health.observe(EIGHT)
    health.report()
    states = [(w[0].status, w[0].reason) for w in writer.writes]
    assert states == [
        ("True", "GPUsHealthy"),
        ("False", "GPULost"),
        ("True", "GPUsHealthy"),
        ("True", "GPUsHealthy"),
    ]
    # Events: none for the first healthy state, one per change, none in a steady state.
    transitions = [w[1] for w in writer.writes]
    assert transitions[0] is None and transitions[3] is None
    assert transitions[1] is not None and transitions[1].state.reason == "GPULost"
    assert transitions[2] is not None and transitions[2].previous == writer.writes[1][0]
    assert writer.writes[1][0].message == (
        "GPU 7 (0000:22:00.0) is on the PCI bus but NVML does not see it"
    )


def test_a_failed_read_holds_the_state_and_a_pending_problem_holds_it_too(
    tmp_path: Path,
) -> None:
    clock = Clock()
    writer = Writer(node({"nvidia.com/gpu": "8"}))
    health = reporter(tmp_path, clock, writer, label=True)
    health.observe(make_facts([make_gpu(i) for i in range(7)]))
    assert health.state is not None and health.state.reason == "GPULost"
    # NVML down: nothing decided, the GPULost state stays.
    error = NvmlError("nvmlInit", 9, "NVML_ERROR_DRIVER_NOT_LOADED")
    assert health.observe(None, error) == {HEALTH_LABEL: "GPULost"}
    # The GPU is back but the device plugin has not caught up: still held.
    writer.node_body = node({})
    assert health.observe(EIGHT) == {HEALTH_LABEL: "GPULost"}
    writer.node_body = node({"nvidia.com/gpu": "8"})
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}


def test_a_restart_adopts_the_condition_left_on_the_node(tmp_path: Path) -> None:
    clock = Clock()
    left = {
        "type": "GPUHealthy",
        "status": "False",
        "reason": "DevicePluginMissing",
        "message": "the kubelet does not advertise nvidia.com/gpu (expected 8): "
        "the device plugin is not registered",
    }
    writer = Writer(node({}, conditions=[left]))
    health = reporter(tmp_path, clock, writer, label=True)
    # Inside the grace period of the new process: the node stays as it was.
    assert health.observe(EIGHT) == {HEALTH_LABEL: "DevicePluginMissing"}
    health.report()
    assert writer.writes[0][1] is None
    clock.now += 300
    health.observe(EIGHT)
    health.report()
    # The same problem, confirmed: no transition, so no Event.
    assert writer.writes[-1][1] is None


def test_without_a_writer_the_state_still_reaches_the_label(tmp_path: Path) -> None:
    health = reporter(tmp_path, Clock(), None, label=True)
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}
    assert health.observe(make_facts([make_gpu(i) for i in range(7)])) == {HEALTH_LABEL: "GPULost"}


def test_the_label_is_off_unless_asked_for(tmp_path: Path) -> None:
    assert reporter(tmp_path, Clock()).observe(EIGHT) == {}


def test_problems_are_ordered_by_reason_and_the_message_is_bounded(tmp_path: Path) -> None:
    clock = Clock()
    writer = Writer(node({"nvidia.com/gpu": "3"}))
    health = reporter(tmp_path, clock, writer)
    gpus = [make_gpu(i, nvlinks=links(True, True)) for i in range(8)]
    health.observe(make_facts(gpus))
    degraded = [dataclasses.replace(g, nvlinks=links(True, False)) for g in gpus[:7]]
    health.observe(make_facts(degraded))
    clock.now += 300
    health.observe(make_facts(degraded))
    state = health.state
    assert state is not None and not state.healthy
    assert state.reason == "GPULost"
    parts = state.message.split("; ")
    assert parts[0].startswith("GPU 7 (0000:22:00.0) is on the PCI bus")
    assert parts[1].startswith("the kubelet advertises 3 nvidia.com/gpu, expected 7")
    assert parts[2] == "GPU 0 (0000:1b:00.0): NVLink 1 down (active earlier)"
    assert state.failing_checks == {GPU_LOST, DEVICE_PLUGIN, NVLINK}
    assert len(state.message) <= 1024


def test_only_changes_that_matter_are_events() -> None:
    healthy = HealthState(True, "GPUsHealthy", "every GPU health check passes (gpu-lost)")
    reworded = HealthState(True, "GPUsHealthy", "every GPU health check passes (nvlink)")
    lost = HealthState(False, "GPULost", "GPU 7 (0000:22:00.0) is lost")
    two_lost = HealthState(False, "GPULost", "GPU 6 (0000:21:00.0) is lost; GPU 7 ...")
    assert not Transition(None, healthy).worth_an_event
    assert Transition(None, lost).worth_an_event
    assert Transition(healthy, lost).worth_an_event
    assert Transition(lost, two_lost).worth_an_event
    assert Transition(lost, healthy).worth_an_event
    assert not Transition(healthy, reworded).worth_an_event
