"""The ``xid`` check (gfd.health.checks.xid): which Xids mark a GPU failing, the message,
when a fatal Xid stops being reported (the written rule), and what the check cannot decide.

The Xids come from a source of the test's own (what the check needs of the watcher,
:class:`gfd.nvml.xid_events.XidSource`) and the hold is timed on a settable clock; the
watcher itself is tested in tests/nvml/test_xid_events.py, and the check with the watcher
and the simulator end to end in tests/health/test_xid_memory_agent.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gfd.config.values import XidThreshold
from gfd.facts import Gpu
from gfd.health import (
    CANNOT_DECIDE,
    FAILING,
    NVLINK,
    OK,
    XID,
    EventRules,
    HealthMonitor,
)
from gfd.health.checks.xid import NO_WATCHER, utc
from gfd.health.condition import MAX_MESSAGE, Transition, event_body, state_of
from gfd.nvml.xid_events import UnwatchedGpu, XidEvent, XidGpu
from tests.factories import make_facts, make_gpu
from tests.health.doubles import Clock, Log

FACTS = make_facts([make_gpu(i) for i in range(4)])
#: When the Xids below arrive (wall clock, as the watcher stamps them).
T0 = 1_796_000_000.0


def gpu(index: int) -> XidGpu:
    return XidGpu(index=index, bus_id=FACTS.gpus[index].bus_id, uuid=FACTS.gpus[index].uuid)


def xid(index: int, number: int, at: float = T0) -> XidEvent:
    return XidEvent(gpu=gpu(index), xid=number, at=at)


@dataclass
class Source:
    """Xid events as the test hands them in, and what the watcher cannot see."""

    arriving: list[XidEvent] = field(default_factory=list)
    start_error: str | None = None
    unwatched: tuple[UnwatchedGpu, ...] = ()
    wait_error: str | None = None
    #: What each drain allowed: to start the watcher, or not.
    starts: list[bool] = field(default_factory=list)

    def drain(self, *, start: bool = True, gpus: Sequence[Gpu] = ()) -> tuple[XidEvent, ...]:
        self.starts.append(start)
        events, self.arriving = tuple(self.arriving), []
        return events


def wall_clock_of(clock: Clock) -> Callable[[], float]:
    """The wall clock that goes with the check's ``clock``: at T0 when the test starts."""
    start = clock.now
    return lambda: T0 + (clock.now - start)


def monitor(
    tmp_path: Path,
    source: Source | None,
    clock: Clock | None = None,
    *,
    hold: float | None = None,
    fatal: frozenset[int] = frozenset(),
    log: Log | None = None,
    previous: HealthMonitor | None = None,
) -> HealthMonitor:
    clock = clock or Clock()
    rules = EventRules(
        xid_events=source, fatal_xids=fatal, hold=hold, wall_clock=wall_clock_of(clock)
    )
    return HealthMonitor(
        sysfs_root=tmp_path,
        checks=[XID],
        clock=clock,
        events=rules,
        log=log,
        previous=previous,
    )


def observe(checks: HealthMonitor) -> tuple[str, list[str], str]:
    (result,) = checks.observe(FACTS).results
    return result.state, [problem.message for problem in result.problems], result.note


def test_a_fatal_xid_fails_its_gpu_naming_index_bus_id_xid_count_and_times(
    tmp_path: Path,
) -> None:
    source = Source()
    checks = monitor(tmp_path, source)
    assert observe(checks) == (OK, [], "")
    source.arriving = [xid(3, 79, T0), xid(3, 79, T0 + 65)]
    (result,) = checks.observe(FACTS).results
    assert result.state == FAILING
    assert [(p.check, p.reason) for p in result.problems] == [("xid", "XidError")]
    assert result.problems[0].message == (
        "GPU 3 (0000:1e:00.0): Xid 79 (GPU has fallen off the bus), 2 times, "
        "first 2026-11-30T00:53:20Z, last 2026-11-30T00:54:25Z; "
        "action: reboot the node; if it recurs, contact support"
    )


def test_times_are_whole_seconds_of_utc() -> None:
    assert utc(T0 + 0.9) == "2026-11-30T00:53:20Z"


def test_the_application_errors_change_nothing(tmp_path: Path) -> None:
    source = Source()
    checks = monitor(tmp_path, source)
    source.arriving = [xid(0, number) for number in (13, 31, 43, 45, 68, 109)]
    assert observe(checks) == (OK, [], "")


