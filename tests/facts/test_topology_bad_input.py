"""Bad topology facts given to the CLIs: one stderr line naming the user's file, the
field and the problem; the facts-error exit code; no traceback.

``gfd --simulate FILE`` exits 2 for a facts error (``EXIT_USAGE``), ``python -m gfd.sim
FILE DIR`` 2. Both render a machine file into a temporary directory; the message must
name the file the user gave, never that copy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gfd.sim import profile_path

ROOT = Path(__file__).resolve().parents[2]
DGX2 = profile_path("dgx2-v100").read_text(encoding="utf-8")
TRUNK = "- {a: 0, b: 8, status: ok}"
SWITCH = "remote_bus_id: '00000000:63:00.0'"

CASES = {
    "p2p-index-out-of-range": (
        DGX2.replace(TRUNK, "- {a: 0, b: 16, status: ok}"),
        "nvlink_p2p[0]: pair (0, 16) must name two GPU indices a < b below 16",
    ),
    "p2p-pair-twice": (
        DGX2.replace(TRUNK, TRUNK + "\n- {a: 0, b: 8, status: not-supported}"),
        "nvlink_p2p[1]: pair (0, 8) is listed twice",
    ),
    "p2p-status-not-nvmls": (
        DGX2.replace(TRUNK, "- {a: 0, b: 8, status: reachable}"),
        "nvlink_p2p[0].status: 'reachable' is not one of 'ok', 'chipset-not-supported', "
        "'gpu-not-supported', 'ioh-topology-not-supported', 'disabled-by-regkey', "
        "'not-supported', 'unknown'",
    ),
    "nvlink-peer-bus-id-malformed": (
        DGX2.replace(SWITCH, "remote_bus_id: '63:00.0'", 1),
        "gpus[0].nvlinks[0].remote_bus_id: '63:00.0' is not an NVML PCI bus id",
    ),
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(params=sorted(CASES))
def bad_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    text, problem = CASES[request.param]
    assert text != DGX2, "the case must change the profile"
    path = tmp_path / "my-machine.yaml"
    path.write_text(text, encoding="utf-8")
    return path, problem


@pytest.mark.parametrize("command", ["labels", "topo"])
def test_gfd_simulate_names_the_users_file(bad_file: tuple[Path, str], command: str) -> None:
    path, problem = bad_file
    done = run("-m", "gfd", "--simulate", str(path), command)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [f"gfd: error: {path}: {problem}"]


def test_python_m_gfd_sim_names_the_users_file(bad_file: tuple[Path, str], tmp_path: Path) -> None:
    path, problem = bad_file
    done = run("-m", "gfd.sim", str(path), str(tmp_path / "machine"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"error: {path}: {problem}"]
    assert not (tmp_path / "machine").exists()


def test_the_unchanged_profile_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "my-machine.yaml"
    path.write_text(DGX2, encoding="utf-8")
    done = run("-m", "gfd", "--simulate", str(path), "labels", "--log-level", "error")
    assert done.returncode == 0, done.stderr
    assert "nvidia.com/gpu.interconnect=nvswitch" in done.stdout
