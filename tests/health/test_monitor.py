"""The health monitor (gfd.health.monitor): it runs what the registry holds, in the
registry's order, hands a check the Node only when it needs one, carries every check's
memory and the GPU names across a reload, and says what a check cannot decide (a warning,
at info in a one-shot run) when that changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gfd.base.errors import NvmlError, NvmlGpuLost
from gfd.health import (
    FAILING,
    GPU_LOST,
    NVLINK,
    OK,
    REASON_GPU_LOST,
    REASONS,
    REGISTRY,
    UNKNOWN,
    HealthMonitor,
)
from gfd.health.check import CANNOT_DECIDE, Check, CheckResult, CheckSetup, Observation, Problem
from tests.factories import make_facts, make_gpu
from tests.health.doubles import BRIDGED_CARD, Log, links, node, sysfs_for


def test_a_failed_read_for_another_reason_decides_nothing(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 1), checks=[GPU_LOST, NVLINK])
    verdict = monitor.observe(None, error=NvmlError("nvmlInit", 9, "NVML_ERROR_DRIVER_NOT_LOADED"))
    assert [r.state for r in verdict.results] == [UNKNOWN, UNKNOWN]


def test_a_reload_keeps_the_links_seen_up(tmp_path: Path) -> None:
    first = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    first.observe(make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, True))]))
    second = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK], previous=first)
    down = make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, False))])
    assert second.observe(down).results[0].state == FAILING


class Recorder:
    """A check of the test's own: keeps what it is handed, and always finds one problem."""

    name = "recorder"
    reasons = ("Recorded",)
    needs_node = True

    def __init__(self, setup: CheckSetup, previous: Check | None) -> None:
        self.setup = setup
        self.previous = previous
        self.seen: list[Observation] = []

    def observe(self, seen: Observation) -> CheckResult:
        self.seen.append(seen)
        problem = Problem(self.name, "Recorded", "recorded")
        return CheckResult(self.name, FAILING, (problem,))


@dataclass
class RecorderFactory:
    """A registry entry that is no class: any factory with a name, reasons and needs_node."""

    name: str = "recorder"
    reasons: tuple[str, ...] = ("Recorded",)
    needs_node: bool = True
    built: list[Recorder] = field(default_factory=list)

    def __call__(self, setup: CheckSetup, previous: Check | None = None) -> Recorder:
        check = Recorder(setup, previous)
        self.built.append(check)
        return check


def test_a_check_in_the_registry_runs_with_no_change_to_the_monitor(tmp_path: Path) -> None:
    factory = RecorderFactory()
    registry = {**REGISTRY, factory.name: factory}
    monitor = HealthMonitor(
        sysfs_root=sysfs_for(tmp_path, 2),
        checks=["recorder", GPU_LOST],
        grace_period=7,
        registry=registry,
    )
    assert monitor.checks == (GPU_LOST, "recorder")  # the registry's order, not the request's
    # The enabled checks' reasons, in the registry's order.
    assert monitor.reasons == (REASON_GPU_LOST, "Recorded")
    (check,) = factory.built
    assert (check.setup.sysfs_root, check.setup.grace_period, check.previous) == (tmp_path, 7, None)
    facts = make_facts([make_gpu(0), make_gpu(1)])
    # No Node this cycle: a check that needs one does not run.
    assert [r.check for r in monitor.observe(facts).results] == [GPU_LOST]
    assert check.seen == []
    body = node({"nvidia.com/gpu": "2"})
    verdict = monitor.observe(facts, node=body)
    assert [(r.check, r.state) for r in verdict.results] == [
        (GPU_LOST, "ok"),
        ("recorder", FAILING),
    ]
    (seen,) = check.seen
    assert (seen.facts, seen.node) == (facts, body)
    assert seen.gpus.address_of(1) == "0000:1c:00.0"


def test_with_every_check_enabled_the_reasons_are_the_registrys(tmp_path: Path) -> None:
    assert HealthMonitor(sysfs_root=tmp_path).reasons == REASONS


def test_a_check_not_enabled_is_not_built_and_a_name_not_registered_is_ignored(
    tmp_path: Path,
) -> None:
    factory = RecorderFactory()
    monitor = HealthMonitor(
        sysfs_root=tmp_path, checks=[NVLINK], registry={**REGISTRY, factory.name: factory}
    )
    assert (monitor.checks, factory.built) == ((NVLINK,), [])
    assert HealthMonitor(sysfs_root=tmp_path, checks=["recorder", NVLINK]).checks == (NVLINK,)