def test_several_gpus_and_xids_are_listed_by_gpu_then_xid(tmp_path: Path) -> None:
    source = Source([xid(2, 94), xid(1, 79), xid(2, 48), xid(1, 79, T0 + 1)])
    state, messages, _ = observe(monitor(tmp_path, source))
    assert state == FAILING
    assert [message.split(",")[0] for message in messages] == [
        "GPU 1 (0000:1c:00.0): Xid 79 (GPU has fallen off the bus)",
        "GPU 2 (0000:1d:00.0): Xid 48 (Double Bit ECC Error)",
        "GPU 2 (0000:1d:00.0): Xid 94 (Contained memory error)",
    ]
    assert ", 2 times," in messages[0]
    assert ", 1 time," in messages[1]


def test_with_fatal_xids_given_only_those_count_whatever_is_ignored(tmp_path: Path) -> None:
    source = Source([xid(0, 79), xid(1, 13)])
    state, messages, _ = observe(monitor(tmp_path, source, fatal=frozenset({13, 48})))
    assert state == FAILING
    assert [message.split(",")[0] for message in messages] == [
        "GPU 1 (0000:1c:00.0): Xid 13 (Graphics Engine Exception)"
    ]


def test_a_fatal_xid_holds_for_the_life_of_the_process_by_default(tmp_path: Path) -> None:
    clock = Clock()
    source = Source([xid(3, 79)])
    checks = monitor(tmp_path, source, clock)
    assert observe(checks)[0] == FAILING
    clock.now += 30 * 24 * 3600
    assert observe(checks)[0] == FAILING


def test_with_a_hold_the_gpu_recovers_once_that_long_passed_without_a_new_fatal_xid(
    tmp_path: Path,
) -> None:
    clock = Clock()
    source = Source([xid(3, 79)])
    checks = monitor(tmp_path, source, clock, hold=600)
    assert observe(checks)[0] == FAILING
    clock.now += 400
    # Another fatal Xid starts the hold again; an ignored one does not.
    source.arriving = [xid(3, 48, T0 + 400), xid(3, 13, T0 + 400)]
    assert observe(checks)[0] == FAILING
    clock.now += 599
    source.arriving = [xid(3, 13, T0 + 999)]
    assert observe(checks)[0] == FAILING
    clock.now += 1
    assert observe(checks) == (OK, [], "")
    # After the hold a new Xid counts from one again.
    source.arriving = [xid(3, 79, T0 + 2000)]
    assert ", 1 time," in observe(checks)[1][0]


def test_the_hold_is_per_gpu(tmp_path: Path) -> None:
    clock = Clock()
    source = Source([xid(0, 79)])
    checks = monitor(tmp_path, source, clock, hold=600)
    assert len(observe(checks)[1]) == 1
    clock.now += 500
    source.arriving = [xid(1, 79, T0 + 500)]
    assert len(observe(checks)[1]) == 2
    clock.now += 100
    _, messages, _ = observe(checks)
    assert [message.split(" (")[0] for message in messages] == ["GPU 1"]


def test_a_run_without_a_watcher_cannot_decide_and_the_others_judge_the_node(
    tmp_path: Path,
) -> None:
    checks = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK, XID])
    verdict = checks.observe(FACTS)
    assert [(r.check, r.state, r.note) for r in verdict.results] == [
        ("nvlink", OK, ""),
        ("xid", CANNOT_DECIDE, NO_WATCHER),
    ]
    state = state_of(verdict, checks.reasons)
    assert state is not None and state.healthy
    assert state.message == "every GPU health check passes (nvlink); cannot decide: xid"


def test_a_check_that_cannot_decide_alone_decides_nothing(tmp_path: Path) -> None:
    checks = monitor(tmp_path, None)
    assert state_of(checks.observe(FACTS), checks.reasons) is None


def test_a_gpu_not_watched_cannot_be_decided_and_is_named(tmp_path: Path) -> None:
    log = Log()
    source = Source(unwatched=(UnwatchedGpu(gpu(2), "NVML_ERROR_NOT_SUPPORTED"),))
    checks = monitor(tmp_path, source, log=log)
    note = "GPU 2 (0000:1d:00.0) is not watched (NVML_ERROR_NOT_SUPPORTED)"
    assert observe(checks) == (CANNOT_DECIDE, [], note)
    assert observe(checks) == (CANNOT_DECIDE, [], note)
    # Said once, not every cycle.
    assert log.lines == [
        ("warning", "GPU health check cannot decide", {"check": "xid", "why": note})
    ]
    # A fatal Xid on a GPU it does watch still fails the check.
    source.arriving = [xid(0, 79)]
    assert observe(checks)[0] == FAILING


