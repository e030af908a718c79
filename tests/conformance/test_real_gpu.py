"""gfd and its simulator held to what a real GPU showed (``tests/records/real-gpu/``).

Each folder there is one capture from a machine with a real NVIDIA GPU and driver
(``scripts/real-gpu-capture.sh``; its PROVENANCE.md says which machine and what it showed).
These tests need no GPU: they replay the capture through the simulator and compare with
what gfd and NVIDIA's own tools printed on the real machine.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gfd.cli import main as gfd_main
from gfd.sim import library_path
from gfd.sim.branch_library import dynamic_exports

RECORDS = Path(__file__).resolve().parent.parent / "records" / "real-gpu"
CAPTURES = sorted(path for path in RECORDS.iterdir() if (path / "facts.yaml").is_file())


def gfd_out(*args: str) -> str:
    out = io.StringIO()
    code = gfd_main([*args, "--log-level", "error"], env={}, stdout=out)
    assert code == 0, f"gfd {' '.join(args)} exited {code}"
    return out.getvalue()


def test_there_is_a_capture() -> None:
    assert CAPTURES, f"no capture under {RECORDS}"


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_the_capture_replays_to_the_labels_the_real_machine_got(capture: Path) -> None:
    replayed = gfd_out("--simulate", str(capture / "facts.yaml"), "labels", "--no-timestamp")
    assert replayed == (capture / "labels.txt").read_text()


def matrix_rows(text: str) -> dict[str, list[str]]:
    """``nvidia-smi topo -m``'s rows (and gfd's): GPU name → cells up to the CPU affinity."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = [cell.strip() for cell in lines[0].split("\t") if cell.strip()]
    gpus = [cell for cell in header if cell.startswith("GPU") and cell[3:].isdigit()]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.split("\t")]
        if cells[0] in gpus:
            # The GPU columns, then "CPU Affinity"; the NUMA columns are compared apart.
            rows[cells[0]] = cells[1 : len(gpus) + 2]
    return rows


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_the_matrix_of_the_replay_is_what_nvidia_smi_printed(capture: Path) -> None:
    replayed = gfd_out("--simulate", str(capture / "facts.yaml"), "topo")
    real = (capture / "nvidia-smi-topo.txt").read_text()
    assert matrix_rows(replayed) == matrix_rows(real)
    assert matrix_rows(real), "no GPU row parsed from nvidia-smi's matrix"


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_the_real_library_exports_every_call_the_simulator_serves(capture: Path) -> None:
    """The simulator serves its newest branch's export set; a real newer library has each call."""
    real = set((capture / "library-exports.txt").read_text().split())
    simulated = {name for name in dynamic_exports(library_path()) if name.startswith("nvml")}
    assert simulated, "the simulator library exports no NVML call"
    assert sorted(simulated - real) == []
