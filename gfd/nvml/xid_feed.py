"""The run's Xids from both places the driver reports them, each Xid once: NVML's events and the
kernel log.

This module owns :class:`XidFeed`, the :class:`~gfd.nvml.xid_events.XidSource` the ``xid``
check drains when the kernel log is read. NVML delivers an Xid only to an event set
registered when it happened; the kernel log (:class:`gfd.nvml.kernel_xids.KernelLog`) holds
every Xid since boot that its ring buffer still keeps. So the feed hands the check:

- every NVML event, as the watcher received it;
- every Xid line of the kernel log that NVML did not also deliver: a line is the same Xid
  as an event when it names the same GPU (PCI domain, bus and device) and the same Xid,
  logged within :data:`SAME_XID_SECONDS` of the event's arrival, and neither was matched
  before (so a storm of one Xid is matched one for one, not collapsed);
- a line naming a GPU that NVML does not list (one that fell off the bus) as a GPU known
  by its address alone (index -1, no UUID), so an Xid 79 of a GPU gone is still reported.

What "since the last one gfd handled" means: within a process, each record of the log is
read once, from the oldest the ring buffer holds when gfd starts. Across a restart or a
DaemonSet upgrade nothing is stored: the new process reads the log again from the oldest
record kept since boot, and the ``xid`` check applies its hold to when each Xid happened
(its kernel timestamp), so an Xid logged during the restart or before gfd started is
reported, a GPU held failing stays held (with the default hold, until the node reboots
and its log starts afresh), and one held for ``--health-event-hold`` stays held only for
what is left of it. Limits: the ring buffer is finite (an Xid overwritten before gfd reads
it is gone, and a flood of other kernel messages overwrites sooner); records are read
only where the log is readable (``docs/health.md``).

The kernel log's lines are mapped to GPUs by the facts of the cycle that drains them; they
wait (at most :data:`MAX_WAITING` of them) while the read fails.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gfd.facts import Gpu
from gfd.nvml.kernel_xids import KernelLog, KernelXid, PciAddress

if TYPE_CHECKING:
    # The watcher's module, imported only where an Xid is handed on (_xid_event): a
    # one-shot run, which starts no watcher, imports it only for a kernel log's Xid.
    from gfd.nvml.xid_events import UnwatchedGpu, XidEvent, XidGpu, XidSource

#: How far apart (seconds) the kernel's timestamp of an Xid and NVML's arrival of it may be.
SAME_XID_SECONDS = 10.0
#: How long (wall-clock seconds) an Xid is kept to match its twin from the other place.
MATCH_WINDOW_SECONDS = 600.0
#: Xids kept for matching, and kernel Xids waiting for a cycle with facts: bounds.
MAX_RECENT = 4096
MAX_WAITING = 4096


@dataclass
class _Recent:
    """An Xid handed on, kept to match its twin from the other place."""

    from_kernel: bool
    address: PciAddress | None
    xid: int
    at: float
    matched: bool = False


class XidFeed:
    """NVML's Xid events (``events``: the watcher, or None in a one-shot run) joined with the
    kernel log's (``kernel``), each Xid once. ``on_event`` hears each Xid of the kernel log
    handed on (NVML's are heard by the watcher); ``wall`` prunes what is kept for matching."""

    def __init__(
        self,
        events: XidSource | None,
        kernel: KernelLog,
        *,
        on_event: Callable[[XidEvent], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.events = events
        self.kernel = kernel
        self.on_event = on_event
        self.wall = wall
        self._recent: deque[_Recent] = deque(maxlen=MAX_RECENT)
        self._waiting: deque[KernelXid] = deque(maxlen=MAX_WAITING)

    @property
    def start_error(self) -> str | None:
        if self.events is None:
            return None
        return self.events.start_error

    @property
    def unwatched(self) -> tuple[UnwatchedGpu, ...]:
        # The kernel log reports every GPU's Xids, registered for NVML's events or not.
        return ()

    @property
    def wait_error(self) -> str | None:
        return None if self.events is None else self.events.wait_error

    def drain(self, *, start: bool = True, gpus: Sequence[Gpu] = ()) -> tuple[XidEvent, ...]:
        """NVML's events since the last drain, then the kernel log's Xids they do not repeat,
        in the order they happened. ``gpus``: the cycle's GPUs, which the kernel's lines
        name by PCI address (none: the read failed, and the lines wait)."""
        handed: list[XidEvent] = []
        if self.events is not None:
            for event in self.events.drain(start=start):
                if self._admit(False, PciAddress.of(event.gpu.bus_id), event.xid, event.at):
                    handed.append(event)
        self._waiting.extend(self.kernel.read())
        if gpus:
            by_address = {PciAddress.of(gpu.bus_id): gpu for gpu in gpus}
            while self._waiting:
                line = self._waiting.popleft()
                if not self._admit(True, line.address, line.xid, line.at):
                    continue
                event = _xid_event(_gpu_at(line.address, by_address), line)
                handed.append(event)
                if self.on_event is not None:
                    self.on_event(event)
        self._prune()
        return tuple(sorted(handed, key=lambda event: event.at))

    def close(self) -> None:
        self.kernel.close()

    def _admit(self, from_kernel: bool, address: PciAddress | None, xid: int, at: float) -> bool:
        """Whether an Xid is news: False when it is the twin of one the other place gave."""
        for seen in self._recent:
            if (
                seen.from_kernel != from_kernel
                and not seen.matched
                and seen.xid == xid
                and seen.address == address
                and abs(seen.at - at) <= SAME_XID_SECONDS
            ):
                seen.matched = True
                return False
        self._recent.append(_Recent(from_kernel, address, xid, at))
        return True

    def _prune(self) -> None:
        oldest = self.wall() - MATCH_WINDOW_SECONDS
        self._recent = deque(
            (seen for seen in self._recent if seen.at >= oldest), maxlen=MAX_RECENT
        )


def _xid_event(gpu: XidGpu, line: KernelXid) -> XidEvent:
    from gfd.nvml.xid_events import XidEvent

    return XidEvent(gpu=gpu, xid=line.xid, at=line.at)


def _gpu_at(address: PciAddress, gpus: dict[PciAddress | None, Gpu]) -> XidGpu:
    from gfd.nvml.xid_events import XidGpu

    gpu = gpus.get(address)
    if gpu is None:
        # A GPU NVML does not list (fallen off the bus): known by its address alone.
        return XidGpu(index=-1, bus_id=address.nvml_bus_id(), uuid="")
    return XidGpu(index=gpu.index, bus_id=gpu.bus_id, uuid=gpu.uuid)
