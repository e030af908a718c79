"""What makes gfd a drop-in under the GPU Operator, without the operator: the process
name NVIDIA's config-manager looks for, and noticing a changed config file unsignalled.
(With config-manager itself and a real API server: tests/realkube/test_gpu_operator.py.)

How config-manager finds the process to signal is held to what a build of it showed,
``tests/records/config-manager/process-lookup.json`` (recorded by
``tests/conformance/record_config_manager.py``): which command lines it found, and gfd's own
command line, started as the operator starts it and with ``python -m gfd``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gfd.agent import LoopControl
from gfd.app.config_watch import ConfigFileWatch
from gfd.app.process_title import OPERATOR_COMMAND, name_process
from tests.conformance.record_config_manager import (
    PROCESS_TO_SIGNAL,
    RECORD,
    RERECORD,
    all_cases,
    case_sha256,
)
from tests.records.store import load_record, recorded_case
from tests.reliability.agent_process import AgentProcess, parse_label_lines

ROOT = Path(__file__).resolve().parents[1]
TIME_SLICING_2 = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "      - name: nvidia.com/gpu\n        replicas: 2\n"
)


@pytest.mark.parametrize(
    ("argv0", "expected"),
    [
        ("/usr/bin/gpu-feature-discovery", True),
        ("gpu-feature-discovery", True),
        ("/opt/gfd/bin/gfd", False),
        ("/usr/bin/python3", False),
        ("gpu-feature-discovery.py", False),
    ],
)
def test_the_title_is_set_only_under_the_operators_name(argv0: str, expected: bool) -> None:
    titles: list[str] = []
    assert name_process(argv0, set_title=titles.append) is expected
    assert titles == ([OPERATOR_COMMAND] if expected else [])
    # The title is a command line config-manager found (its record), and the process name
    # it looks for under the operator.
    assert OPERATOR_COMMAND == PROCESS_TO_SIGNAL
    assert config_manager_found("stand-in:bare-name") == [OPERATOR_COMMAND, "600"]


def recorded(case_id: str) -> dict[str, Any]:
    """config-manager's recorded case, if its inputs are still the recorder's."""
    return recorded_case(RECORD, case_id, case_sha256(all_cases()[case_id]), RERECORD)


def config_manager_found(case_id: str) -> list[str] | None:
    """The command line config-manager found and signalled in ``case_id``, or None."""
    case = recorded(case_id)
    return list(case["cmdline"]) if case["config_manager_sent_signal"] else None


def config_manager_finds(cmdline: list[str]) -> bool:
    """config-manager's lookup as modelled here: argv[0] equals the name, exactly."""
    return bool(cmdline) and cmdline[0] == PROCESS_TO_SIGNAL


def test_the_lookup_model_is_what_config_manager_did() -> None:
    """Every recorded case: found exactly when argv[0] is the name; found means signalled."""
    record = load_record(RECORD)
    assert sorted(record.cases) == sorted(all_cases()), f"the case list changed: {RERECORD}"
    for case_id in record.cases:
        case = recorded(case_id)
        found = bool(case["config_manager_sent_signal"])
        assert config_manager_finds(list(case["cmdline"])) == found, case_id
        assert bool(case["candidate_got_sighup"]) == found, case_id
        assert (case["config_manager_exit"] == 0) == found, case_id
    # What the stand-ins show: an absolute or relative path, a suffix, a trailing space, or
    # the interpreter first are all missed; only the bare name is found.
    assert [c for c in record.cases if c.startswith("stand-in:") and
            record.cases[c]["config_manager_sent_signal"]] == ["stand-in:bare-name"]  # fmt: skip


def argv_of(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode() for part in raw.split(b"\0") if part]


