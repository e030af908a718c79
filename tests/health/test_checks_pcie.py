"""The ``pcie`` check (gfd.health.checks.pcie): a link below what the GPU and its slot allow
(width at once, generation only while busy) after the settle time, replays rising faster
than the rate over a minute or more, when each clears, and what it cannot decide. Facts are
made here, the links as NVML documents them (nvml.h: the maximum is what is "possible with
this device and system"); the reader's side is tests/nvml/test_pcie.py, and the simulator
end to end tests/health/test_pcie_agent.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gfd.facts import NodeFacts, PcieLink
from gfd.health import (
    CANNOT_DECIDE,
    FAILING,
    OK,
    PCIE,
    PENDING,
    UNKNOWN,
    HealthMonitor,
    PcieRules,
)
from gfd.health.checks.pcie import BUSY_UTILIZATION, link_below_reach
from tests.factories import make_facts, make_gpu
from tests.health.doubles import Clock, Log

#: The real H200's link (../shared/reference/real-gpu-h200-580.159.04-2026-12-04/pcie.json).
GEN5_X16 = PcieLink(
    current_generation=5,
    current_width=16,
    max_generation=5,
    max_width=16,
    gpu_max_generation=5,
    replay_counter=0,
)


def facts(*links: PcieLink | None, **gpu_fields: object) -> NodeFacts:
    return make_facts([make_gpu(i, pcie=link, **gpu_fields) for i, link in enumerate(links)])


def monitor(
    tmp_path: Path,
    clock: Clock | None = None,
    *,
    settle: float = 0.0,
    rate: int = 8,
    log: Log | None = None,
    previous: HealthMonitor | None = None,
) -> HealthMonitor:
    return HealthMonitor(
        sysfs_root=tmp_path,
        checks=[PCIE],
        clock=clock or Clock(),
        pcie=PcieRules(replays_per_minute=rate, settle=settle),
        log=log,
        previous=previous,
    )


def observe(checks: HealthMonitor, seen: NodeFacts | None) -> tuple[str, list[str], str]:
    (result,) = checks.observe(seen).results
    return result.state, [f"{p.reason}: {p.message}" for p in result.problems], result.note


def link(**values: int | None) -> PcieLink:
    return replace(GEN5_X16, **values)


def test_links_at_their_reach_pass(tmp_path: Path) -> None:
    # A Gen5 GPU in a Gen4 x8 slot: NVML's maximum is the slot's, and the link reaches it.
    slot_limited = link(current_generation=4, current_width=8, max_generation=4, max_width=8)
    assert observe(monitor(tmp_path), facts(GEN5_X16, slot_limited)) == (OK, [], "")


def test_a_narrower_link_counts_at_once_without_a_settle_time(tmp_path: Path) -> None:
    state, problems, _ = observe(monitor(tmp_path), facts(GEN5_X16, link(current_width=8)))
    assert (state, problems) == (
        FAILING,
        [
            "PCIeLinkDegraded: GPU 1 (0000:1c:00.0): PCIe link runs at Gen5 x8, below the "
            "Gen5 x16 the GPU and its slot allow"
        ],
    )


def test_a_degradation_is_pending_until_it_has_been_seen_for_the_settle_time(
    tmp_path: Path,
) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock, settle=300)
    narrow = facts(link(current_width=4))
    assert observe(checks, narrow)[0] == PENDING
    clock.now += 299
    assert observe(checks, narrow)[0] == PENDING
    clock.now += 1
    assert observe(checks, narrow)[0] == FAILING
    # A read at full width clears it at once, and the next degradation waits again.
    assert observe(checks, facts(GEN5_X16)) == (OK, [], "")
    assert observe(checks, narrow)[0] == PENDING


def test_a_lower_generation_counts_only_while_the_gpu_is_busy(tmp_path: Path) -> None:
    checks = monitor(tmp_path)
    idle = link(current_generation=1, gpu_utilization=0)
    assert observe(checks, facts(idle)) == (OK, [], "")
    busy = link(current_generation=3, gpu_utilization=BUSY_UTILIZATION)
    assert observe(checks, facts(busy)) == (
        FAILING,
        [
            "PCIeLinkDegraded: GPU 0 (0000:1b:00.0): PCIe link runs at Gen3 x16, below the "
            "Gen5 x16 the GPU and its slot allow, while 50% busy"
        ],
        "",
    )
    # Idle again at a low generation: no new evidence either way, it stays reported ...
    assert observe(checks, facts(idle))[0] == FAILING
    # ... until a busy read shows the link at its generation.
    assert observe(checks, facts(GEN5_X16)) == (OK, [], "")
    barely = link(current_generation=3, gpu_utilization=BUSY_UTILIZATION - 1)
    assert observe(checks, facts(barely)) == (OK, [], "")


def test_only_evidence_moves_the_settle_time_on(tmp_path: Path) -> None:
    """Idle reads between two busy ones count for nothing: the degradation must be seen
    again once the settle time has passed."""
    clock = Clock()
    checks = monitor(tmp_path, clock, settle=300)
    assert observe(checks, facts(link(current_generation=2, gpu_utilization=90)))[0] == PENDING
    clock.now += 600
    assert observe(checks, facts(link(current_generation=1, gpu_utilization=3)))[0] == PENDING
    assert observe(checks, facts(link(current_generation=2, gpu_utilization=80)))[0] == FAILING


def test_a_generation_below_reach_without_utilisation_cannot_be_decided(
    tmp_path: Path,
) -> None:
    # A MIG-enabled GPU: NVML reports no utilisation, so its generation is not judged.
    log = Log()
    checks = monitor(tmp_path, log=log)
    seen = facts(GEN5_X16, link(current_generation=2))
    note = "a PCIe generation below reach and no utilisation to tell busy from idle on GPU 1"
    assert observe(checks, seen) == (CANNOT_DECIDE, [], note)
    # Its width is still judged.
    state, problems, _ = observe(
        checks, facts(GEN5_X16, link(current_generation=2, current_width=8))
    )
    assert state == FAILING and "runs at Gen2 x8" in problems[0]
    assert [line[1] for line in log.lines] == ["GPU health check cannot decide"]


def test_replays_rising_faster_than_the_rate_over_a_minute(tmp_path: Path) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock)
    assert observe(checks, facts(link(replay_counter=500))) == (OK, [], "")
    # Inside the first minute nothing is judged, however fast it rose.
    clock.now += 30
    assert observe(checks, facts(link(replay_counter=510))) == (OK, [], "")
    clock.now += 30
    assert observe(checks, facts(link(replay_counter=518))) == (
        FAILING,
        [
            "PCIeReplaysRising: GPU 0 (0000:1b:00.0): PCIe replay counter rose by 18 in 1m "
            "(18.0 a minute, more than 8; now 518)"
        ],
        "",
    )
    # The verdict of the last full minute holds until the next one is measured.
    clock.now += 10
    assert observe(checks, facts(link(replay_counter=518)))[0] == FAILING
    clock.now += 50
    assert observe(checks, facts(link(replay_counter=526))) == (OK, [], "")


def test_the_rate_is_the_setting_and_exactly_it_is_not_too_fast(tmp_path: Path) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock, rate=100)
    observe(checks, facts(link(replay_counter=0)))
    clock.now += 120
    assert observe(checks, facts(link(replay_counter=200)))[0] == OK
    clock.now += 120
    state, problems, _ = observe(checks, facts(link(replay_counter=401)))
    assert state == FAILING and "rose by 201 in 2m (100.5 a minute, more than 100" in problems[0]


def test_a_count_from_before_gfd_started_or_a_restarted_one_is_no_rise(tmp_path: Path) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock)
    assert observe(checks, facts(link(replay_counter=10_000)))[0] == OK
    clock.now += 60
    assert observe(checks, facts(link(replay_counter=10_000)))[0] == OK
    # The driver reloaded: the counter starts again, a new baseline.
    clock.now += 60
    assert observe(checks, facts(link(replay_counter=3)))[0] == OK
    clock.now += 60
    assert observe(checks, facts(link(replay_counter=5)))[0] == OK


@pytest.mark.parametrize(
    ("seen", "note"),
    [
        (
            facts(None, GEN5_X16),
            "no PCIe link state (NVML answers none) on GPU 0; no PCIe replay counter on GPU 0",
        ),
        (facts(link(replay_counter=None)), "no PCIe replay counter on GPU 0"),
        (
            facts(GEN5_X16, GEN5_X16, gpu_numa_id=2),
            "attached to its CPU over NVLink-C2C, not PCIe on GPUs 0, 1",
        ),
        (
            facts(PcieLink(gpu_max_generation=5, replay_counter=0)),
            "no PCIe link state (NVML answers none) on GPU 0",
        ),
    ],
)
def test_what_nvml_does_not_tell_cannot_be_decided(
    tmp_path: Path, seen: NodeFacts, note: str
) -> None:
    assert observe(monitor(tmp_path), seen) == (CANNOT_DECIDE, [], note)


def test_a_grace_attached_gpu_is_not_judged_by_its_pcie_answers(tmp_path: Path) -> None:
    """A GB10, attached over NVLink-C2C, answers a placeholder Gen1 x1 (nvtop pull request
    499): that is no degraded link."""
    placeholder = link(current_generation=1, current_width=1, gpu_utilization=100)
    state, problems, _ = observe(monitor(tmp_path), facts(placeholder, gpu_numa_id=1))
    assert (state, problems) == (CANNOT_DECIDE, [])


def test_no_facts_is_unknown(tmp_path: Path) -> None:
    assert observe(monitor(tmp_path), None) == (UNKNOWN, [], "")


def test_failing_problems_come_first_by_reason_and_pending_ones_wait(tmp_path: Path) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock, settle=60)
    observe(checks, facts(link(replay_counter=0), GEN5_X16))
    clock.now += 60
    seen = facts(link(replay_counter=100), link(current_width=8, replay_counter=100))
    state, problems, _ = observe(checks, seen)
    # GPU 1's width is pending (seen once), GPU 0 and 1's replays are failing.
    assert state == FAILING
    assert [p.split(":")[0] for p in problems] == ["PCIeReplaysRising", "PCIeReplaysRising"]
    clock.now += 60
    state, problems, _ = observe(checks, seen)
    assert [p.split(":")[0] for p in problems] == ["PCIeLinkDegraded"]


def test_what_it_remembers_outlives_a_reload(tmp_path: Path) -> None:
    clock = Clock()
    first = monitor(tmp_path, clock, settle=300)
    narrow = facts(link(current_width=8, replay_counter=0))
    assert observe(first, narrow)[0] == PENDING
    clock.now += 300
    second = monitor(tmp_path, clock, settle=300, previous=first)
    assert observe(second, facts(link(current_width=8, replay_counter=50)))[0] == FAILING
    # The replaced check's memory is a copy: the old one still sees its own.
    clock.now += 1
    third = monitor(tmp_path, clock, settle=300, previous=second)
    assert observe(third, facts(GEN5_X16))[0] == OK
    assert observe(second, facts(link(current_width=8, replay_counter=50)))[0] == FAILING


def test_a_gpu_no_longer_read_starts_afresh(tmp_path: Path) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock)
    observe(checks, facts(GEN5_X16, link(replay_counter=0)))
    observe(checks, facts(GEN5_X16))
    clock.now += 60
    # GPU 1 is back with a count far above: a new baseline, not a rise.
    assert observe(checks, facts(GEN5_X16, link(replay_counter=5000)))[0] == OK


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (link(), ""),
        (link(current_generation=2, gpu_utilization=10), None),
        (link(current_generation=2), None),
        (
            link(current_width=8, gpu_utilization=0),
            "PCIe link runs at Gen5 x8, below the Gen5 x16 the GPU and its slot allow",
        ),
        (
            link(current_generation=4, current_width=8, gpu_utilization=99),
            "PCIe link runs at Gen4 x8, below the Gen5 x16 the GPU and its slot allow, "
            "while 99% busy",
        ),
        (
            PcieLink(current_width=4, max_width=16),
            "PCIe link runs at x4, below the x16 the GPU and its slot allow",
        ),
    ],
)
def test_the_rule_in_words(current: PcieLink, expected: str | None) -> None:
    assert link_below_reach(current) == expected
