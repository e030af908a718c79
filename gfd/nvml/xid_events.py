"""Critical Xid events from NVML's event API, waited for on a thread of their own.

This module owns gfd's one use of NVML events: a :class:`XidWatcher` registers every GPU
for ``nvmlEventTypeXidCriticalError`` and waits in ``nvmlEventSetWait_v2`` on a daemon
thread, so a wait never holds up a cycle, a read or shutdown; each cycle takes what
arrived with :meth:`XidWatcher.drain`. Which Xids matter is not decided here (that is the
``xid`` health check's job, :mod:`gfd.health.checks.xid`): every critical Xid is handed
on, and to :attr:`XidWatcher.on_event` as it arrives (the Xid counter of the metrics).
:class:`XidSource` is what the check needs of a watcher.

Why a thread and its own NVML reference:

- NVML delivers an event only to a set that was registered when it happened; a cycle
  every minute would have to poll, and a long wait inside the cycle would delay the
  labels. On a real driver a wait does not slow other threads' NVML calls (measured on
  an H200 with driver 580.159.04: 2.73 µs per ``nvmlDeviceGetName`` alone, 2.79 µs while
  another thread waited; ``tests/records/real-gpu/``). ctypes releases the GIL for the
  wait, so Python threads run on too.
- ``nvmlInit``/``nvmlShutdown`` are reference counted, so the watcher's own ``nvmlInit``
  keeps its device handles and event set valid while the reader shuts its session down
  and opens a new one (after an error, or every ``FULL_READ_EVERY`` reads).
- One wait lasts at most :data:`DEFAULT_WAIT_MS`, which bounds how long :meth:`close`
  takes: the stop flag is checked between waits.

What the watcher cannot see it says, and the check reports it as "cannot decide", never
as healthy or failing: a GPU that cannot be registered (``NVML_ERROR_NOT_SUPPORTED`` on
GPUs without the event, or any other error) is in :attr:`XidWatcher.unwatched` with
NVML's error name; a wait that fails with anything but ``NVML_ERROR_TIMEOUT`` is
:attr:`XidWatcher.wait_error` until a wait succeeds or times out again (the thread backs
off one wait length between failures); a watcher that could not start (NVML not up yet,
no event set) keeps why in :attr:`XidWatcher.start_error` and tries again at each drain
that allows it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import pynvml

from gfd.base.errors import GfdError
from gfd.base.frozen import frozen_dataclass
from gfd.facts import Gpu
from gfd.nvml.calls import as_gfd_error, error_name, text
from gfd.nvml.library import library_lock, select_library

#: How long one ``nvmlEventSetWait_v2`` blocks (ms): bounds how long closing the watcher takes.
DEFAULT_WAIT_MS = 500
#: Events kept between two drains; beyond it the oldest are dropped and counted. A GPU in
#: an Xid storm sends thousands; what matters is that one arrived, and its counts.
MAX_PENDING_EVENTS = 4096
#: ``gpuInstanceId``/``computeInstanceId`` of an event on a whole GPU (nvml.h: 0xFFFFFFFF).
NO_INSTANCE = 0xFFFFFFFF

#: Where the library comes from: a path, None (the driver's ``libnvidia-ml.so.1``), or a
#: function giving either at each start (it may raise :class:`gfd.base.errors.NvmlError`).
LibraryPath = str | Path | None | Callable[[], str | Path | None]


@frozen_dataclass
class XidGpu:
    """A GPU as the watcher found it when it started: NVML index, PCI bus id, UUID."""

    index: int
    bus_id: str
    uuid: str


@frozen_dataclass
class UnwatchedGpu:
    """A GPU whose registration for critical Xid events failed, with NVML's error name."""

    gpu: XidGpu
    error: str


@frozen_dataclass
class XidEvent:
    """One critical Xid error, as NVML reported it and when gfd received it."""

    gpu: XidGpu
    xid: int
    #: Wall-clock seconds (the watcher's clock) when the wait returned the event.
    at: float
    #: The MIG GPU instance the error was reported on, or None for the whole GPU.
    gpu_instance: int | None = None


class XidSource(Protocol):
    """What the ``xid`` check needs of a watcher (:class:`XidWatcher`; tests give others)."""

    @property
    def start_error(self) -> str | None:
        """Why the watcher is not running (None: it is)."""
        ...

    @property
    def unwatched(self) -> tuple[UnwatchedGpu, ...]:
        """The GPUs whose Xids it cannot see."""
        ...

    @property
    def wait_error(self) -> str | None:
        """NVML's error name while its waits fail (None: they work)."""
        ...

    def drain(self, *, start: bool = True, gpus: Sequence[Gpu] = ()) -> tuple[XidEvent, ...]:
        """The events received since the last drain, oldest first; ``start``: a source
        that is not running may try to start first; ``gpus``: the cycle's GPUs (empty: its
        read failed), for a source that knows GPUs by address only (the kernel log)."""
        ...


