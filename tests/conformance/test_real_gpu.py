"""gfd and its simulator held to what a real GPU showed (``tests/records/real-gpu/``).

Each folder there is one capture from a machine with a real NVIDIA GPU and driver
(``scripts/real-gpu-capture.sh``; its PROVENANCE.md says which machine and what it showed).
These tests need no GPU: they replay the capture through the simulator and compare with
what gfd and NVIDIA's own programs printed on the real machine: ``nvidia-smi``'s matrix and
memory report, and NVIDIA's GPU Feature Discovery's labels on the same GPU. Every
expectation is read from those files.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from gfd.facts import MemoryHealth, NodeFacts, PcieLink, RemappedRows, dump_facts
from gfd.health import MEMORY, OK, HealthMonitor
from gfd.nvml.reader import read_facts
from gfd.sim import library_path, load_profile, simulate
from gfd.sim.branch_library import dynamic_exports
from tests.conformance.differences import explain, label_differences
from tests.host import gfd_main
from tests.reliability.agent_process import parse_label_lines
from tests.sim import read_simulated

RECORDS = Path(__file__).resolve().parent.parent / "records" / "real-gpu"
CAPTURES = sorted(path for path in RECORDS.iterdir() if (path / "facts.yaml").is_file())
#: The H200 captured with memory health and NUMA in gfd's facts, and with NVIDIA's GFD run
#: on the same GPU; the older capture of it predates all three (its PROVENANCE.md).
H200 = RECORDS / "h200-580.159.04-2026-12-04"

#: A terminal's select-graphic-rendition codes: nvidia-smi underlines its header on a TTY.
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def gfd_out(*args: str) -> str:
    out = io.StringIO()
    code = gfd_main([*args, "--log-level", "error"], env={}, stdout=out)
    assert code == 0, f"gfd {' '.join(args)} exited {code}"
    return out.getvalue()


def replayed_labels(capture: Path) -> dict[str, str]:
    text = gfd_out("--simulate", str(capture / "facts.yaml"), "labels", "--no-timestamp")
    return parse_label_lines(text)


def replayed_facts(capture: Path, scratch: Path) -> NodeFacts:
    """The capture's facts as gfd's reader reads them from the simulator serving them."""
    with simulate(str(capture / "facts.yaml")) as machine:
        return read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=scratch / "absent",
        )


@pytest.fixture
def replayed_h200(tmp_path: Path) -> NodeFacts:
    return replayed_facts(H200, tmp_path)


def test_there_is_a_capture() -> None:
    assert CAPTURES, f"no capture under {RECORDS}"
    assert H200 in CAPTURES


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_the_reader_reads_back_the_facts_gfd_read_on_the_real_machine(
    capture: Path, tmp_path: Path
) -> None:
    captured = load_profile(str(capture / "facts.yaml")).facts
    assert replayed_facts(capture, tmp_path) == captured


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_the_capture_replays_to_the_labels_the_real_machine_got(capture: Path) -> None:
    replayed = gfd_out("--simulate", str(capture / "facts.yaml"), "labels", "--no-timestamp")
    assert replayed == (capture / "labels.txt").read_text()


# ------------------------------------------------------------------ nvidia-smi topo -m


def matrix(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -m``'s table (and gfd's): GPU row -> column name -> cell.

    nvidia-smi leaves an empty cell between its NUMA columns that its header does not
    name; a matrix cell is never empty, so empty cells are dropped before pairing."""
    lines = [_SGR.sub("", line) for line in text.splitlines()]
    rows = [line for line in lines if line.strip()]
    header = [cell.strip() for cell in rows[0].split("\t") if cell.strip()]
    table = {}
    for line in rows[1:]:
        name, *cells = [cell.strip() for cell in line.split("\t")]
        if name.startswith("GPU") and name[3:].isdigit():
            filled = [cell for cell in cells if cell]
            assert len(filled) == len(header), f"row {name}: {filled} against {header}"
            table[name] = dict(zip(header, filled, strict=True))
    return table


def gpu_columns(table: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The link matrix and the CPU affinity: what every capture's facts can give."""
    return {
        row: {
            column: cell
            for column, cell in cells.items()
            if not column.startswith(("NUMA", "GPU NUMA"))
        }
        for row, cells in table.items()
    }


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_the_matrix_of_the_replay_is_what_nvidia_smi_printed(capture: Path) -> None:
    replayed = matrix(gfd_out("--simulate", str(capture / "facts.yaml"), "topo"))
    real = matrix((capture / "nvidia-smi-topo.txt").read_text())
    assert real, "no GPU row parsed from nvidia-smi's matrix"
    assert gpu_columns(replayed) == gpu_columns(real)


def test_the_h200_replays_to_nvidia_smi_s_whole_matrix_numa_columns_included() -> None:
    replayed = matrix(gfd_out("--simulate", str(H200 / "facts.yaml"), "topo"))
    real = matrix((H200 / "nvidia-smi-topo.txt").read_text())
    assert real["GPU0"]["NUMA Affinity"] == "0"
    assert replayed == real


def test_the_h200_s_numa_labels_count_the_nodes_nvidia_smi_showed() -> None:
    real = matrix((H200 / "nvidia-smi-topo.txt").read_text())
    nodes = [cells["NUMA Affinity"] for cells in real.values()]
    labels = replayed_labels(H200)
    assert labels["nvidia.com/gpu.numa-nodes"] == str(len(set(nodes)))
    assert labels["nvidia.com/gpu.numa.max-gpus"] == str(max(map(nodes.count, nodes)))


# ---------------------------------------------------- nvidia-smi -q -d ECC,ROW_REMAPPER,...


def smi_sections(text: str) -> dict[str, str]:
    """``nvidia-smi -q``'s ``Key : value`` lines, each key prefixed by the sections above it
    (``ECC Errors/Volatile/DRAM Uncorrectable``); one GPU's report."""
    values: dict[str, str] = {}
    path: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("=", "GPU ")):
            continue
        indent = len(line) - len(line.lstrip())
        key, colon, value = line.strip().partition(":")
        while path and path[-1][0] >= indent:
            path.pop()
        name = "/".join([*(part for _, part in path), key.strip()])
        if colon:
            values[name] = value.strip()
        else:
            path.append((indent, key.strip()))
    return values


