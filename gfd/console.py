"""The ``gfd`` console script's entry point (and ``python -m gfd``'s).

It makes SIGTERM stop gfd as SIGINT does and pauses the garbage collector
(:mod:`gfd.startup_gc`) before anything else is imported, then hands over to
:func:`gfd.cli.main`, which does the rest.
"""

from __future__ import annotations

import signal

from gfd.startup_gc import pause_collector

#: The exit status of a stopped run (gfd.app.exit_status.EXIT_OK, not imported yet here).
STOPPED = 0


def main() -> int:
    """Run ``gfd`` with the arguments of this process."""
    # From the first line of gfd's own code, SIGTERM raises KeyboardInterrupt as SIGINT
    # does: a stop while gfd imports and parses ends it with status 0 and its finally
    # blocks run, where the default action killed it (status -15). The run installs its
    # own handlers later (gfd.app.signals) and puts these back when it ends.
    # All inside the try: a KeyboardInterrupt right after the handler is in place is a stop
    # too (outside, it reached the interpreter, which ends with SIGINT's status: the stop
    # storm saw it once in 200).
    try:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        pause_collector()
        from gfd.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return STOPPED
    finally:
        # The process is ending: a stop now changes nothing, and must not turn a finished
        # run's status into SIGINT's.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