class XidWatcher:
    """Waits for critical Xid events on all GPUs; :meth:`drain` hands over what arrived.

    ``library_path`` is the reader's (:data:`LibraryPath`); ``clock`` stamps events
    (wall-clock seconds); ``on_event`` hears of each event on the watcher's thread as it
    arrives (it must be quick and must not raise; it may be changed at any time);
    ``max_pending`` events wait for a drain at most, the oldest dropped beyond it.
    :meth:`start` raises :class:`gfd.base.errors.NvmlError` when NVML cannot be initialised
    or no event set can be made; a GPU that cannot be registered does not stop it (see
    :attr:`unwatched`).
    """

    def __init__(
        self,
        *,
        library_path: LibraryPath = None,
        wait_ms: int = DEFAULT_WAIT_MS,
        clock: Callable[[], float] = time.time,
        on_event: Callable[[XidEvent], None] | None = None,
        max_pending: int = MAX_PENDING_EVENTS,
    ) -> None:
        if wait_ms < 1:
            raise ValueError(f"wait_ms must be at least 1, not {wait_ms}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, not {max_pending}")
        self.max_pending = max_pending
        self.library_path = library_path
        self.wait_ms = wait_ms
        self.clock = clock
        self.on_event = on_event
        self.start_error: str | None = "not started yet (it starts once NVML answers)"
        self.unwatched: tuple[UnwatchedGpu, ...] = ()
        self.wait_error: str | None = None
        #: Events dropped because more than ``max_pending`` waited for a drain.
        self.dropped = 0
        self._watched: dict[int, XidGpu] = {}
        self._pending: list[XidEvent] = []
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._initialised = False

    @property
    def watched(self) -> tuple[XidGpu, ...]:
        """The GPUs whose critical Xids this watcher sees, by index."""
        return tuple(sorted(self._watched.values(), key=lambda gpu: gpu.index))

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Take an NVML reference, register every GPU, and start waiting.

        Raises :class:`gfd.base.errors.NvmlError` (kept in :attr:`start_error` too) when NVML
        cannot start or no event set can be made; nothing is left held then.
        """
        with library_lock:
            self.start_holding_lock()

    def start_holding_lock(self) -> None:
        """:meth:`start`, for a caller that holds :data:`~gfd.nvml.library.library_lock`:
        the reader, right after its session's nvmlInit, so that the GPUs are registered
        before its read asks them anything."""
        if self._thread is not None or self._closed:
            return
        try:
            self._start_locked()
        except GfdError as exc:
            self.start_error = str(exc)
            raise
        self.start_error = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._wait_loop, name="gfd-xid-events", daemon=True)
        self._thread.start()

    def drain(self, *, start: bool = True, gpus: Sequence[Gpu] = ()) -> tuple[XidEvent, ...]:
        """The events received since the last drain, oldest first. With ``start``, a
        watcher that is not running (not started yet, or it could not start) tries to
        start first; the caller passes False while NVML is known to be down. ``gpus`` is
        not needed: NVML names each event's GPU."""
        if start and self._thread is None and not self._closed:
            # Why it failed is kept in start_error, which the check reports.
            with contextlib.suppress(GfdError):
                self.start()
        with self._pending_lock:
            events, self._pending = tuple(self._pending), []
        return events

    def close(self) -> None:
        """Stop waiting (within one wait length), free the event set, drop the reference.
        A closed watcher does not start again."""
        self._closed = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        with library_lock:
            self._release()
        self.start_error = "closed"

    def _start_locked(self) -> None:
        library = self.library_path() if callable(self.library_path) else self.library_path
        select_library(library)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise as_gfd_error("nvmlInit", exc) from exc
        self._initialised = True
        try:
            self._register_all()
        except BaseException:
            self._release()
            raise

    def _register_all(self) -> None:
        self._event_set = _call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        count = _call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
        watched: dict[int, XidGpu] = {}
        unwatched = []
        for index in range(count):
            handle = _call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
            uuid = text(_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
            bus_id = text(_call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle).busId)
            gpu = XidGpu(index=index, bus_id=bus_id.upper(), uuid=uuid)
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set
                )
            except pynvml.NVMLError as exc:
                unwatched.append(UnwatchedGpu(gpu, error_name(int(exc.value))))
                continue
            watched[_address(handle)] = gpu
        self._watched = watched
        self.unwatched = tuple(unwatched)
        self.wait_error = None

    def _wait_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, self.wait_ms)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    self.wait_error = None
                    continue
                self.wait_error = error_name(int(exc.value))
                # A failing wait may return at once; do not spin on it.
                self._stop.wait(self.wait_ms / 1000)
                continue
            self.wait_error = None
            self._received(data)

    def _received(self, data: Any) -> None:
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self._watched.get(_address(data.device))
        if gpu is None:
            return
        instance = int(data.gpuInstanceId)
        event = XidEvent(
            gpu=gpu,
            xid=int(data.eventData),
            at=self.clock(),
            gpu_instance=None if instance == NO_INSTANCE else instance,
        )
        with self._pending_lock:
            if len(self._pending) >= self.max_pending:
                del self._pending[0]
                self.dropped += 1
            self._pending.append(event)
        listener = self.on_event
        if listener is not None:
            listener(event)

    def _release(self) -> None:
        if self._event_set is not None:
            # Shutting down: a failed free leaves nothing to act on; the reference still goes.
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        self._watched = {}
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def _call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise as_gfd_error(name, exc) from exc


def _address(handle: Any) -> int:
    """A device handle's address: the same GPU gives the same handle within a session."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
