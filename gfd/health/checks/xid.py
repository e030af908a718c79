"""The ``xid`` check: a fatal critical Xid error on a GPU (``XidError``), or a storm of the Xids
that are not fatal (``XidStorm``), from the run's Xid events.

Each cycle it drains the run's Xid source (:class:`gfd.nvml.xid_events.XidSource`: NVML's
event watcher, with the kernel log's Xids where it is readable) and keeps, per GPU (by
UUID) and Xid, how many arrived and the first and last time. Which Xids are fatal is
:class:`~gfd.health.check.EventRules`' (``--health-fatal-xids``, ``--health-ignored-xids``:
by default every Xid but an application's faults 13, 31, 43, 45, 68 and 109, as NVIDIA's
device plugin).

The Xids that are not fatal are counted against the storm rules
(``--health-xid-threshold``, :class:`gfd.config.values.XidThreshold`): a rule's Xids
reaching its count on one GPU within its window (the last COUNT of them, by when each
happened) fail the GPU as ``XidStorm``. One application's fault is no news; hundreds in
minutes are a sick GPU (or a job crash-looping on it), and both keep the GPU from
useful work.

When it clears, the written rule: a fatal Xid or a storm holds its GPU failing for the life
of the gfd process, as the device plugin holds a device unhealthy until it restarts; with
``--health-event-hold`` the GPU is healthy again once that long has passed with no new
fatal Xid and no new storm Xid on it. The hold is timed on the check's clock from when the
Xid happened: an event's wall-clock time (``at``: when NVML delivered it, or when the
kernel logged it) is turned into its age by :attr:`EventRules.wall_clock`, so an Xid the
kernel logged before gfd started (replayed from the kernel log) is held from then, not
from the restart. The message's times are UTC. Each problem ends with what NVIDIA's Xid
catalog recommends doing about its Xid (:mod:`gfd.health.xid_catalog`): ``GPU 3
(0000:61:00.0): Xid 79 (GPU has fallen off the bus), 1 time, first ..., last ...; action:
reboot the node; if it recurs, contact support``.

It cannot decide (never healthy or failing) what it cannot see: a run without a watcher
and without a kernel log (a one-shot run: no event can arrive in one cycle), a watcher
that could not start, a GPU it could not register (where no kernel log is read), waits
that fail. What it remembers outlives a reload.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from gfd.base.frozen import frozen_dataclass
from gfd.config.values import XID_CHECK, XidThreshold, format_duration
from gfd.facts.pci import sysfs_bus_id
from gfd.health.check import (
    CANNOT_DECIDE,
    FAILING,
    OK,
    Check,
    CheckResult,
    CheckSetup,
    GpuDirectory,
    Observation,
    Problem,
    gpu_name,
)
from gfd.health.xid_catalog import action_words, advice, describe

if TYPE_CHECKING:
    from gfd.nvml.xid_events import XidEvent, XidGpu, XidSource

REASON_XID = "XidError"
REASON_XID_STORM = "XidStorm"

#: Why the check cannot decide in a run without a watcher.
NO_WATCHER = "no Xid events are watched in a one-shot run (none could arrive in one cycle)"


@frozen_dataclass
class _Gpu:
    """A GPU as the check holds it: by UUID, or by bus id for one the kernel log names that
    NVML does not list (fallen off the bus); its index as messages name it (None: unknown)."""

    key: str
    index: int | None
    bus_id: str


def _named(gpu: XidGpu, directory: GpuDirectory) -> _Gpu:
    if gpu.uuid:
        return _Gpu(gpu.uuid, gpu.index, gpu.bus_id)
    index = gpu.index if gpu.index >= 0 else directory.index_at(sysfs_bus_id(gpu.bus_id))
    return _Gpu(f"PCI:{gpu.bus_id}", index, gpu.bus_id)


@dataclass
class _Seen:
    """One fatal Xid on one GPU: how often, and when (wall clock)."""

    index: int | None
    bus_id: str
    count: int
    first: float
    last: float


@dataclass
class _Storm:
    """A storm rule that fired on one GPU: the Xids counted since, and when (wall clock)."""

    index: int | None
    bus_id: str
    count: int
    first: float
    last: float
    xids: set[int] = field(default_factory=set)


def utc(seconds: float) -> str:
    """Whole-second UTC time in ISO 8601: ``2026-12-04T07:10:05Z``."""
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def storm_advice(xids: set[int]) -> str:
    """NVIDIA's immediate action for each Xid of a storm, one per action:
    ``action: restart the application (Xid 13, 31), none needed (Xid 43)``."""
    by_action: dict[str, list[int]] = {}
    for xid in sorted(xids):
        by_action.setdefault(action_words(xid), []).append(xid)
    if len(by_action) == 1:
        return f"action: {next(iter(by_action))}"
    return "action: " + ", ".join(
        f"{words} (Xid {', '.join(map(str, numbers))})" for words, numbers in by_action.items()
    )


class XidCheck:
    """Reports each GPU that had a fatal critical Xid or an Xid storm, held by the written rule."""

    name: ClassVar[str] = XID_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_XID, REASON_XID_STORM)
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        self._rules = setup.events
        self._clock = setup.clock
        #: Per GPU (by UUID, or "PCI:<bus id>" for one NVML does not list): the fatal Xids
        #: held, by Xid; the dictionaries below are keyed alike.
        self._held: dict[str, dict[int, _Seen]] = {}
        #: Per GPU UUID: the storms held, by rule.
        self._storms: dict[str, dict[XidThreshold, _Storm]] = {}
        #: Per GPU UUID and rule: when (check's clock, wall clock) its last Xids happened,
        #: and which, at most the rule's count of them.
        self._recent: dict[str, dict[XidThreshold, deque[tuple[float, float, int]]]] = {}
        #: Per GPU UUID: when (check's clock) its last fatal or storm Xid happened.
        self._last_fatal: dict[str, float] = {}
        if isinstance(previous, XidCheck):
            self._held = {
                uuid: {xid: replace(seen) for xid, seen in xids.items()}
                for uuid, xids in previous._held.items()
            }
            self._storms = {
                uuid: {rule: replace(storm, xids=set(storm.xids)) for rule, storm in rules.items()}
                for uuid, rules in previous._storms.items()
            }
            self._recent = {
                uuid: {rule: deque(times, maxlen=rule.count) for rule, times in rules.items()}
                for uuid, rules in previous._recent.items()
            }
            self._last_fatal = dict(previous._last_fatal)

    def observe(self, seen: Observation) -> CheckResult:
        source = self._rules.xid_events
        now = self._clock()
        if source is not None:
            wall = self._rules.wall_clock()
            # A cycle whose read failed has NVML down: no use starting the watcher then.
            gpus = seen.facts.gpus if seen.facts is not None else ()
            for event in source.drain(start=seen.facts is not None, gpus=gpus):
                # When it happened, on the check's clock: never after now.
                happened = now - max(0.0, wall - event.at)
                gpu = _named(event.gpu, seen.gpus)
                if self._rules.fatal(event.xid):
                    self._fatal(event, gpu, happened)
                else:
                    self._count(event, gpu, happened)
        self._release_held(now)
        problems = self._problems()
        if problems:
            return CheckResult(XID_CHECK, FAILING, problems)
        note = self._blind_spots(source)
        if note:
            return CheckResult(XID_CHECK, CANNOT_DECIDE, note=note)
        return CheckResult(XID_CHECK, OK)

    def _fatal(self, event: XidEvent, gpu: _Gpu, happened: float) -> None:
        held = self._held.setdefault(gpu.key, {})
        known = held.get(event.xid)
        if known is None:
            held[event.xid] = _Seen(gpu.index, gpu.bus_id, 1, event.at, event.at)
        else:
            known.count += 1
            known.first = min(known.first, event.at)
            known.last = max(known.last, event.at)
        self._hold_from(gpu.key, happened)

    def _count(self, event: XidEvent, gpu: _Gpu, happened: float) -> None:
        """An Xid that is not fatal, against each storm rule that counts it."""
        for rule in self._rules.thresholds:
            if rule.xids is not None and event.xid not in rule.xids:
                continue
            storm = self._storms.get(gpu.key, {}).get(rule)
            if storm is not None:
                # The storm goes on: each further Xid of it starts the hold again.
                storm.count += 1
                storm.xids.add(event.xid)
                storm.first = min(storm.first, event.at)
                storm.last = max(storm.last, event.at)
                self._hold_from(gpu.key, happened)
                continue
            recent = self._recent.setdefault(gpu.key, {}).setdefault(rule, deque(maxlen=rule.count))
            recent.append((happened, event.at, event.xid))
            ordered = sorted(recent)
            if len(ordered) == rule.count and ordered[-1][0] - ordered[0][0] <= rule.window:
                self._storms.setdefault(gpu.key, {})[rule] = _Storm(
                    gpu.index,
                    gpu.bus_id,
                    rule.count,
                    first=ordered[0][1],
                    last=ordered[-1][1],
                    xids={xid for _, _, xid in ordered},
                )
                recent.clear()
                self._hold_from(gpu.key, ordered[-1][0])

    def _hold_from(self, uuid: str, happened: float) -> None:
        self._last_fatal[uuid] = max(self._last_fatal.get(uuid, happened), happened)

    def _problems(self) -> tuple[Problem, ...]:
        uuids = sorted(set(self._held) | set(self._storms), key=self._gpu_order)
        problems: list[Problem] = []
        for uuid in uuids:
            for xid, known in sorted(self._held.get(uuid, {}).items()):
                where = gpu_name(known.index, sysfs_bus_id(known.bus_id))
                problems.append(
                    Problem(
                        XID_CHECK,
                        REASON_XID,
                        f"{where}: {describe(xid)}, {known.count} "
                        f"time{'s' if known.count != 1 else ''}, first {utc(known.first)}, "
                        f"last {utc(known.last)}; {advice(xid)}",
                    )
                )
            storms = sorted(self._storms.get(uuid, {}).items(), key=lambda item: item[0].describe())
            for rule, storm in storms:
                where = gpu_name(storm.index, sysfs_bus_id(storm.bus_id))
                problems.append(
                    Problem(
                        XID_CHECK,
                        REASON_XID_STORM,
                        f"{where}: Xid storm, {storm.count} of Xid "
                        f"{', '.join(map(str, sorted(storm.xids)))} (at least {rule.count} "
                        f"within {format_duration(rule.window)}), first {utc(storm.first)}, "
                        f"last {utc(storm.last)}; {storm_advice(storm.xids)}",
                    )
                )
        return tuple(problems)

    def _gpu_order(self, key: str) -> tuple[int, str]:
        indices = [seen.index for seen in self._held.get(key, {}).values()]
        indices += [storm.index for storm in self._storms.get(key, {}).values()]
        known = [index for index in indices if index is not None]
        return (min(known) if known else 1 << 30, key)

    def _release_held(self, now: float) -> None:
        hold = self._rules.hold
        if hold is None:
            return
        for uuid in [uuid for uuid, at in self._last_fatal.items() if now - at >= hold]:
            del self._last_fatal[uuid]
            self._held.pop(uuid, None)
            self._storms.pop(uuid, None)

    @staticmethod
    def _blind_spots(source: XidSource | None) -> str:
        """What the watcher cannot see, in words ("" when it sees every GPU)."""
        if source is None:
            return NO_WATCHER
        if source.start_error is not None:
            return f"the Xid watcher is not running: {source.start_error}"
        spots = [
            f"{gpu_name(gpu.gpu.index, sysfs_bus_id(gpu.gpu.bus_id))} is not watched ({gpu.error})"
            for gpu in source.unwatched
        ]
        if source.wait_error is not None:
            spots.append(f"waiting for Xid events fails ({source.wait_error})")
        return "; ".join(spots)
