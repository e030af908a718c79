"""The ``xid`` check: a fatal critical Xid error on a GPU (``XidError``), from NVML events.

Each cycle it drains the run's Xid watcher (:class:`gfd.nvml.xid_events.XidWatcher`,
waiting on a thread of its own) and keeps, per GPU (by UUID) and Xid, how many arrived
and the first and last time. Which Xids are fatal is :class:`~gfd.health.check.EventRules`'
(``--health-fatal-xids``, ``--health-ignored-xids``: by default every Xid but an
application's faults 13, 31, 43, 45, 68 and 109, as NVIDIA's device plugin).

When it clears, the written rule: a fatal Xid holds its GPU failing for the life of the
gfd process, as the device plugin holds a device unhealthy until it restarts; with
``--health-event-hold`` the GPU is healthy again once that long has passed with no new
fatal Xid on it. Restarting gfd (after the GPU is reset or replaced) clears it: NVML does
not replay Xids from before gfd started, so a GPU still broken after a restart is for
the other checks (``gpu-lost``, ``memory``) to catch. The hold is timed on the check's
clock from the cycle that received the Xid; the message's times are when the watcher
received each one (UTC).

It cannot decide (never healthy or failing) what it cannot see: a run without a watcher
(a one-shot run: no event can arrive in one cycle), a watcher that could not start, a
GPU it could not register, waits that fail. What it remembers outlives a reload.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from gfd.config.values import XID_CHECK
from gfd.health.check import (
    CANNOT_DECIDE,
    FAILING,
    OK,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    gpu_name,
)
from gfd.pci import sysfs_bus_id

if TYPE_CHECKING:
    from gfd.nvml.xid_events import XidSource

REASON_XID = "XidError"

#: Why the check cannot decide in a run without a watcher.
NO_WATCHER = "no Xid events are watched in a one-shot run (none could arrive in one cycle)"


@dataclass
class _Seen:
    """One fatal Xid on one GPU: how often, and when (watcher's wall clock)."""

    index: int
    bus_id: str
    count: int
    first: float
    last: float


def utc(seconds: float) -> str:
    """Whole-second UTC time in ISO 8601: ``2026-12-04T07:10:05Z``."""
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class XidCheck:
    """Reports each GPU that had a fatal critical Xid, held by the written rule."""

    name: ClassVar[str] = XID_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_XID,)
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        self._rules = setup.events
        self._clock = setup.clock
        #: Per GPU UUID: the fatal Xids held, by Xid.
        self._held: dict[str, dict[int, _Seen]] = {}
        #: Per GPU UUID: when (check's clock) the last fatal Xid was received.
        self._last_fatal: dict[str, float] = {}
        if isinstance(previous, XidCheck):
            self._held = {
                uuid: {xid: replace(seen) for xid, seen in xids.items()}
                for uuid, xids in previous._held.items()
            }
            self._last_fatal = dict(previous._last_fatal)

    def observe(self, seen: Observation) -> CheckResult:
        source = self._rules.xid_events
        now = self._clock()
        if source is not None:
            # A cycle whose read failed has NVML down: no use starting the watcher then.
            for event in source.drain(start=seen.facts is not None):
                if not self._rules.fatal(event.xid):
                    continue
                gpu = event.gpu
                held = self._held.setdefault(gpu.uuid, {})
                known = held.get(event.xid)
                if known is None:
                    held[event.xid] = _Seen(gpu.index, gpu.bus_id, 1, event.at, event.at)
                else:
                    known.count += 1
                    known.last = event.at
                self._last_fatal[gpu.uuid] = now
        self._release_held(now)
        problems = tuple(
            Problem(
                XID_CHECK,
                REASON_XID,
                f"{gpu_name(known.index, sysfs_bus_id(known.bus_id))}: Xid {xid}, "
                f"{known.count} time{'s' if known.count != 1 else ''}, first "
                f"{utc(known.first)}, last {utc(known.last)}",
            )
            for held in sorted(self._held.values(), key=_gpu_order)
            for xid, known in sorted(held.items())
        )
        if problems:
            return CheckResult(XID_CHECK, FAILING, problems)
        note = self._blind_spots(source)
        if note:
            return CheckResult(XID_CHECK, CANNOT_DECIDE, note=note)
        return CheckResult(XID_CHECK, OK)

    def _release_held(self, now: float) -> None:
        hold = self._rules.hold
        if hold is None:
            return
        for uuid in [uuid for uuid, at in self._last_fatal.items() if now - at >= hold]:
            del self._last_fatal[uuid]
            self._held.pop(uuid, None)

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


def _gpu_order(held: dict[int, _Seen]) -> int:
    return min(known.index for known in held.values())
