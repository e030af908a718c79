"""The one-shot run's bound (:mod:`gfd.app.deadline`): its watchdog, its default, and a
one-shot held by an NVML call that does not return."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gfd.app.deadline import ONESHOT_GRACE_SECONDS, OneshotDeadline
from gfd.app.exit_status import EXIT_FAILED
from gfd.config import DEFAULT_ONESHOT_TIMEOUT, OPTIONS_BY_NAME, Settings
from gfd.facts import dump_facts
from gfd.sim import load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_a_one_shot_run_gives_up_within_30_seconds_by_default() -> None:
    """Read from the settings, not by waiting: the issue's run sat silent for 107 s."""
    assert Settings().oneshot_timeout == DEFAULT_ONESHOT_TIMEOUT
    assert 0 < DEFAULT_ONESHOT_TIMEOUT + ONESHOT_GRACE_SECONDS <= 32
    assert DEFAULT_ONESHOT_TIMEOUT <= 30
    option = OPTIONS_BY_NAME["oneshot_timeout"]
    assert (option.flag, option.env, option.config_path) == (
        "--oneshot-timeout",
        ("GFD_ONESHOT_TIMEOUT",),
        ("flags", "gfd", "oneshotTimeout"),
    )


class Ended:
    """What the watchdog said and the status it ended the process with."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.statuses: list[int] = []
        self.done = threading.Event()

    def say(self, line: str) -> None:
        self.lines.append(line)

    def exit_now(self, status: int) -> None:
        self.statuses.append(status)
        self.done.set()


def test_the_watchdog_ends_a_run_held_past_its_bound_with_one_line() -> None:
    ended = Ended()
    deadline = OneshotDeadline(0.05, grace=0.05, say=ended.say, exit_now=ended.exit_now)
    assert ended.done.wait(5)
    deadline.close()
    assert ended.statuses == [EXIT_FAILED]
    assert ended.lines == [
        "gfd: error: the one-shot run did not end within 50ms (--oneshot-timeout): it is held "
        "by a call that does not return (NVML on a hung driver, a stuck file system); giving up"
    ]


def test_a_run_that_ends_in_time_stands_the_watchdog_down() -> None:
    ended = Ended()
    deadline = OneshotDeadline(0.2, grace=0.0, say=ended.say, exit_now=ended.exit_now)
    deadline.close()
    time.sleep(0.4)
    assert (ended.lines, ended.statuses) == ([], [])


def test_no_bound_no_watchdog() -> None:
    deadline = OneshotDeadline(None)
    assert deadline.at is None
    assert deadline.why == "the one-shot run's bound, --oneshot-timeout infinite"
    deadline.close()


def test_a_one_shot_held_by_a_hung_nvml_call_ends_at_its_bound(tmp_path: Path) -> None:
    """An NVML call that takes ten minutes (the simulator's delay fault): the run ends at
    its bound plus the grace, with one line, instead of hanging the Job."""
    profile = tmp_path / "hung.yaml"
    profile.write_text(
        dump_facts(load_profile("t4-single").facts)
        + "faults:\n  delays:\n  - {call: nvmlDeviceGetName, seconds: 600}\n"
    )
    command = [sys.executable, "-m", "gfd", "--simulate", str(profile), "--oneshot"]
    command += ["--oneshot-timeout", "1s", "--health-checks", "none", "-o", str(tmp_path / "gfd")]
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("GFD_")}
    started = time.monotonic()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**env, "TMPDIR": str(temporary)},
    )
    took = time.monotonic() - started
    assert done.returncode == EXIT_FAILED, done.stderr
    assert done.stderr.splitlines() == [
        "gfd: error: the one-shot run did not end within 1s (--oneshot-timeout): it is held "
        "by a call that does not return (NVML on a hung driver, a stuck file system); giving up"
    ]
    # The bound, the grace, and a process's start: far from the call's ten minutes.
    assert took < 1 + ONESHOT_GRACE_SECONDS + 10
    assert not (tmp_path / "gfd").exists()
    # The watchdog's exit runs no finally block: it removes the simulated machine itself.
    assert sorted(temporary.iterdir()) == []


def test_a_one_shot_that_fails_before_it_runs_leaves_no_watchdog_behind(tmp_path: Path) -> None:
    """A metrics address refused as the run is assembled: the bound's watchdog stands down
    with the run, or it would end the process that called gfd half a minute later."""
    import contextlib
    import io

    from tests.host import gfd_main as main

    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(
            ["--simulate", "t4-single", "--oneshot", "-o", str(tmp_path / "gfd")],
            env={"GFD_METRICS_ADDRESS": "nonsense"},
            stdout=io.StringIO(),
        )
    assert code == 2, err.getvalue()
    assert "--metrics-address 'nonsense'" in err.getvalue()
    assert "gfd-oneshot-deadline" not in {thread.name for thread in threading.enumerate()}
