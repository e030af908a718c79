"""Xids from the kernel log: the ``NVRM: Xid`` lines the NVIDIA driver writes to ``/dev/kmsg``.

This module owns reading the kernel log's records (:class:`KernelLog`) and finding the
driver's Xid reports in them (:func:`parse_record`, :func:`parse_xid`). The driver logs
every Xid, whoever watches or not, so the kernel log holds the Xids that happened before
gfd started, during a restart or a DaemonSet upgrade, and on GPUs NVML cannot register for
events. How they join NVML's events, each Xid once, is :mod:`gfd.nvml.xid_feed`'s.

The format, as the kernel documents ``/dev/kmsg`` (``Documentation/ABI/testing/dev-kmsg``):
one record per ``read``, ``PRIORITY,SEQUENCE,MICROSECONDS,FLAGS[,...];TEXT`` and a newline,
then continuation lines that start with a space (``KEY=value``, skipped here); the
microseconds count from boot on the kernel's monotonic clock. A reader opening it starts
at the oldest record the ring buffer still holds; a record overwritten before it was read
makes that read fail with ``EPIPE`` (counted in :attr:`KernelLog.lost`); the end reads as
``EAGAIN`` without blocking. A regular file or a FIFO of the same lines reads the same way
(a test kernel log), without the one-record-per-read guarantee.

The driver's line (NVIDIA's Xid documentation; node-problem-detector-style rules and
gpud match the same): ``NVRM: Xid (PCI:0000:61:00): 79, pid=..., name=..., GPU has fallen
off the bus.``; older drivers write the address without ``PCI:``. The address is the GPU's
PCI domain, bus and device, without the function.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

from gfd.base.frozen import frozen_dataclass
from gfd.config.host import NODE_PATHS

#: The kernel's log device.
KERNEL_LOG = Path(NODE_PATHS.kernel_log)
#: Bytes asked of one read: a ``/dev/kmsg`` read fails with EINVAL when the buffer is
#: shorter than the record, and the kernel's longest is under 8 KiB.
READ_SIZE = 8192
#: The most records one call reads, so that a flood (or a huge file standing in for the
#: log) never stalls a cycle; the rest is read by the next calls.
MAX_RECORDS_PER_READ = 100_000
#: ``PRIORITY,SEQUENCE,MICROSECONDS,FLAGS[,more];TEXT``.
_RECORD = re.compile(r"(\d+),(\d+),(\d+),[^;]*;(.*)")
#: The driver's Xid line: the GPU's PCI domain, bus and device, then the Xid.
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\): "
    r"(\d+)\b"
)


@frozen_dataclass
class PciAddress:
    """A GPU's PCI domain, bus and device: what the driver's Xid line names."""

    domain: int
    bus: int
    device: int

    @classmethod
    def of(cls, bus_id: str) -> PciAddress | None:
        """The address of an NVML bus id (``00000000:61:00.0``) or a sysfs one; None if neither."""
        parts = bus_id.split(":")
        if len(parts) != 3:
            return None
        try:
            return cls(int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16))
        except ValueError:
            return None

    def nvml_bus_id(self) -> str:
        """NVML's form, function 0: ``00000000:61:00.0``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.0"


@frozen_dataclass
class KernelXid:
    """One Xid the driver logged: which GPU, which Xid, and when (wall-clock seconds)."""

    sequence: int
    address: PciAddress
    xid: int
    at: float


def parse_record(line: str) -> tuple[int, float, str] | None:
    """``(sequence, seconds since boot, text)`` of one record line; None for anything else
    (a continuation line, a line cut short)."""
    match = _RECORD.fullmatch(line)
    if match is None:
        return None
    return int(match.group(2)), int(match.group(3)) / 1e6, match.group(4)


def parse_xid(text: str) -> tuple[PciAddress, int] | None:
    """The GPU address and the Xid of a driver's ``NVRM: Xid`` text; None for other text."""
    match = _XID.search(text)
    if match is None:
        return None
    domain, bus, device, xid = match.groups()
    return PciAddress(int(domain, 16), int(bus, 16), int(device, 16)), int(xid)


class KernelLog:
    """Reads the Xids the kernel log holds, then those it gets, without blocking.

    ``path``: the log (``/dev/kmsg``, or a test's file or FIFO in its format). ``monotonic``
    and ``wall``: the clocks that turn a record's time since boot into wall-clock seconds
    (the kernel's clock is the monotonic one). The log is opened at the first :meth:`read`,
    and kept open: each read goes on from where the last stopped, so each record is read
    once in the life of the process. A log that cannot be opened is not tried again:
    :attr:`error` says why.
    """

    def __init__(
        self,
        path: str | Path = KERNEL_LOG,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.monotonic = monotonic
        self.wall = wall
        #: Why the log cannot be read (None: it can, or it has not been tried yet).
        self.error: str | None = None
        #: Records read so far, and those the kernel overwrote before they were read (``EPIPE``).
        self.records = 0
        self.lost = 0
        self._fd: int | None = None
        self._tried = False
        self._partial = b""
        self._last_sequence = -1

    @property
    def readable(self) -> bool:
        """Opened (or not tried yet) and not failed."""
        return self.error is None

    def open(self) -> bool:
        """Open the log now (a read opens it otherwise); False, with :attr:`error`, if it
        cannot be read."""
        return self._open()

    def read(self) -> tuple[KernelXid, ...]:
        """The Xid records logged since the last read (at first: all the log holds), in
        the order logged. Never raises: a log that fails is :attr:`error` from then on."""
        if not self._open():
            return ()
        assert self._fd is not None
        found: list[KernelXid] = []
        for _ in range(MAX_RECORDS_PER_READ):
            try:
                chunk = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                break
            except BrokenPipeError:
                # Overwritten before it was read: the next read gives the oldest kept.
                self.lost += 1
                continue
            except OSError as exc:
                self._fail(exc)
                break
            if not chunk:
                break
            found.extend(self._records(chunk))
        return tuple(found)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> bool:
        if self._fd is not None:
            return True
        if self._tried:
            return False
        self._tried = True
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self._fail(exc)
            return False
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            os.close(fd)
            self.error = f"{self.path}: not a kernel log (a character device, file or FIFO)"
            return False
        self._fd = fd
        return True

    def _fail(self, exc: OSError) -> None:
        self.close()
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        hint = ""
        if exc.errno in (errno.EPERM, errno.EACCES):
            hint = (
                " (reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict=1, and "
                "the container's device cgroup must allow /dev/kmsg)"
            )
        self.error = f"{self.path}: {reason}{hint}"

    def _records(self, chunk: bytes) -> list[KernelXid]:
        lines = (self._partial + chunk).split(b"\n")
        # A file or FIFO may cut a record; /dev/kmsg never does.
        self._partial = lines.pop()
        if len(self._partial) > READ_SIZE:
            self._partial = b""
        found = []
        for raw in lines:
            parsed = parse_record(raw.decode("utf-8", "replace"))
            if parsed is None:
                continue
            sequence, since_boot, text = parsed
            if sequence <= self._last_sequence:
                continue
            self._last_sequence = sequence
            self.records += 1
            xid = parse_xid(text)
            if xid is None:
                continue
            address, number = xid
            at = self.wall() - (self.monotonic() - since_boot)
            found.append(KernelXid(sequence, address, number, at))
        return found
