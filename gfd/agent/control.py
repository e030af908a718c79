"""Stop and reload requests: what the signal handlers set and the loop watches.

:class:`LoopControl` is the one place a SIGTERM/SIGINT (stop) or a SIGHUP or a changed
config file (reload) is recorded; the loop's sleep wakes on either at once.

A signal handler runs in the main thread between two of its bytecodes, wherever that is:
inside ``Event.wait``, say, holding the event's own lock. So what a handler calls takes no
lock (:meth:`LoopControl.stop_from_signal` sets a flag): a handler that set an event there
waited for its own thread forever, and so did the stop watchdog behind it (a periodic
agent that ignored SIGTERM, seen under load). The events are set by the stop watchdog's
thread, which the same signal wakes (``gfd.app.signals``). Work that
may be abandoned (reading the facts, computing the labels) runs inside
:meth:`LoopControl.interruptible`, where a stop raises :class:`StopRequested` instead of
waiting for the work to end.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class StopRequested(BaseException):
    """A stop signal ended interruptible work (:meth:`LoopControl.interruptible`).

    A BaseException, so that no ``except Exception`` of a cycle takes it for a failure.
    """


class LoopControl:
    """Stop and reload requests, set from signal handlers and watched by the loop."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.reload_requested = False
        #: Why the last reload was requested: "signal" (SIGHUP) or "config file changed".
        self.reload_reason = ""
        self._interruptible = False
        #: Set by a stop signal's handler, which may take no lock (see the module).
        self.stop_signalled = False

    @property
    def stop_requested(self) -> bool:
        """A stop was asked for: by a signal's handler, or through :meth:`request_stop`."""
        return self.stop_signalled or self.stop.is_set()

    def request_stop(self) -> None:
        self.stop.set()
        self.wake.set()

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """While inside, a stop signal ends the work at once: :meth:`stop_from_signal`
        raises :class:`StopRequested` wherever the main thread is.

        Only for work that publishes nothing and may be abandoned anywhere (reading the
        facts, computing labels): a cycle of a 128-GPU machine, or one whose NVML answers
        slowly, would otherwise outlast the second a stop may take. Work already asked to
        stop does not start.
        """
        if self.stop_requested:
            raise StopRequested
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def stop_from_signal(self) -> None:
        """What a SIGTERM/SIGINT handler does (in the main thread): note the stop, and end
        interruptible work in progress. Raises :class:`StopRequested` at most once. It takes
        no lock (see the module): the stop watchdog's thread sets the events."""
        self.stop_signalled = True
        if self._interruptible:
            self._interruptible = False
            raise StopRequested

    def request_reload(self, reason: str = "signal") -> None:
        self.reload_requested = True
        self.reload_reason = reason
        self.wake.set()

    def sleep(
        self,
        seconds: float | None,
        *,
        changed: Callable[[], bool] | None = None,
        poll_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Sleep until ``seconds`` pass (forever for None) or a stop/reload request.

        With ``changed``, it is asked every ``poll_seconds`` while sleeping; when it says
        True (the config file changed), a reload is requested and the sleep ends.
        """
        deadline = None if seconds is None else clock() + seconds
        while True:
            remaining = None if deadline is None else deadline - clock()
            if remaining is not None and remaining <= 0:
                break
            if changed is None:
                self.wake.wait(remaining)
                break
            step = poll_seconds if remaining is None else min(remaining, poll_seconds)
            if self.wake.wait(step):
                break
            if changed():
                self.reload_requested = True
                self.reload_reason = "config file changed"
                break
        self.wake.clear()
        if self.stop.is_set():
            self.wake.set()