def memory_health_nvidia_smi_printed(text: str) -> MemoryHealth:
    """What ``gpus[].memory_health`` must hold (docs/facts.md), as nvidia-smi reported it:
    the current ECC mode, the remapped rows, no retired pages where it prints N/A, and the
    volatile uncorrectable count summed over its sources (NVML's total)."""
    smi = smi_sections(text)
    retired = [value for key, value in smi.items() if key.startswith("Retired Pages/")]
    assert retired and set(retired) == {"N/A"}, "a capture with retired pages needs their fields"
    volatile = [
        int(value)
        for key, value in smi.items()
        if key.startswith("ECC Errors/Volatile/") and "Uncorrectable" in key
    ]
    return MemoryHealth(
        ecc_enabled=smi["ECC Mode/Current"] == "Enabled",
        remapped_rows=RemappedRows(
            correctable=int(smi["Remapped Rows/Correctable Error"]),
            uncorrectable=int(smi["Remapped Rows/Uncorrectable Error"]),
            pending=smi["Remapped Rows/Pending"] == "Yes",
            failure=smi["Remapped Rows/Remapping Failure Occurred"] == "Yes",
        ),
        retired_pages=None,
        volatile_uncorrected_ecc=sum(volatile),
    )


def test_the_h200_s_memory_health_replays_as_nvidia_smi_reported_it(
    replayed_h200: NodeFacts,
) -> None:
    expected = memory_health_nvidia_smi_printed((H200 / "nvidia-smi-memory.txt").read_text())
    (gpu,) = replayed_h200.gpus
    assert gpu.memory_health == expected
    # And as gfd facts wrote it on the real GPU: the capture round-trips.
    (captured,) = load_profile(str(H200 / "facts.yaml")).facts.gpus
    assert captured.memory_health == expected


def test_the_memory_check_judges_the_h200_healthy(replayed_h200: NodeFacts, tmp_path: Path) -> None:
    checks = HealthMonitor(sysfs_root=tmp_path, checks=[MEMORY])
    (result,) = checks.observe(replayed_h200).results
    assert (result.state, result.problems, result.note) == (OK, (), "")


# ------------------------------------------------------- NVIDIA GFD on the same GPU


def test_gfd_gives_every_label_of_nvidia_s_gfd_on_the_same_h200() -> None:
    reference = parse_label_lines((H200 / "ref-labels.txt").read_text())
    assert len(reference) == 25
    labels = replayed_labels(H200)
    assert {key: labels.get(key) for key in reference} == reference
    # What gfd adds is each a reviewed difference (docs/compatibility.md).
    unexplained = [
        str(d) for d in label_differences(reference, labels) if explain(d, frozenset()) is None
    ]
    assert unexplained == []


def test_unprivileged_on_the_h200_nvml_tells_what_config_space_cannot(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """As the DaemonSet runs it (uid 65532): PCI config space unreadable, NVML's
    virtualization mode as that user got it; gfd labels vgpu.present as the reference
    did with privileges on the same GPU, and says nothing on stderr."""
    unprivileged = json.loads((H200 / "unprivileged-nvml.json").read_text())
    assert unprivileged["uid"] != 0
    mode = unprivileged["nvmlDeviceGetVirtualizationMode"]
    # The PCIe link as the same user read it (the capture predates gfd reading it).
    link = PcieLink(**{fact: int(unprivileged[call]) for fact, call in PCIE_ANSWERS.items()})
    captured = load_profile(str(H200 / "facts.yaml")).facts
    facts = dataclasses.replace(
        captured,
        vgpu=None,
        gpus=tuple(
            dataclasses.replace(g, virtualization_mode=mode, pcie=link) for g in captured.gpus
        ),
    )
    path = tmp_path / "h200-unprivileged.yaml"
    path.write_text(dump_facts(facts))
    out = io.StringIO()
    capfd.readouterr()
    assert gfd_main(["--simulate", str(path), "labels", "--no-timestamp"], env={}, stdout=out) == 0
    assert capfd.readouterr().err == ""
    reference = parse_label_lines((H200 / "ref-labels.txt").read_text())
    key = "nvidia.com/vgpu.present"
    assert parse_label_lines(out.getvalue())[key] == reference[key]


# ---------------------------------------------------------------------- the library


CAPTURES_WITH_EXPORTS = [path for path in CAPTURES if (path / "library-exports.txt").is_file()]


@pytest.mark.parametrize("capture", CAPTURES_WITH_EXPORTS, ids=lambda path: path.name)
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
