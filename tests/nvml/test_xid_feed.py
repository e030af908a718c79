"""The run's Xids from NVML's events and the kernel log, each once (gfd.nvml.xid_feed): an Xid
both report is handed on once, a storm is matched one for one, the kernel's Xids of
before gfd started are handed on, a GPU NVML no longer lists is named by its address, and
the kernel's lines wait for a cycle whose read worked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gfd.facts import Gpu
from gfd.nvml.kernel_xids import KernelLog
from gfd.nvml.xid_events import UnwatchedGpu, XidEvent, XidGpu
from gfd.nvml.xid_feed import SAME_XID_SECONDS, XidFeed
from tests.factories import make_facts, make_gpu

BOOTED_AT = 1_796_000_000.0
GPUS = make_facts([make_gpu(i) for i in range(4)]).gpus


@dataclass
class Events:
    """NVML's events as the test hands them in."""

    arriving: list[XidEvent] = field(default_factory=list)
    start_error: str | None = None
    unwatched: tuple[UnwatchedGpu, ...] = ()
    wait_error: str | None = None

    def drain(self, *, start: bool = True, gpus: Sequence[Gpu] = ()) -> tuple[XidEvent, ...]:
        events, self.arriving = tuple(self.arriving), []
        return events


class Kernel:
    """A kernel log file, written as the test goes, read on a clock of the test's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")
        self.sequence = 0
        self.since_boot = 1000.0
        self.log = KernelLog(
            path, monotonic=lambda: self.since_boot, wall=lambda: BOOTED_AT + self.since_boot
        )

    def xid(self, bus: str, xid: int, seconds_since_boot: float) -> None:
        self.sequence += 1
        with self.path.open("a") as log:
            log.write(
                f"4,{self.sequence},{int(seconds_since_boot * 1e6)},-;NVRM: Xid (PCI:{bus}): "
                f"{xid}, pid='<unknown>', name=<unknown>, text\n"
            )


def nvml(index: int, xid: int, since_boot: float) -> XidEvent:
    gpu = GPUS[index]
    return XidEvent(XidGpu(index, gpu.bus_id, gpu.uuid), xid, BOOTED_AT + since_boot)


def feed_of(tmp_path: Path, events: Events | None) -> tuple[XidFeed, Kernel]:
    kernel = Kernel(tmp_path / "kmsg")
    heard: list[XidEvent] = []
    feed = XidFeed(
        events, kernel.log, on_event=heard.append, wall=lambda: BOOTED_AT + kernel.since_boot
    )
    return feed, kernel


def test_an_xid_both_report_is_handed_on_once(tmp_path: Path) -> None:
    events = Events()
    feed, kernel = feed_of(tmp_path, events)
    # GPU 2 is at 0000:1d:00.0 (make_gpu): the kernel names it without the function.
    kernel.xid("0000:1d:00", 79, 999.5)
    events.arriving = [nvml(2, 79, 999.8)]
    handed = feed.drain(gpus=GPUS)
    assert [(e.gpu.index, e.xid) for e in handed] == [(2, 79)]
    assert handed[0].gpu.uuid == GPUS[2].uuid


def test_the_twin_may_come_a_cycle_later_from_either_place(tmp_path: Path) -> None:
    events = Events()
    feed, kernel = feed_of(tmp_path, events)
    kernel.xid("0000:1b:00", 48, 999.0)
    assert [e.xid for e in feed.drain(gpus=GPUS)] == [48]
    events.arriving = [nvml(0, 48, 999.2)]
    assert feed.drain(gpus=GPUS) == ()
    events.arriving = [nvml(1, 94, 1000.0)]
    assert [e.xid for e in feed.drain(gpus=GPUS)] == [94]
    kernel.xid("0000:1c:00", 94, 1000.1)
    assert feed.drain(gpus=GPUS) == ()


def test_a_storm_is_matched_one_for_one(tmp_path: Path) -> None:
    events = Events()
    feed, kernel = feed_of(tmp_path, events)
    for i in range(5):
        kernel.xid("0000:1b:00", 13, 990.0 + i * 0.1)
    events.arriving = [nvml(0, 13, 990.0 + i * 0.1) for i in range(3)]
    # Three NVML delivered, five the kernel logged: five in all.
    assert len(feed.drain(gpus=GPUS)) == 5


def test_xids_far_apart_in_time_or_of_other_gpus_are_not_twins(tmp_path: Path) -> None:
    events = Events()
    feed, kernel = feed_of(tmp_path, events)
    kernel.xid("0000:1b:00", 79, 999.0 - SAME_XID_SECONDS - 1)
    kernel.xid("0000:1c:00", 79, 999.0)
    events.arriving = [nvml(0, 79, 999.0)]
    handed = feed.drain(gpus=GPUS)
    assert [(e.gpu.index, e.xid) for e in handed] == [(0, 79), (0, 79), (1, 79)]


def test_xids_logged_before_gfd_started_are_handed_on_in_the_order_they_happened(
    tmp_path: Path,
) -> None:
    feed, kernel = feed_of(tmp_path, None)  # a one-shot run: no watcher
    kernel.xid("0000:1e:00", 79, 10.0)
    kernel.xid("0000:1b:00", 13, 5.0)
    handed = feed.drain(gpus=GPUS)
    assert [(e.gpu.index, e.xid, e.at) for e in handed] == [
        (0, 13, BOOTED_AT + 5.0),
        (3, 79, BOOTED_AT + 10.0),
    ]
    assert (feed.start_error, feed.unwatched, feed.wait_error) == (None, (), None)


def test_a_gpu_nvml_no_longer_lists_is_named_by_its_address(tmp_path: Path) -> None:
    feed, kernel = feed_of(tmp_path, Events())
    kernel.xid("0000:df:00", 79, 999.0)
    (event,) = feed.drain(gpus=GPUS)
    assert (event.gpu.index, event.gpu.bus_id, event.gpu.uuid) == (-1, "00000000:DF:00.0", "")


def test_the_kernels_lines_wait_for_a_cycle_whose_read_worked(tmp_path: Path) -> None:
    feed, kernel = feed_of(tmp_path, Events())
    kernel.xid("0000:1b:00", 79, 999.0)
    assert feed.drain(start=False, gpus=()) == ()
    assert [e.xid for e in feed.drain(gpus=GPUS)] == [79]
    assert feed.drain(gpus=GPUS) == ()


def test_gpus_nvml_cannot_watch_are_watched_through_the_kernel_log(tmp_path: Path) -> None:
    unwatched = (UnwatchedGpu(XidGpu(0, GPUS[0].bus_id, GPUS[0].uuid), "NVML_ERROR_NOT_SUPPORTED"),)
    feed, _ = feed_of(tmp_path, Events(unwatched=unwatched, wait_error="NVML_ERROR_UNKNOWN"))
    assert feed.unwatched == ()
    # A wait that fails is still said: NVML's own events are not arriving.
    assert feed.wait_error == "NVML_ERROR_UNKNOWN"


def test_the_metrics_hear_each_xid_of_the_kernel_log_it_hands_on(tmp_path: Path) -> None:
    """NVML's events are heard by the watcher as they arrive; the feed tells the metrics of
    the kernel's Xids it hands on, not of those NVML delivered too."""
    kernel = Kernel(tmp_path / "kmsg")
    heard: list[XidEvent] = []
    events = Events()
    feed = XidFeed(events, kernel.log, on_event=heard.append)
    kernel.xid("0000:1b:00", 79, 999.0)
    kernel.xid("0000:1c:00", 48, 999.0)
    events.arriving = [nvml(0, 79, 999.0)]
    feed.drain(gpus=GPUS)
    assert [(e.gpu.index, e.xid) for e in heard] == [(1, 48)]
