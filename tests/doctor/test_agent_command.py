"""``gfd doctor --from-pid``: the running agent's arguments, read from /proc, are the
configuration checked; flags given to the doctor win."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gfd.base.errors import ConfigError
from gfd.doctor.agent_command import PROC_ROOT, agent_arguments
from tests.doctor.conftest import doctor
from tests.host import test_host_seeing_own_processes


def started(process: subprocess.Popen[bytes]) -> int:
    """``process``'s pid, once the kernel shows its command line (it may lag Popen)."""
    cmdline = PROC_ROOT / str(process.pid) / "cmdline"
    for _ in range(600):
        if cmdline.read_bytes():
            break
        time.sleep(0.05)
    return process.pid


def fake_proc(tmp_path: Path, pid: int, *words: str) -> Path:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cmdline").write_bytes(b"".join(w.encode() + b"\0" for w in words))
    return tmp_path


@pytest.mark.parametrize(
    "words",
    [
        ("/usr/local/bin/gfd", "--patch-node", "--no-output-file"),
        ("gpu-feature-discovery", "--patch-node", "--no-output-file"),
        ("/opt/gfd/bin/python3.11", "-m", "gfd", "--patch-node", "--no-output-file"),
    ],
)
def test_the_arguments_of_a_gfd_process(tmp_path: Path, words: tuple[str, ...]) -> None:
    proc = fake_proc(tmp_path, 1, *words)
    assert agent_arguments(1, proc_root=proc) == ["--patch-node", "--no-output-file"]


def test_a_process_that_is_not_gfd_is_refused(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 7, "/bin/sh", "-c", "sleep 1")
    with pytest.raises(ConfigError, match="process 7 is '/bin/sh', not gfd"):
        agent_arguments(7, proc_root=proc)


def test_a_missing_process_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--from-pid 9: cannot read"):
        agent_arguments(9, proc_root=tmp_path)


def test_the_doctor_checks_the_running_agents_configuration(tmp_path: Path) -> None:
    # A real agent, started as a pod's would be, with the sink flags the doctor is not given.
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gfd",
            "--simulate",
            "t4-single",
            "--sleep-interval",
            "1h",
            "--no-output-file",
            "--print-labels",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The agent is this test's own process, seen in the machine's /proc.
        own = test_host_seeing_own_processes()
        report = doctor(["--from-pid", str(started(agent)), "--simulate", "t4-single"], host=own)
        assert report.message("feature-file") == "not used (--no-output-file)"
        # A flag given to the doctor wins over the agent's.
        mine = doctor(
            [
                "--from-pid",
                str(agent.pid),
                "--simulate",
                "t4-single",
                "-o",
                str(tmp_path / "g"),
                "--no-output-file=false",
            ],
            host=own,
        )
        assert mine.message("feature-file") != "not used (--no-output-file)"
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def test_from_a_process_that_is_not_gfd_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.host import gfd_main as main
    from tests.host import test_host_seeing_own_processes

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        command = ["doctor", "--from-pid", str(started(sleeper))]
        assert main(command, env={}, host=test_host_seeing_own_processes()) == 2
    finally:
        sleeper.terminate()
        sleeper.wait(timeout=30)
    assert "not gfd" in capsys.readouterr().err
