"""The garbage collector's pause while gfd starts (:mod:`gfd.base.startup_gc`).

Each case runs in a fresh interpreter: freezing the collector's generations is for the
life of a process, and this one is the test runner's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PAUSE_AND_RESUME = """
import gc, weakref
from gfd.base.startup_gc import pause_collector, resume_collector
resume_collector(collect_first=True)  # nothing paused yet: the host's is left alone
assert gc.isenabled() and gc.get_freeze_count() == 0
pause_collector()
assert not gc.isenabled()
class Cycle:
    pass
def cyclic_garbage():
    garbage = Cycle()
    garbage.me = garbage
    return weakref.ref(garbage)
collected = cyclic_garbage()
resume_collector(collect_first=True)
assert gc.isenabled() and gc.get_freeze_count() > 0, "start-up's objects frozen"
assert collected() is None, "start-up's garbage collected, not frozen for life"
pause_collector()
kept = cyclic_garbage()
resume_collector(collect_first=False)
assert kept() is not None, "a one-shot run does not pay for a collection"
"""

NOT_OURS = """
import gc
from gfd.base.startup_gc import pause_collector, resume_collector
gc.disable()  # the host paused it itself: resuming is the host's business
pause_collector()
resume_collector(collect_first=False)
assert not gc.isenabled() and gc.get_freeze_count() == 0
"""

#: The console entry point, as the ``gfd`` script calls it, then the collector's state.
CONSOLE_RUN = """
import gc, sys
from gfd.console import main
code = main()
print("CODE", code, "ENABLED", gc.isenabled(), "FROZEN", gc.get_freeze_count() > 0)
"""


def _python(code: str, *arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_resume_undoes_only_the_pause_this_module_made() -> None:
    _python(PAUSE_AND_RESUME)
    _python(NOT_OURS)


def test_a_run_resumes_the_collector_before_its_cycle(tmp_path: Path) -> None:
    """Frozen generations prove both halves: only a pause made by the entry point is
    resumed, and resuming freezes."""
    out = tmp_path / "gfd"
    arguments = ["--simulate", "t4-single", "--oneshot", "--no-timestamp", "-o", str(out)]
    assert _python(CONSOLE_RUN, *arguments).split() == [
        "CODE", "0", "ENABLED", "True", "FROZEN", "True",
    ]  # fmt: skip
    assert "nvidia.com/gpu.count=1" in out.read_text().splitlines()


def test_doctor_resumes_it_and_a_read_once_command_ends_with_it_paused() -> None:
    """``doctor`` (like ``cleanup``) may page through a large cluster: it runs with the
    collector on. ``labels`` reads the node once and ends."""
    doctor = _python(CONSOLE_RUN, "doctor", "--simulate", "t4-single").split()
    assert doctor[-4:] == ["ENABLED", "True", "FROZEN", "True"]
    labels = _python(CONSOLE_RUN, "labels", "--simulate", "t4-single").split()
    assert "nvidia.com/gpu.count=1" in labels
    assert labels[-6:] == ["CODE", "0", "ENABLED", "False", "FROZEN", "False"]