def test_a_reload_hands_each_check_its_predecessor(tmp_path: Path) -> None:
    factory = RecorderFactory()
    registry = {**REGISTRY, factory.name: factory}
    first = HealthMonitor(sysfs_root=tmp_path, checks=["recorder"], registry=registry)
    HealthMonitor(sysfs_root=tmp_path, checks=["recorder"], registry=registry, previous=first)
    assert factory.built[1].previous is factory.built[0]


def test_a_check_disabled_by_one_reload_remembers_when_the_next_enables_it(tmp_path: Path) -> None:
    first = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    first.observe(make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, True))]))
    without = HealthMonitor(sysfs_root=tmp_path, checks=[GPU_LOST], previous=first)
    again = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK], previous=without)
    down = make_facts([make_gpu(0, name=BRIDGED_CARD, nvlinks=links(True, False))])
    assert again.observe(down).results[0].state == FAILING


def test_a_reload_keeps_the_names_of_the_gpus_seen(tmp_path: Path) -> None:
    first = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 4), checks=[GPU_LOST])
    first.observe(make_facts([make_gpu(i) for i in range(4)]))
    second = HealthMonitor(sysfs_root=tmp_path, checks=[GPU_LOST], previous=first)
    error = NvmlGpuLost("nvmlDeviceGetMemoryInfo", 15, "NVML_ERROR_GPU_IS_LOST")
    error.gpu_index = 2
    (result,) = second.observe(None, error=error).results
    assert result.problems[0].message.startswith("GPU 2 (0000:1d:00.0) is lost")


class Blind:
    """A check of the test's own that answers what the test sets (a note means cannot decide)."""

    name = "blind"
    reasons = ("Blind",)
    needs_node = False

    def __init__(self, setup: CheckSetup, previous: Check | None) -> None:
        self.answer: tuple[str, str] = (OK, "")

    def observe(self, seen: Observation) -> CheckResult:
        state, note = self.answer
        problems = (Problem(self.name, "Blind", "broken"),) if state == FAILING else ()
        return CheckResult(self.name, state, problems, note)


@dataclass
class BlindFactory:
    name: str = "blind"
    reasons: tuple[str, ...] = ("Blind",)
    needs_node: bool = False
    built: list[Blind] = field(default_factory=list)

    def __call__(self, setup: CheckSetup, previous: Check | None = None) -> Blind:
        self.built.append(Blind(setup, previous))
        return self.built[-1]


def answers(monitor: HealthMonitor, check: Blind, *steps: tuple[str, str]) -> None:
    for step in steps:
        check.answer = step
        monitor.observe(make_facts())


@pytest.mark.parametrize(("one_shot", "level"), [(False, "warning"), (True, "info")])
def test_what_a_check_cannot_decide_is_said_when_it_changes(
    tmp_path: Path, one_shot: bool, level: str
) -> None:
    log, factory = Log(), BlindFactory()
    monitor = HealthMonitor(
        sysfs_root=tmp_path,
        checks=["blind"],
        registry={factory.name: factory},
        log=log,
        one_shot=one_shot,
    )
    (check,) = factory.built
    answers(
        monitor,
        check,
        (CANNOT_DECIDE, "GPU 1 has no ECC"),
        (CANNOT_DECIDE, "GPU 1 has no ECC"),  # the same: not again
        (FAILING, ""),  # a problem says nothing of what it cannot decide
        (CANNOT_DECIDE, "GPU 1 has no ECC"),
        (CANNOT_DECIDE, "GPUs 1, 2 have no ECC"),  # a new reason: said
        (OK, ""),
        (CANNOT_DECIDE, "GPUs 1, 2 have no ECC"),  # again after a pass
    )
    said = [(line[0], line[2]["why"]) for line in log.lines]
    assert said == [
        (level, "GPU 1 has no ECC"),
        (level, "GPUs 1, 2 have no ECC"),
        (level, "GPUs 1, 2 have no ECC"),
    ]
    assert {line[1] for line in log.lines} == {"GPU health check cannot decide"}
    assert {line[2]["check"] for line in log.lines} == {"blind"}


def test_a_reload_does_not_say_again_what_was_said(tmp_path: Path) -> None:
    log, factory = Log(), BlindFactory()
    registry = {factory.name: factory}
    first = HealthMonitor(sysfs_root=tmp_path, checks=["blind"], registry=registry, log=log)
    answers(first, factory.built[0], (CANNOT_DECIDE, "no watcher"))
    second = HealthMonitor(
        sysfs_root=tmp_path, checks=["blind"], registry=registry, log=log, previous=first
    )
    answers(second, factory.built[1], (CANNOT_DECIDE, "no watcher"))
    assert len(log.lines) == 1
