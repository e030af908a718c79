"""gfd against NVIDIA's real ``libnvidia-ml.so`` of driver branches 470, 525, 535 and 550.

The libraries come from Debian's archive (``../shared/oracles/fetch-real-nvml.sh``) and load
on any Linux machine; without NVIDIA's kernel driver (CI), ``nvmlInit`` answers
NVML_ERROR_DRIVER_NOT_LOADED. So these cases check what can be checked without a GPU: every
function gfd may call is exported by each real library or handled as optional, the
simulator's export set for each branch equals the real one, and gfd behaves as NVIDIA's
reference does on a node whose driver is not loaded: what the reference binary did on each
library is recorded in ``tests/records/reference-gfd/no-driver.json``
(``tests/conformance/record_no_driver.py``): ``--fail-on-init-error=false`` exits 0 with the
feature file ``nvidia.com/vgpu.present=false``, ``true`` exits 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.base.errors import NvmlNotReady
from gfd.nvml.branches import FIRST_EXPORTED_IN, driver_branch
from gfd.nvml.reader import NVML_CALLS, read_facts
from gfd.sim import library_path
from gfd.sim.branch_library import dynamic_exports
from tests.conformance.record_no_driver import RECORD, RERECORD, case_id, case_inputs_sha256
from tests.oracles import oracle_path
from tests.records.store import recorded_case
from tests.reliability.agent_process import parse_label_lines

ORACLE = "real-nvml"


def reference_without_driver(library: Path, fail: str) -> dict[str, object]:
    """What the reference did on ``library`` with ``--fail-on-init-error=<fail>`` (recorded)."""
    return recorded_case(
        RECORD, case_id(library, fail), case_inputs_sha256(library, fail), RERECORD
    )


def real_libraries() -> list[Path]:
    """``<REAL_NVML_DIR>/<version>/libnvidia-ml.so.1`` of every fetched branch."""
    root = oracle_path(ORACLE)
    found = sorted(root.glob("*/libnvidia-ml.so.1"))
    assert found, f"{root} holds no <version>/libnvidia-ml.so.1"
    return found


def version_of(library: Path) -> str:
    return library.parent.name


@pytest.mark.oracle(ORACLE)
def test_every_branch_is_fetched() -> None:
    branches = sorted(driver_branch(version_of(lib)) for lib in real_libraries())
    assert branches == [470, 525, 535, 550]


@pytest.mark.oracle(ORACLE)
def test_every_call_gfd_makes_is_exported_or_optional() -> None:
    """The defect this suite exists for: a call a real branch lacks must not fail the read."""
    problems = []
    for library in real_libraries():
        exports = dynamic_exports(library.resolve())
        for call in NVML_CALLS:
            if call.symbol in exports or call.role == "optional":
                continue
            fallback = call.fallback.split(" ", 1)[0]
            if fallback in exports:
                continue
            problems.append(f"{version_of(library)}: {call.symbol} ({call.role}) is not exported")
    assert not problems, "\n".join(problems)


@pytest.mark.oracle(ORACLE)
def test_the_simulator_of_each_branch_exports_what_the_real_library_does() -> None:
    implemented = {n for n in dynamic_exports(library_path()) if n.startswith("nvml")}
    for library in real_libraries():
        real = dynamic_exports(library.resolve())
        branch = driver_branch(version_of(library))
        differ = sorted(
            name
            for name in implemented
            if (name in real) != (branch >= FIRST_EXPORTED_IN.get(name, 470))
        )
        assert not differ, f"{version_of(library)}: simulator and real library differ on {differ}"


def _run_gfd(library: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    env["LD_LIBRARY_PATH"] = str(library.parent)
    return subprocess.run(
        [sys.executable, "-m", "gfd", "--oneshot", "--no-timestamp", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _empty_sysfs(root: Path) -> Path:
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    return root


@pytest.mark.oracle(ORACLE)
def test_reader_reports_driver_not_loaded(tmp_path: Path) -> None:
    for library in real_libraries():
        with pytest.raises(NvmlNotReady, match="NVML_ERROR_DRIVER_NOT_LOADED"):
            read_facts(
                library_path=library, sysfs_root=_empty_sysfs(tmp_path / version_of(library))
            )


@pytest.mark.oracle(ORACLE)
def test_no_driver_with_fail_on_init_error_false_labels_like_the_reference(tmp_path: Path) -> None:
    for library in real_libraries():
        work = tmp_path / version_of(library)
        output = work / "features.d" / "gfd"
        output.parent.mkdir(parents=True)
        done = _run_gfd(
            library,
            "--fail-on-init-error=false",
            "--output-file", str(output),
            "--sysfs-root", str(_empty_sysfs(work / "sys")),
            "--machine-type-file", str(work / "absent"),
        )  # fmt: skip
        reference = reference_without_driver(library, "false")
        assert done.returncode == reference["returncode"] == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert parse_label_lines(output.read_text()) == reference["labels"]


@pytest.mark.oracle(ORACLE)
def test_no_driver_with_fail_on_init_error_true_exits_with_one_line(tmp_path: Path) -> None:
    for library in real_libraries():
        output = tmp_path / version_of(library) / "gfd"
        done = _run_gfd(library, "--fail-on-init-error=true", "--output-file", str(output))
        reference = reference_without_driver(library, "true")
        assert done.returncode == reference["returncode"] == 1
        assert reference["labels"] is None
        assert "Traceback" not in done.stderr
        (line,) = [x for x in done.stderr.splitlines() if not x.startswith("{")]
        assert line.startswith("gfd: error: ") and "NVML_ERROR_DRIVER_NOT_LOADED" in line
        assert not output.exists()


@pytest.mark.oracle(ORACLE)
@pytest.mark.oracle("reference-gfd")
@pytest.mark.skipif(
    Path("/proc/driver/nvidia").exists(), reason="an NVIDIA driver is loaded on this machine"
)
def test_no_driver_labels_equal_the_reference_binary(tmp_path: Path) -> None:
    """Both programs on the same real library and this machine's own /sys."""
    reference = oracle_path("reference-gfd")
    for library in real_libraries():
        ours, theirs = tmp_path / "ours", tmp_path / "theirs"
        done = _run_gfd(library, "--fail-on-init-error=false", "--output-file", str(ours))
        assert done.returncode == 0, done.stderr
        ran = subprocess.run(
            [
                str(reference), "--oneshot", "--no-timestamp", "--fail-on-init-error=false",
                "--use-node-feature-api=false", "--output-file", str(theirs),
            ],
            capture_output=True, text=True, timeout=60,
            env={"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(library.parent)},
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-2000:]
        assert parse_label_lines(ours.read_text()) == parse_label_lines(theirs.read_text())
