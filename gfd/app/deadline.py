"""The one-shot run's bound: the time by which it gives up, whatever it is doing.

A one-shot run (a Job's pod, a script) must end in bounded time with one line that says
why, not retry an API server that refuses connections for minutes in silence.
``--oneshot-timeout`` (default :data:`gfd.config.DEFAULT_ONESHOT_TIMEOUT`, 30 s) bounds
the whole run, from its start to its exit, in two ways:

- the Kubernetes client gives up every operation by then
  (:meth:`gfd.kube_api.KubeClient.give_up_by`): its retries stop in time and a request's
  timeout is cut to what is left, so the sink fails with the server's own reason and the
  run's last line says it, naming the bound;
- :class:`OneshotDeadline`'s watchdog ends the process :data:`ONESHOT_GRACE_SECONDS`
  after the bound, for whatever else holds the run past it (an NVML call on a hung driver,
  a write to a stuck file system): one line, exit status 1, without further cleanup (the
  feature file is only ever replaced by a rename, an API write is a single request).

A periodic agent has no bound: it keeps retrying, and says so in its log.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from gfd.app.exit_status import EXIT_FAILED, error_line
from gfd.config import format_duration

#: How long past its bound a one-shot run may still take to end by itself (its sinks
#: reporting the failure they gave up on) before the watchdog ends it.
ONESHOT_GRACE_SECONDS = 2.0


def _write_stderr(line: str) -> None:
    # One system call: the main thread may hold any lock, the stderr object's included.
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())


class OneshotDeadline:
    """The bound of a one-shot run of ``seconds`` (None: unbounded), counted from now.

    With a bound, a watchdog thread ends the process ``grace`` seconds after it unless
    :meth:`close` came first; ``say`` writes its one line and ``exit_now`` ends the
    process (tests pass their own).
    """

    def __init__(
        self,
        seconds: float | None,
        *,
        grace: float = ONESHOT_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], object] = _write_stderr,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self.seconds = seconds
        #: The clock value by which the run gives up (None: never).
        self.at = None if seconds is None else clock() + seconds
        self._grace = grace
        self._say = say
        self._exit_now = exit_now
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if seconds is not None:
            self._thread = threading.Thread(
                target=self._watch, name="gfd-oneshot-deadline", daemon=True
            )
            self._thread.start()

    @property
    def why(self) -> str:
        """The bound in words, for the line of whatever gave up on it."""
        bound = "infinite" if self.seconds is None else format_duration(self.seconds)
        return f"the one-shot run's bound, --oneshot-timeout {bound}"

    def _watch(self) -> None:
        assert self.seconds is not None
        if self._done.wait(self.seconds + self._grace):
            return
        self._say(
            error_line(
                f"the one-shot run did not end within {format_duration(self.seconds)} "
                "(--oneshot-timeout): it is held by a call that does not return (NVML on a "
                "hung driver, a stuck file system); giving up"
            )
        )
        self._exit_now(EXIT_FAILED)

    def close(self) -> None:
        """The run ended: stand the watchdog down."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