@pytest.mark.slow
@pytest.mark.parametrize("start", ["operator", "module"])
def test_gfd_is_found_by_config_manager_as_recorded(tmp_path: Path, start: str) -> None:
    """config-manager compares argv[0] of /proc/PID/cmdline exactly; a console script's
    argv[0] is the interpreter unless gfd renames itself. gfd's command line now must be
    found (or not) as config-manager found it in the record."""
    case = recorded(f"gfd:{start}")
    if start == "operator":
        command = shutil.which(OPERATOR_COMMAND, path=str(Path(sys.executable).parent))
        assert command, f"{OPERATOR_COMMAND} is not installed beside {sys.executable}"
        argv = [command]
    else:
        argv = [sys.executable, "-m", "gfd"]
    agent = subprocess.Popen(
        [*argv, "--simulate", "t4-single", "--output-file", str(tmp_path / "gfd")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "gfd").exists() and time.monotonic() < deadline:
            assert agent.poll() is None
            time.sleep(0.05)
        seen = argv_of(agent.pid)
        assert config_manager_finds(seen) == case["config_manager_sent_signal"], seen
        if start == "operator":
            # The whole command line is the name, as config-manager saw it when it found gfd.
            assert seen == case["cmdline"] == [OPERATOR_COMMAND]
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_config_file_watch_sees_content_changes_only(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\n")
    watch = ConfigFileWatch(str(path))
    assert not watch.changed()
    path.write_text("version: v1\n")  # rewritten, same bytes
    assert not watch.changed()
    path.write_text(TIME_SLICING_2)
    assert watch.changed()
    assert not watch.changed()  # once per change
    # config-manager's swap, seen half-way: the file is gone, then the new one is there.
    # The absence is no change (a reload would fail); the new file is one.
    path.unlink()
    assert not watch.changed()
    (tmp_path / "ts4.yaml").write_text(TIME_SLICING_2.replace("replicas: 2", "replicas: 4"))
    path.symlink_to(tmp_path / "ts4.yaml")
    assert watch.changed()
    assert not watch.changed()
    # Back to the bytes seen before the swap: a change too.
    path.unlink()
    path.write_text(TIME_SLICING_2)
    assert watch.changed()
    # A file that appears after the start (the init container's late write) is a change.
    late = ConfigFileWatch(str(tmp_path / "late.yaml"))
    assert not late.changed()
    (tmp_path / "late.yaml").write_text("version: v1\n")
    assert late.changed()
    assert not ConfigFileWatch(None).changed()


def test_sleep_ends_with_a_reload_when_the_file_changes() -> None:
    control = LoopControl()
    polls = iter([False, False, True])
    started = time.monotonic()
    control.sleep(30.0, changed=lambda: next(polls), poll_seconds=0.01)
    assert time.monotonic() - started < 5
    assert control.reload_requested and control.reload_reason == "config file changed"


def test_sleep_without_changes_lasts_its_time_and_stops_at_once() -> None:
    control = LoopControl()
    started = time.monotonic()
    control.sleep(0.2, changed=lambda: False, poll_seconds=0.05)
    assert 0.2 <= time.monotonic() - started < 2
    assert not control.reload_requested
    threading.Timer(0.1, control.request_stop).start()
    started = time.monotonic()
    control.sleep(None, changed=lambda: False, poll_seconds=0.05)
    assert time.monotonic() - started < 2 and control.stop.is_set()


@pytest.mark.slow
def test_a_rewritten_config_file_is_reloaded_without_a_signal(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    output = tmp_path / "gfd"

    def replicas() -> str | None:
        try:
            return parse_label_lines(output.read_text()).get("nvidia.com/gpu.replicas")
        except OSError:
            return None

    with AgentProcess(
        "--simulate", "t4-single", "--sleep-interval", "60s", "--no-timestamp",
        "--config-file", str(config), "--output-file", str(output), metrics=False,
    ) as agent:  # fmt: skip
        agent.wait_for(lambda: replicas() == "1", "the first labels")
        config.write_text(TIME_SLICING_2)
        agent.wait_for(lambda: replicas() == "2", "the labels of the rewritten config", 10)
        reloaded = agent.wait_for_event("configuration reloaded")
        assert reloaded[-1]["reason"] == "config file changed"
