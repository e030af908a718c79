"""The ``gfd`` console script's entry point (and ``python -m gfd``'s).

It makes SIGTERM (and SIGINT) stop gfd from its first line, pauses the garbage collector
(:mod:`gfd.base.startup_gc`) before anything else is imported, then hands over to
:func:`gfd.cli.main`, which does the rest.
"""

from __future__ import annotations

import _thread
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from gfd.base.startup_gc import pause_collector

#: The exit status of a stopped run (gfd.app.exit_status.EXIT_OK, not imported yet here).
STOPPED = 0
#: How long a stop leaves gfd to end by itself (gfd.app.signals.STOP_GRACE_SECONDS: the
#: README promises that a stop takes at most a second).
STOP_GRACE_SECONDS = 0.75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_stopping = False


def _stop(_signum: int, _frame: Any) -> None:
    """Until the run installs its own handlers (gfd.app.signals), and once it has put them
    back: a stop raises KeyboardInterrupt, which ends gfd with status 0 and runs its
    finally blocks. A KeyboardInterrupt can land anywhere, though, and Python does not
    always let it through: raised in a weakref callback of the import system it is
    printed and dropped (the stop storm saw a stopped agent run on), and raised while a
    class is made, in ``__set_name__``, it comes out as a RuntimeError. So the first stop
    also starts a countdown that ends the process with status 0 after
    :data:`STOP_GRACE_SECONDS`, whatever became of the exception."""
    global _stopping
    if not _stopping:
        _stopping = True
        # _thread and time are built in: nothing is imported inside a signal handler.
        _thread.start_new_thread(_exit_after_grace, ())
    raise KeyboardInterrupt


def _exit_after_grace() -> None:
    time.sleep(STOP_GRACE_SECONDS)
    import contextlib
    import os

    for stream in (sys.stdout, sys.stderr):
        # Ending anyway: a closed pipe changes nothing.
        with contextlib.suppress(Exception):
            stream.flush()

    os._exit(STOPPED)


def _drop_stray_interrupts(unraisable: Any) -> None:
    """A stop's KeyboardInterrupt that Python cannot raise (a weakref callback's) is not
    news: the countdown ends the process. Anything else is reported as Python does."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _stopping:
        return
    sys.__unraisablehook__(unraisable)


def main(run: Callable[[], int] | None = None) -> int:
    """Run ``gfd`` with the arguments of this process (``run``: what to run instead of
    :func:`gfd.cli.main`, for a test of the entry point's own promises)."""
    # From the first line of gfd's own code a stop ends gfd with status 0 (_stop), where
    # SIGTERM's default action killed it (status -15). The run installs its own handlers
    # later (gfd.app.signals) and puts these back when it ends. All inside the try: a
    # KeyboardInterrupt right after the handler is in place is a stop too.
    try:
        sys.unraisablehook = _drop_stray_interrupts
        for signum in STOP_SIGNALS:
            signal.signal(signum, _stop)
        pause_collector()
        if run is None:
            from gfd.cli import main as cli_main

            code = cli_main()
        else:
            code = run()
        return STOPPED if _stopping else code
    except BaseException:
        if _stopping:
            # Whatever the stop's exception became on its way up (a RuntimeError from
            # __set_name__, say), the process was asked to stop, and it does.
            return STOPPED
        raise
    finally:
        # The process is ending: a stop now changes nothing, and must not turn a finished
        # run's status into SIGINT's.
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        forget_caught_interrupt()


def forget_caught_interrupt() -> None:
    """Keep a stop that gfd caught from ending the process with SIGINT's status (-2).

    CPython (3.11 and 3.12: ``run_eval_code_obj`` in ``Python/pythonrun.c``) marks a
    KeyboardInterrupt that leaves code run by ``exec`` of a string as unhandled, even when
    a caller then catches it; at exit, ``python -m`` (not a script such as the ``gfd``
    console script) then kills itself with SIGINT. Start-up runs such code
    (``dataclasses`` and ``namedtuple`` build their methods with it), so under
    ``python -m gfd`` a SIGTERM there, caught and answered with status 0, still ended the
    process with -2: 13 of 400 stops in its first tenth of a second. Each such ``exec``
    clears the mark first; an empty one, once the handler is gone, clears it for good.
    """
    exec("")
