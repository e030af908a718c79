"""The run's signals: SIGTERM and SIGINT stop it, SIGHUP reloads its configuration; and the
watchdog that ends a stopped run within a second whatever the main thread is doing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gfd.app.exit_status import EXIT_OK

if TYPE_CHECKING:
    from gfd.agent import LoopControl


def install_signal_handlers(control: LoopControl) -> dict[int, Any]:
    """Route the stop and reload signals to ``control``; returns the handlers they replaced.

    The handlers take no lock (``gfd.agent.control`` says why): a stop's only notes it and
    ends interruptible work, a reload's does nothing. What either asks of the loop (its
    events set, its sleep woken) is done by :class:`StopWatchdog`'s thread, which each
    signal wakes: make the watchdog first.
    """
    previous: dict[int, Any] = {}

    def stop(_signum: int, _frame: Any) -> None:
        # Raises StopRequested when a cycle is reading or computing: it ends at once.
        control.stop_from_signal()

    def reload(_signum: int, _frame: Any) -> None:
        """Handled, so that SIGHUP does not end the process; the watchdog's thread asks
        for the reload."""

    for signum, handler in ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, reload)):
        previous[signum] = signal.signal(signum, handler)
    return previous


def restore_signal_handlers(previous: Mapping[int, Any]) -> None:
    """Give back the handlers :func:`install_signal_handlers` replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)


#: How long a stop signal leaves the main thread to finish before the process ends
#: anyway: the README promises that a stop takes at most a second.
STOP_GRACE_SECONDS = 0.75


class StopWatchdog:
    """Carries the run's signals to the loop, and ends the process when the main thread
    has not obeyed a stop signal in time.

    Python runs signal handlers in the main thread, between two bytecodes: a main thread
    inside one long call into C (NVML on a hung or slowly initialising driver, a blocking
    system call) would see SIGTERM only when the call returns, which may be never. The
    interpreter's own C-level handler also writes each signal's number to a pipe
    (``signal.set_wakeup_fd``) at once, whatever the main thread does; this thread reads
    it, sets the stop event (or, for SIGHUP, asks for a reload: the handlers themselves take
    no lock), and if the run has not ended ``grace`` seconds later writes
    one log line and exits with status 0 (a requested stop, as the loop's own) without
    further cleanup. That is safe for what gfd publishes: the feature file is only ever
    replaced by a rename, and API writes are single requests.
    """

    def __init__(
        self,
        control: LoopControl,
        *,
        grace: float = STOP_GRACE_SECONDS,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self._control = control
        self._grace = grace
        self._exit_now = exit_now
        self._done = threading.Event()
        #: A stop signal came: from then on only the process's end stands the watchdog down.
        self._stopping = threading.Event()
        self._read, self._write = os.pipe()
        # The C-level handler must never block; a full pipe only drops a byte.
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="gfd-stop-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        stops = {int(signal.SIGTERM), int(signal.SIGINT)}
        while True:
            try:
                received = os.read(self._read, 64)
            except OSError:
                return
            if not received:
                return  # closed: the run is over
            if stops.isdisjoint(received):
                if int(signal.SIGHUP) in received:
                    self._control.request_reload()
                continue
            self._stopping.set()
            # On a thread of its own: the countdown must not wait for an event's lock.
            threading.Thread(
                target=self._control.request_stop, name="gfd-stop-request", daemon=True
            ).start()
            if self._done.wait(self._grace):
                return
            self._say_stopping_now()
            self._exit_now(EXIT_OK)
            return

    def _say_stopping_now(self) -> None:
        """One log line, written with one system call: the main thread may hold any lock."""
        from gfd.base.logs import get_logger, rendered_line

        if not get_logger().is_enabled_for("warning"):
            return
        event = (
            f"stopping now: still busy {self._grace} s after the stop signal "
            "(a call that cannot be interrupted, such as NVML on a hung driver)"
        )
        line = rendered_line("warning", event) or f"gfd: warning: {event}"
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode())

    def close(self) -> None:
        """The run is over: stop watching, give the wakeup descriptor back.

        After a stop signal the countdown goes on: what runs after the loop (closing
        readers, sinks, the metrics endpoint, the interpreter's own exit) is held to the
        same second as the loop itself; a process that ends sooner ends the thread too.
        """
        signal.set_wakeup_fd(self._previous)
        if self._control.stop_requested and self._thread.is_alive():
            # A stop signal came. The main thread's handler may have run before this
            # thread read the signal's byte: then the countdown has not begun, and must
            # not be stood down (a process held after the loop, in the interpreter's
            # exit say, would wait for no one). A byte of our own makes sure it begins.
            if not self._stopping.is_set():
                with contextlib.suppress(OSError):
                    os.write(self._write, bytes([signal.SIGTERM]))
            return
        self._done.set()
        os.close(self._write)
        self._thread.join(timeout=self._grace)
        os.close(self._read)
