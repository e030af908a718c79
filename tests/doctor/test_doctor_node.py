"""``gfd doctor`` on a node without a cluster: NVML, the driver root, the labels, the
feature file's folder, the health checks, and the report's shapes and exit status.

Expectations come from what is arranged (a simulated machine's facts, a driver root
holding NVIDIA's real library or nothing, an NVML fault named after nvml.h's error) and
from the documented report (docs/doctor.md), never from a previous doctor run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gfd.doctor import DOCTOR_CHECKS
from gfd.doctor.checks.feature_file import HOST_FEATURES_DIR
from gfd.facts import dump_facts
from gfd.nvml.driver_root import standard_dirs, this_architecture
from gfd.sim import load_profile
from tests.doctor.conftest import doctor
from tests.host import gfd_main as main
from tests.oracles import oracle_path

CHECKS = [check.name for check in DOCTOR_CHECKS]
STATES = {"ok", "problem", "cannot tell"}
#: The checks that need the API server: without credentials they cannot tell.
CLUSTER_CHECKS = {"cluster", "nfd", "device-plugin"}


def creatable(folder: Path) -> bool:
    """Whether this user may create ``folder`` (its nearest existing ancestor is writable)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


def test_the_literal_command_on_a_simulated_dgx_h100_exits_zero() -> None:
    # As the issue asks it, in a process of its own, with nothing but the profile: no
    # cluster configured is "cannot tell", never a problem. The default feature file's
    # folder is on this machine's /etc: only a user who may not create it sees a problem.
    # Only what finds the interpreter: no kubeconfig, no pod, no GFD_* settings of the shell.
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in os.environ}
    run = subprocess.run(
        [sys.executable, "-m", "gfd", "doctor", "--simulate", "dgx-h100"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    lines = run.stdout.splitlines()
    assert [
        line.split()[0] if not line.startswith("cannot tell") else "cannot tell" for line in lines
    ]
    assert len(lines) == len(CHECKS)
    for line, name in zip(lines, CHECKS, strict=True):
        state = "cannot tell" if line.startswith("cannot tell") else line.split()[0]
        assert state in STATES
        assert line.removeprefix(state).split()[0] == name
    problems = [line for line in lines if line.startswith("problem")]
    if creatable(Path(HOST_FEATURES_DIR)):
        assert (run.returncode, problems) == (0, []), run.stdout
    else:
        assert run.returncode == 1
        assert [p.split()[1] for p in problems] == ["feature-file"]
    assert run.stderr == ""


def test_json_report_is_one_object_per_check_in_chain_order(tmp_path: Path) -> None:
    report = doctor(["--simulate", "dgx-h100", "--output-file", str(tmp_path / "d" / "gfd")])
    assert [line["check"] for line in report.lines] == CHECKS
    for line in report.lines:
        assert set(line) == {"check", "state", "message", "fix"}
        assert line["state"] in STATES
        assert line["message"] and "\n" not in line["message"] and "\n" not in line["fix"]
        if line["state"] == "problem":
            assert line["fix"]
    assert report.code == 0 and report.problems == []
    for name in CLUSTER_CHECKS:
        assert report.state(name) == "cannot tell"
    # What the simulator serves: the profile's driver, and its GPUs by model.
    facts = load_profile("dgx-h100").facts
    models = Counter(gpu.name for gpu in facts.gpus)
    nvml = report.message("nvml")
    assert report.state("nvml") == "ok"
    assert facts.driver_version is not None and facts.driver_version in nvml
    for model, count in models.items():
        assert f"{count}x {model}" in nvml


def test_text_report_is_one_line_per_check(tmp_path: Path) -> None:
    out = io.StringIO()
    code = main(
        ["doctor", "--simulate", "t4-single", "-o", str(tmp_path / "gfd")], env={}, stdout=out
    )
    lines = out.getvalue().splitlines()
    assert code == 0
    assert len(lines) == len(CHECKS)
    assert all("  to tell: " in line for line in lines if line.startswith("cannot tell"))


def test_no_nvml_library_is_a_problem_naming_the_fix(tmp_path: Path) -> None:
    # The driver root the lookup is pointed at holds no library at all.
    empty = tmp_path / "driver-root"
    empty.mkdir()
    report = doctor(["--driver-root-ctr-path", str(empty), "-o", str(tmp_path / "f" / "gfd")])
    assert report.code == 1
    assert report.state("nvml") == "problem"
    assert "NVML_ERROR_LIBRARY_NOT_FOUND" in report.message("nvml")
    fix = report.fix("nvml")
    assert "--simulate PROFILE" in fix and "--driver-root-ctr-path" in fix
    assert report.state("driver-root") == "problem"
    assert str(empty) in report.message("driver-root")
    # Nothing downstream is blamed for what NVML could not give.
    for name in ("labels", "device-plugin", "health"):
        assert report.state(name) == "cannot tell"


def faulty_profile(tmp_path: Path, base: str, faults: str) -> str:
    path = tmp_path / f"{base}-faulty.yaml"
    path.write_text(dump_facts(load_profile(base).facts) + faults)
    return str(path)


def test_a_driver_not_loaded_yet_is_a_problem_saying_so(tmp_path: Path) -> None:
    profile = faulty_profile(tmp_path, "t4-single", "faults:\n  driver_not_loaded_inits: 5\n")
    output = ["-o", str(tmp_path / "gfd")]
    report = doctor(["--simulate", profile, *output])
    assert report.code == 1
    assert report.state("nvml") == "problem"
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in report.message("nvml")
    assert "--fail-on-init-error=false keeps it running" in report.fix("nvml")
    going_on = doctor(["--simulate", profile, "--fail-on-init-error=false", *output])
    assert "gfd keeps running" in going_on.fix("nvml")
    # What the agent then publishes: the labels of a node without GPUs.
    assert going_on.state("labels") == "cannot tell"
    assert "without GPUs" in going_on.message("labels")


@pytest.mark.oracle("real-nvml")
def test_a_real_library_in_the_driver_root_without_a_driver(tmp_path: Path) -> None:
    # NVIDIA's real library loads anywhere; with no kernel driver, nvmlInit answers
    # NVML_ERROR_DRIVER_NOT_LOADED (shared/oracles/README.md): a node whose driver is not up.
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has NVIDIA's kernel driver loaded")
    real = oracle_path("real-nvml") / "550.163.01" / "libnvidia-ml.so.1"
    root = tmp_path / "driver-root"
    library_dir = root / standard_dirs(this_architecture())[0].lstrip("/")
    library_dir.mkdir(parents=True)
    shutil.copy(real, library_dir / "libnvidia-ml.so.1")
    report = doctor(["--driver-root-ctr-path", str(root), "-o", str(tmp_path / "f" / "gfd")])
    assert report.state("driver-root") == "ok"
    assert str(library_dir / "libnvidia-ml.so.1") in report.message("driver-root")
    assert report.state("nvml") == "problem"
    message = report.message("nvml")
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in message
    assert str(library_dir / "libnvidia-ml.so.1") in message
    assert report.code == 1


def test_a_lost_gpu_is_a_health_problem(tmp_path: Path) -> None:
    # The simulator loses GPU 0 from the first call on: NVML answers GPU_IS_LOST, and the
    # gpu-lost check reports it (docs/health.md).
    profile = faulty_profile(
        tmp_path, "t4-single", "faults:\n  gpu_lost:\n    - gpu: 0\n      after_calls: 0\n"
    )
    report = doctor(["--simulate", profile, "-o", str(tmp_path / "gfd")])
    assert report.code == 1
    assert report.state("nvml") == "problem"
    assert "NVML_ERROR_GPU_IS_LOST" in report.message("nvml")
    assert report.state("health") == "problem"
    assert report.message("health").startswith("GPULost")


def test_json_is_parseable_as_documented(tmp_path: Path) -> None:
    out = io.StringIO()
    main(
        ["doctor", "--simulate", "t4-single", "-o", str(tmp_path / "gfd"), "--format", "json"],
        env={},
        stdout=out,
    )
    parsed = json.loads(out.getvalue())
    assert isinstance(parsed, list) and len(parsed) == len(CHECKS)


def test_a_bad_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--format", "yaml"], env={}) == 2
    assert capsys.readouterr().err.startswith("gfd: error: ")