def test_failing_waits_and_a_watcher_not_running_cannot_decide(tmp_path: Path) -> None:
    source = Source(wait_error="NVML_ERROR_UNKNOWN")
    checks = monitor(tmp_path, source)
    assert observe(checks) == (
        CANNOT_DECIDE,
        [],
        "waiting for Xid events fails (NVML_ERROR_UNKNOWN)",
    )
    source.wait_error = None
    source.start_error = "NVML nvmlInit failed: NVML_ERROR_DRIVER_NOT_LOADED (code 9)"
    assert observe(checks) == (
        CANNOT_DECIDE,
        [],
        "the Xid watcher is not running: NVML nvmlInit failed: NVML_ERROR_DRIVER_NOT_LOADED "
        "(code 9)",
    )
    source.start_error = None
    assert observe(checks) == (OK, [], "")


def test_a_failed_read_does_not_stop_the_xids_nor_start_the_watcher(tmp_path: Path) -> None:
    source = Source([xid(1, 79)])
    checks = monitor(tmp_path, source)
    (result,) = checks.observe(None).results
    assert result.state == FAILING
    checks.observe(FACTS)
    # NVML was down in the first cycle: only the second may start the watcher.
    assert source.starts == [False, True]


def test_a_reload_keeps_the_xids_held(tmp_path: Path) -> None:
    clock = Clock()
    source = Source([xid(3, 79)])
    first = monitor(tmp_path, source, clock, hold=600)
    assert observe(first)[0] == FAILING
    second = monitor(tmp_path, source, clock, hold=600, previous=first)
    assert observe(second)[0] == FAILING
    clock.now += 600
    assert observe(second)[0] == OK


# --------------------------------------------------------------------------- Xid storms

STORM = XidThreshold(xids=frozenset({13, 31, 43}), count=10, window=300.0)


def storm_monitor(
    tmp_path: Path,
    source: Source,
    clock: Clock,
    *,
    rules: tuple[XidThreshold, ...] = (STORM,),
    hold: float | None = None,
    previous: HealthMonitor | None = None,
) -> HealthMonitor:
    events = EventRules(
        xid_events=source, hold=hold, thresholds=rules, wall_clock=wall_clock_of(clock)
    )
    return HealthMonitor(
        sysfs_root=tmp_path, checks=[XID], clock=clock, events=events, previous=previous
    )


def test_ignored_xids_that_reach_the_count_within_the_window_are_a_storm(tmp_path: Path) -> None:
    clock = Clock()
    source = Source([xid(2, 13, T0 + 30 * i) for i in range(9)])
    checks = storm_monitor(tmp_path, source, clock)
    # Nine within 5 minutes: each an application's fault, no storm yet.
    assert observe(checks) == (OK, [], "")
    clock.now += 270
    source.arriving = [xid(2, 43, T0 + 270)]
    (result,) = checks.observe(FACTS).results
    assert result.state == FAILING
    assert [(p.reason, p.message) for p in result.problems] == [
        (
            "XidStorm",
            "GPU 2 (0000:1d:00.0): Xid storm, 10 of Xid 13, 43 (at least 10 within 5m), "
            f"first {utc(T0)}, last {utc(T0 + 270)}; "
            "action: restart the application (Xid 13), none needed (Xid 43)",
        )
    ]
    # It goes on: each further Xid of the rule is counted.
    source.arriving = [xid(2, 31, T0 + 280)]
    assert observe(checks)[1][0].startswith("GPU 2 (0000:1d:00.0): Xid storm, 11 of Xid 13, 31, 43")


def test_the_same_count_spread_wider_than_the_window_is_no_storm(tmp_path: Path) -> None:
    clock = Clock()
    source = Source()
    checks = storm_monitor(tmp_path, source, clock)
    for i in range(30):
        clock.now += 40
        source.arriving = [xid(0, 13, T0 + 40 * (i + 1))]
        assert observe(checks)[0] == OK


def test_xids_a_rule_does_not_name_and_other_gpus_do_not_count(tmp_path: Path) -> None:
    clock = Clock()
    source = Source(
        [xid(0, 13, T0)] * 5 + [xid(1, 13, T0)] * 5 + [xid(0, 68, T0)] * 20  # 68: not named
    )
    assert observe(storm_monitor(tmp_path, source, clock))[0] == OK


