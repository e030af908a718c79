"""The console entry point's promise about stops: a SIGTERM before the run's own handlers
ends the process with status 0 and nothing on stderr, whatever code it interrupted and
whatever Python made of its KeyboardInterrupt (``gfd/console.py``). Each case runs under
``python -m``, as ``python -m gfd`` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.reliability.agent_process import ROOT

#: A stop that lands in code run by ``exec`` of a string, as dataclasses' and namedtuple's
#: while gfd imports, run under ``python -m`` as ``python -m gfd`` is.
STOPPED_INSIDE_EXEC = """
from gfd.console import main

def start_up():
    exec("import os, signal, time\\nos.kill(os.getpid(), signal.SIGTERM)\\ntime.sleep(5)\\n")
    return 3

raise SystemExit(main(run=start_up))
"""


def test_a_stop_caught_inside_exec_still_ends_the_process_with_status_0(
    tmp_path: Path,
) -> None:
    done = _run_as_module(tmp_path, "stopped_inside_exec", STOPPED_INSIDE_EXEC)
    # Without gfd.console.forget_caught_interrupt: -2 (SIGINT), and no word on stderr.
    assert (done.returncode, done.stderr) == (0, "")


#: A stop whose KeyboardInterrupt Python drops: raised in a weakref callback (as in the
#: import system's module locks), it is printed as "Exception ignored" and the run goes
#: on. The countdown ends the process all the same, with status 0 and nothing on stderr.
STOP_DROPPED = """
import os, signal, time, weakref
from gfd.console import main

class Thing:
    pass

def start_up():
    thing = Thing()
    def callback(_reference):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    kept = weakref.ref(thing, callback)
    del thing
    time.sleep(30)  # the run, going on as if nothing had been asked
    return 3

raise SystemExit(main(run=start_up))
"""

#: A stop that lands while a class is made: Python turns it into a RuntimeError.
STOP_TURNED_INTO_RUNTIME_ERROR = """
import os, signal
from gfd.console import main

class Named:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass

def start_up():
    class Owner:
        field = Named()
    return 3

raise SystemExit(main(run=start_up))
"""


def _run_as_module(tmp_path: Path, name: str, source: str) -> subprocess.CompletedProcess[str]:
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", name],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_stop_python_drops_still_ends_the_process_within_the_grace(tmp_path: Path) -> None:
    done = _run_as_module(tmp_path, "stop_dropped", STOP_DROPPED)
    # Without the countdown: the run goes on for its 30 s and ends with status 3.
    assert (done.returncode, done.stderr) == (0, "")


def test_a_stop_that_became_another_exception_is_still_a_stop(tmp_path: Path) -> None:
    done = _run_as_module(tmp_path, "stop_in_set_name", STOP_TURNED_INTO_RUNTIME_ERROR)
    # Without it: RuntimeError: Error calling __set_name__ ..., a traceback, status 1.
    assert (done.returncode, done.stderr) == (0, "")
