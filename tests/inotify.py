"""Linux inotify, as NFD's worker uses it (through Go's fsnotify), for tests to see what
a features directory's watcher sees.

:class:`DirectoryWatch` watches one directory with the mask fsnotify sets on Linux and
records every event with the time it was read (a reader thread blocks in ``select``, so
on an idle machine the stamp is within a millisecond of the kernel's; on a busy one it can
be late, so a test bounds a gap from above only generously). Events of the directory's
subdirectories' contents are not reported, exactly as for NFD: inotify is not recursive.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
#: fsnotify's mask on Linux (its Create, Write, Remove, Rename and Chmod ops).
FSNOTIFY_MASK = (
    IN_MOVED_TO
    | IN_MOVED_FROM
    | IN_CREATE
    | IN_ATTRIB
    | IN_MODIFY
    | IN_MOVE_SELF
    | IN_DELETE
    | IN_DELETE_SELF
)
_NAMES = {
    IN_MODIFY: "MODIFY",
    IN_ATTRIB: "ATTRIB",
    IN_MOVED_FROM: "MOVED_FROM",
    IN_MOVED_TO: "MOVED_TO",
    IN_CREATE: "CREATE",
    IN_DELETE: "DELETE",
    IN_DELETE_SELF: "DELETE_SELF",
    IN_MOVE_SELF: "MOVE_SELF",
}
_HEADER = struct.Struct("iIII")


@dataclass(frozen=True)
class Event:
    """One inotify event: its kind (``CREATE``, ``MOVED_TO``, ...), the entry's name,
    whether the entry is a directory, and ``time.monotonic()`` when it was read."""

    kind: str
    name: str
    is_dir: bool
    at: float


class DirectoryWatch:
    """Every event of one directory while the block runs (``with DirectoryWatch(d) as w``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd = -1
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> DirectoryWatch:
        self._fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        watch = self._libc.inotify_add_watch(
            self._fd, os.fsencode(self.directory), ctypes.c_uint32(FSNOTIFY_MASK)
        )
        if watch < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {self.directory}")
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop_reader()
        for fd in (self._fd, self._stop_r, self._stop_w):
            os.close(fd)

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._stop_r], [], [])
            stamp = time.monotonic()
            if self._fd in ready:
                self._decode(os.read(self._fd, 65536), stamp)
            if self._stop_r in ready:
                with_rest = True
                while with_rest:
                    try:
                        self._decode(os.read(self._fd, 65536), time.monotonic())
                    except BlockingIOError:
                        with_rest = False
                return

    def _decode(self, data: bytes, stamp: float) -> None:
        offset = 0
        found = []
        while offset < len(data):
            _wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            offset += _HEADER.size
            name = data[offset : offset + length].rstrip(b"\0").decode("utf-8", "replace")
            offset += length
            for bit, kind in _NAMES.items():
                if mask & bit:
                    found.append(Event(kind, name, bool(mask & IN_ISDIR), stamp))
        with self._lock:
            self._events.extend(found)

    def _stop_reader(self) -> None:
        if self._thread.is_alive():
            os.write(self._stop_w, b"x")
            # The reader drains what the kernel queued before it returns; joined without a
            # bound, since a reader that never returns would hang the test visibly anyway.
            self._thread.join()

    def events(self) -> list[Event]:
        """Every event of the block so far, and the watch ends: the reader is stopped
        after it has read all the kernel queued. An event is queued before the call that
        caused it returns, so none is missed however late the reader thread ran (a busy
        machine); only the times it stamped can be late."""
        self._stop_reader()
        with self._lock:
            return list(self._events)
