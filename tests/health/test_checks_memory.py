"""The ``memory`` check (gfd.health.checks.memory): remapped rows failed or pending, page
retirement pending, uncorrectable ECC errors rising, when each clears, and what it cannot
decide (no ECC, no memory health at all). Facts are made here; the reader's side is
tests/nvml/test_memory_health.py, and the simulator end to end
tests/health/test_xid_memory_agent.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gfd.facts import MemoryHealth, NodeFacts, RemappedRows, RetiredPages
from gfd.health import (
    CANNOT_DECIDE,
    FAILING,
    MEMORY,
    OK,
    UNKNOWN,
    EventRules,
    HealthMonitor,
)
from gfd.health.condition import state_of
from tests.factories import make_facts, make_gpu
from tests.health.doubles import Clock, Log

ROWS = RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False)
#: A Hopper GPU as a real H200 reports it (tests/records/real-gpu/).
HOPPER = MemoryHealth(
    ecc_enabled=True, remapped_rows=ROWS, retired_pages=None, volatile_uncorrected_ecc=0
)
#: A GPU before Ampere: page retirement instead of row remapping.
VOLTA = MemoryHealth(
    ecc_enabled=True,
    remapped_rows=None,
    retired_pages=RetiredPages(single_bit=0, double_bit=0, pending=False),
    volatile_uncorrected_ecc=0,
)


def facts(*health: MemoryHealth | None) -> NodeFacts:
    return make_facts([make_gpu(i, memory_health=h) for i, h in enumerate(health)])


def monitor(
    tmp_path: Path,
    clock: Clock | None = None,
    *,
    hold: float | None = None,
    log: Log | None = None,
    previous: HealthMonitor | None = None,
) -> HealthMonitor:
    return HealthMonitor(
        sysfs_root=tmp_path,
        checks=[MEMORY],
        clock=clock or Clock(),
        events=EventRules(hold=hold),
        log=log,
        previous=previous,
    )


def observe(checks: HealthMonitor, seen: NodeFacts | None) -> tuple[str, list[str], str]:
    (result,) = checks.observe(seen).results
    return result.state, [f"{p.reason}: {p.message}" for p in result.problems], result.note


def rows(
    *, correctable: int = 0, uncorrectable: int = 0, pending: bool = False, failure: bool = False
) -> MemoryHealth:
    return replace(HOPPER, remapped_rows=RemappedRows(correctable, uncorrectable, pending, failure))


def ecc(count: int) -> MemoryHealth:
    return replace(HOPPER, volatile_uncorrected_ecc=count)


def test_healthy_memory_passes(tmp_path: Path) -> None:
    assert observe(monitor(tmp_path), facts(HOPPER, VOLTA)) == (OK, [], "")


def test_rows_pending_on_gpu_1_asks_for_a_reset_naming_gpu_1(tmp_path: Path) -> None:
    assert observe(monitor(tmp_path), facts(HOPPER, rows(pending=True))) == (
        FAILING,
        ["GPUResetRequired: GPU 1 (0000:1c:00.0): a row remapping is pending: reset the GPU"],
        "",
    )


def test_a_failed_remapping_is_a_memory_failure_reported_first(tmp_path: Path) -> None:
    failed = rows(failure=True, pending=True, uncorrectable=3, correctable=1)
    state, problems, _ = observe(monitor(tmp_path), facts(rows(pending=True), failed))
    assert state == FAILING
    assert problems == [
        "GPUMemoryFailure: GPU 1 (0000:1c:00.0): row remapping failed (3 rows remapped for "
        "uncorrectable errors, 1 for correctable): the GPU needs service",
        "GPUResetRequired: GPU 0 (0000:1b:00.0): a row remapping is pending: reset the GPU",
        "GPUResetRequired: GPU 1 (0000:1c:00.0): a row remapping is pending: reset the GPU",
    ]
    checks = monitor(tmp_path)
    decided = state_of(checks.observe(facts(rows(pending=True), failed)), checks.reasons)
    assert decided is not None and decided.reason == "GPUMemoryFailure"


def test_a_retirement_pending_on_a_gpu_without_row_remapping_asks_for_a_reset(
    tmp_path: Path,
) -> None:
    pending = replace(VOLTA, retired_pages=RetiredPages(single_bit=2, double_bit=1, pending=True))
    assert observe(monitor(tmp_path), facts(pending)) == (
        FAILING,
        [
            "GPUResetRequired: GPU 0 (0000:1b:00.0): a page retirement is pending (1 page "
            "retired for double-bit errors, 2 for single-bit): reset the GPU"
        ],
        "",
    )


def test_rows_pending_clear_when_nvml_stops_reporting_them(tmp_path: Path) -> None:
    checks = monitor(tmp_path)
    assert observe(checks, facts(rows(pending=True)))[0] == FAILING
    # After the reset: the remapping took effect, one more row remapped, nothing pending.
    assert observe(checks, facts(rows(uncorrectable=1))) == (OK, [], "")


def test_uncorrectable_ecc_rising_above_the_first_count_is_reported(tmp_path: Path) -> None:
    checks = monitor(tmp_path)
    # What the count was when gfd first saw the GPU is no news.
    assert observe(checks, facts(ecc(7), ecc(0))) == (OK, [], "")
    assert observe(checks, facts(ecc(7), ecc(3))) == (
        FAILING,
        [
            "UncorrectableECC: GPU 1 (0000:1c:00.0): 3 new uncorrectable ECC errors (volatile count 3)"
        ],
        "",
    )
    assert observe(checks, facts(ecc(7), ecc(4)))[1] == [
        "UncorrectableECC: GPU 1 (0000:1c:00.0): 4 new uncorrectable ECC errors (volatile count 4)"
    ]


def test_an_ecc_rise_holds_for_the_life_of_the_process_by_default(tmp_path: Path) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock)
    observe(checks, facts(ecc(0)))
    assert observe(checks, facts(ecc(1)))[0] == FAILING
    clock.now += 30 * 24 * 3600
    assert observe(checks, facts(ecc(1)))[0] == FAILING
    # The driver reloaded or the GPU was reset: the count restarts, the rise stays held.
    assert observe(checks, facts(ecc(0)))[1] == [
        "UncorrectableECC: GPU 0 (0000:1b:00.0): 1 new uncorrectable ECC error (volatile count 0)"
    ]


def test_with_a_hold_an_ecc_rise_clears_once_that_long_passed_without_another(
    tmp_path: Path,
) -> None:
    clock = Clock()
    checks = monitor(tmp_path, clock, hold=600)
    observe(checks, facts(ecc(0)))
    assert observe(checks, facts(ecc(2)))[0] == FAILING
    clock.now += 300
    assert observe(checks, facts(ecc(5)))[0] == FAILING
    clock.now += 599
    assert observe(checks, facts(ecc(5)))[0] == FAILING
    clock.now += 1
    assert observe(checks, facts(ecc(5))) == (OK, [], "")
    # The count then seen is the new baseline.
    assert observe(checks, facts(ecc(6)))[1] == [
        "UncorrectableECC: GPU 0 (0000:1b:00.0): 1 new uncorrectable ECC error (volatile count 6)"
    ]


def test_a_gpu_without_ecc_cannot_be_decided_and_blocks_no_verdict(tmp_path: Path) -> None:
    log = Log()
    checks = monitor(tmp_path, log=log)
    ecc_off = MemoryHealth(ecc_enabled=False)
    note = (
        "no uncorrectable ECC count (ECC off or not supported) on GPUs 1, 2; "
        "no remapped rows or retired pages on GPUs 1, 2"
    )
    assert observe(checks, facts(HOPPER, ecc_off, None)) == (CANNOT_DECIDE, [], note)
    assert observe(checks, facts(HOPPER, ecc_off, None)) == (CANNOT_DECIDE, [], note)
    assert log.lines == [
        ("warning", "GPU health check cannot decide", {"check": "memory", "why": note})
    ]
    # A problem on a GPU it can judge still fails the check.
    assert observe(checks, facts(rows(pending=True), ecc_off, None))[0] == FAILING


def test_ecc_on_without_row_remapping_or_page_retirement_is_half_decided(
    tmp_path: Path,
) -> None:
    counts_only = MemoryHealth(ecc_enabled=True, volatile_uncorrected_ecc=0)
    assert observe(monitor(tmp_path), facts(counts_only)) == (
        CANNOT_DECIDE,
        [],
        "no remapped rows or retired pages on GPU 0",
    )


def test_no_facts_decide_nothing(tmp_path: Path) -> None:
    assert observe(monitor(tmp_path), None) == (UNKNOWN, [], "")


def test_a_reload_keeps_the_counts_first_seen(tmp_path: Path) -> None:
    first = monitor(tmp_path)
    observe(first, facts(ecc(2)))
    second = monitor(tmp_path, previous=first)
    assert observe(second, facts(ecc(3)))[0] == FAILING
