"""gfd and its simulator held to what a real GPU showed (``tests/records/real-gpu/``).

Each folder there is one capture from a machine with a real NVIDIA GPU and driver
(``scripts/real-gpu-capture.sh``; its PROVENANCE.md says which machine and what it showed).
These tests need no GPU: they replay the capture through the simulator and compare with
what gfd and NVIDIA's own tools printed on the real machine.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gfd.cli import main as gfd_main
from gfd.facts import PcieLink, dump_facts
from gfd.sim import library_path, load_profile
from gfd.sim.branch_library import dynamic_exports
from tests.sim import read_simulated

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


#: The H200 captured again with gfd's memory health, and its PCIe answers read by pynvml
#: idle, under a bf16 matmul with host copies, and after (``pcie.json``).
H200_WITH_PCIE = RECORDS / "h200-580.159.04-2026-12-04"
#: Which NVML call gives which fact of the ``pcie`` block.
PCIE_ANSWERS = {
    "current_generation": "nvmlDeviceGetCurrPcieLinkGeneration",
    "current_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "max_generation": "nvmlDeviceGetMaxPcieLinkGeneration",
    "max_width": "nvmlDeviceGetMaxPcieLinkWidth",
    "gpu_max_generation": "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "replay_counter": "nvmlDeviceGetPcieReplayCounter",
}


@pytest.mark.parametrize("moment", ["idle", "busy", "after"])
def test_the_real_h200_with_its_pcie_answers_labels_gen5_x16_and_healthy(
    moment: str, tmp_path: Path
) -> None:
    answers = json.loads((H200_WITH_PCIE / "pcie.json").read_text())[moment]
    link = PcieLink(**{fact: int(answers[call]) for fact, call in PCIE_ANSWERS.items()})
    captured = load_profile(str(H200_WITH_PCIE / "facts.json")).facts
    facts = replace(captured, gpus=tuple(replace(gpu, pcie=link) for gpu in captured.gpus))
    machine = tmp_path / "h200.yaml"
    machine.write_text(dump_facts(facts))
    # The reader reads the answers back from the simulator as the real driver gave them ...
    assert read_simulated(facts) == facts
    # ... and they label as the real link is: Gen5 x16, healthy (no grace in a one-shot run).
    text = gfd_out("--simulate", str(machine), "--oneshot", "--health-label", "-o", "-")
    labels = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert labels["nvidia.com/gpu.pcie.generation"] == "5"
    assert labels["nvidia.com/gpu.pcie.width"] == "16"
    assert labels["nvidia.com/gpu.health"] == "healthy"