def test_a_rule_of_every_ignored_xid(tmp_path: Path) -> None:
    every = XidThreshold(xids=None, count=3, window=60.0)
    clock = Clock()
    source = Source([xid(1, 13, T0), xid(1, 68, T0 + 1), xid(1, 109, T0 + 2)])
    _, messages, _ = observe(storm_monitor(tmp_path, source, clock, rules=(every,)))
    assert messages == [
        f"GPU 1 (0000:1c:00.0): Xid storm, 3 of Xid 13, 68, 109 (at least 3 within 1m), "
        f"first {utc(T0)}, last {utc(T0 + 2)}; "
        "action: restart the application (Xid 13, 68), reset the GPU (Xid 109)"
    ]


def test_a_storm_is_held_as_a_fatal_xid_and_both_are_reported(tmp_path: Path) -> None:
    clock = Clock()
    source = Source([xid(3, 13, T0 + i) for i in range(10)] + [xid(3, 79, T0 + 10)])
    checks = storm_monitor(tmp_path, source, clock, hold=600)
    state, messages, _ = observe(checks)
    assert state == FAILING
    assert [message.split(", ")[0] for message in messages] == [
        "GPU 3 (0000:1e:00.0): Xid 79 (GPU has fallen off the bus)",
        "GPU 3 (0000:1e:00.0): Xid storm",
    ]
    clock.now += 599
    assert observe(checks)[0] == FAILING
    # A storm Xid within the hold starts it again.
    clock.now += 1
    source.arriving = [xid(3, 31, T0 + 600)]
    assert observe(checks)[0] == FAILING
    clock.now += 599
    assert observe(checks)[0] == FAILING
    clock.now += 1
    assert observe(checks) == (OK, [], "")


def test_without_a_hold_a_storm_lasts_for_the_life_of_the_process_and_a_reload(
    tmp_path: Path,
) -> None:
    clock = Clock()
    source = Source([xid(0, 13, T0 + i) for i in range(10)])
    checks = storm_monitor(tmp_path, source, clock)
    assert observe(checks)[0] == FAILING
    clock.now += 30 * 24 * 3600
    reloaded = storm_monitor(tmp_path, source, clock, previous=checks)
    assert observe(reloaded)[0] == FAILING


def test_an_xid_that_happened_before_it_arrived_is_held_from_when_it_happened(
    tmp_path: Path,
) -> None:
    """As an Xid the kernel logged before gfd started arrives: its hold runs from then."""
    clock = Clock()
    source = Source()
    checks = storm_monitor(tmp_path, source, clock, hold=600)
    assert observe(checks)[0] == OK
    clock.now += 3600
    # Logged 10 minutes and more ago: its hold is over already.
    source.arriving = [xid(0, 79, T0 + 3000)]
    assert observe(checks) == (OK, [], "")
    # Logged 5 minutes ago: held for the 5 minutes left.
    source.arriving = [xid(0, 79, T0 + 3300)]
    assert observe(checks)[0] == FAILING
    clock.now += 299
    assert observe(checks)[0] == FAILING
    clock.now += 1
    assert observe(checks)[0] == OK


def test_a_storm_of_one_action_names_it_once(tmp_path: Path) -> None:
    every = XidThreshold(xids=None, count=2, window=60.0)
    clock = Clock()
    source = Source([xid(1, 13, T0), xid(1, 68, T0 + 1)])
    _, messages, _ = observe(storm_monitor(tmp_path, source, clock, rules=(every,)))
    assert messages[0].endswith("; action: restart the application")


def test_an_xid_the_catalog_does_not_list_says_so(tmp_path: Path) -> None:
    _, messages, _ = observe(monitor(tmp_path, Source([xid(0, 999, T0)])))
    assert messages == [
        f"GPU 0 (0000:1b:00.0): Xid 999, 1 time, first {utc(T0)}, last {utc(T0)}; "
        "action: unknown (not in NVIDIA's Xid catalog)"
    ]


def test_the_condition_and_its_event_carry_the_action(tmp_path: Path) -> None:
    checks = monitor(tmp_path, Source([xid(3, 79, T0)]))
    state = state_of(checks.observe(FACTS), checks.reasons)
    assert state is not None and state.reason == "XidError"
    advice = "; action: reboot the node; if it recurs, contact support"
    assert state.message.endswith(advice)
    event = event_body(Transition(None, state), node=None, node_name="n1", now=T0)
    assert event["message"] == state.message
    assert len(state.message) <= MAX_MESSAGE
