"""The exit-status table (:mod:`gfd.app.exit_status`) and one line per failure, for every
subcommand.

Each class of fault is driven through each subcommand it can reach (``run`` one-shot and
periodic, ``labels``, ``facts``, ``topo``), through ``gfd.cli.main`` at the default log
level. The status must be the table's for the class, whichever subcommand noticed it;
stderr must hold exactly one line, ``gfd: error: ...``, saying why. The machines served
are bundled profiles with their vGPU fact set (a privileged reader's view), and the run
checks no GPU health, so that nothing but the failure has anything to say.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from gfd.app.exit_status import EXIT_FAILED, EXIT_USAGE
from gfd.facts import VgpuInfo, dump_facts
from gfd.sim import load_profile
from tests.host import gfd_main

#: Where each subcommand's own words go; ``{args}`` is the class's.
MODES = {
    "oneshot": ("--oneshot", "--health-checks", "none", "-o", "{tmp}/features.d/gfd"),
    "periodic": (
        "--sleep-interval",
        "60s",
        "--health-checks",
        "none",
        "-o",
        "{tmp}/features.d/gfd",
    ),
    "labels": ("labels",),
    "facts": ("facts",),
    "topo": ("topo",),
}

#: A run that has not ended by then never will: a periodic agent that should have exited.
HANG_SECONDS = 30
MPS = "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"


@dataclass(frozen=True)
class Fault:
    """One class of fault: its words, the files it needs, the status per subcommand it
    reaches (a subcommand it cannot reach is left out), and what its line says."""

    args: tuple[str, ...]
    statuses: dict[str, int]
    says: str
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    faults: str = ""


EVERYWHERE_USAGE = dict.fromkeys(MODES, EXIT_USAGE)
EVERYWHERE_FAILED = dict.fromkeys(MODES, EXIT_FAILED)

FAULTS = {
    "unknown-flag": Fault(("--frobnicate",), EVERYWHERE_USAGE, "unknown flag '--frobnicate'"),
    "bad-value": Fault(
        ("--simulate", "{machine}", "--output-file-expiry", "3600"),
        {"oneshot": EXIT_USAGE, "periodic": EXIT_USAGE},
        "--output-file-expiry: '3600' has no unit",
    ),
    "bad-environment-free-value": Fault(
        ("--simulate", "{machine}", "--log-level", "loud"),
        EVERYWHERE_USAGE,
        "--log-level: 'loud' is not one of",
    ),
    "config-file-missing": Fault(
        ("--simulate", "{machine}", "--config-file", "{tmp}/absent.yaml"),
        EVERYWHERE_USAGE,
        "config file {tmp}/absent.yaml: cannot read",
    ),
    "simulate-file-missing": Fault(
        ("--simulate", "{tmp}/absent.yaml"), EVERYWHERE_USAGE, "simulation profile '{tmp}/absent"
    ),
    "simulate-file-empty": Fault(
        ("--simulate", "{tmp}/empty.yaml"),
        EVERYWHERE_USAGE,
        "{tmp}/empty.yaml: empty file: not a facts capture",
        files={"empty.yaml": ""},
    ),
    "simulate-file-broken": Fault(
        ("--simulate", "{tmp}/broken.yaml"),
        EVERYWHERE_USAGE,
        "{tmp}/broken.yaml: line 2, column 1: not valid YAML/JSON",
        files={"broken.yaml": "gpus: [\n"},
    ),
    # Settings that contradict the machine: noticed when the labels are computed, so
    # facts and topo, which compute none, succeed; a periodic agent keeps its last
    # labels and waits for a reload that fixes the config.
    "mps-on-mig": Fault(
        (
            "--simulate",
            "{mig-machine}",
            "--mig-strategy",
            "mixed",
            "--config-file",
            "{tmp}/mps.yaml",
        ),
        {"oneshot": EXIT_USAGE, "labels": EXIT_USAGE},
        "config file sharing.mps: MPS sharing is not supported with MIG",
        files={"mps.yaml": MPS},
    ),
    "no-nvml": Fault(
        ("--driver-root-ctr-path", "{tmp}/empty-root"),
        EVERYWHERE_FAILED,
        "NVML load failed: NVML_ERROR_LIBRARY_NOT_FOUND",
    ),
    "driver-not-loaded": Fault(
        ("--simulate", "{machine}"),
        EVERYWHERE_FAILED,
        "NVML nvmlInit failed: NVML_ERROR_DRIVER_NOT_LOADED",
        faults="faults:\n  driver_not_loaded_inits: 5\n",
    ),
    # A periodic agent survives a GPU lost mid-read (it keeps its last labels).
    "gpu-lost": Fault(
        ("--simulate", "{machine}"),
        {"oneshot": EXIT_FAILED, "labels": EXIT_FAILED, "facts": EXIT_FAILED, "topo": EXIT_FAILED},
        "NVML nvmlDeviceGetUUID failed: NVML_ERROR_GPU_IS_LOST",
        faults="faults:\n  gpu_lost:\n  - {gpu: 0, after_calls: 2}\n",
    ),
    # features.d is a regular file here: gfd makes a missing folder, not one where a file is.
    "output-unwritable": Fault(
        ("--simulate", "{machine}"),
        {"oneshot": EXIT_FAILED},
        "feature-file: feature file {tmp}/features.d/gfd: cannot create a temporary file in "
        "{tmp}/features.d: Not a directory",
    ),
}

CASES = [
    pytest.param(fault, mode, status, id=f"{name}-{mode}")
    for name, fault in FAULTS.items()
    for mode, status in fault.statuses.items()
]


def quiet_machine(tmp: Path, profile: str, name: str, faults: str) -> Path:
    """``profile`` with its vGPU fact read (not a vGPU guest), plus ``faults``."""
    facts = dataclasses.replace(load_profile(profile).facts, vgpu=VgpuInfo(present=False))
    path = tmp / f"{name}.yaml"
    path.write_text(dump_facts(facts) + faults)
    return path


class Hung(BaseException):
    """Raised by the alarm in a run that does not end; not an Exception, so gfd cannot catch it."""


def run_gfd(argv: list[str]) -> tuple[int, str, str]:
    """``gfd.cli.main`` in this process with an environment of its own: status, stdout,
    stderr. A run that has not ended after :data:`HANG_SECONDS` fails the test."""

    def hung(_signum: int, _frame: object) -> None:
        raise Hung(f"gfd {' '.join(argv)} did not end within {HANG_SECONDS}s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_SECONDS)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = gfd_main(argv, env={}, stdout=out)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("fault", "mode", "status"), CASES)
def test_each_class_of_fault_exits_as_the_table_says_with_one_line(
    fault: Fault, mode: str, status: int, tmp_path: Path
) -> None:
    (tmp_path / "empty-root").mkdir()
    if fault.statuses.keys() != {"oneshot"}:
        (tmp_path / "features.d").mkdir()
    else:  # the unwritable-output class: a file stands where the folder would be made
        (tmp_path / "features.d").write_text("")
    for name, text in fault.files.items():
        (tmp_path / name).write_text(text)
    machine = quiet_machine(tmp_path, "t4-single", "machine", fault.faults)
    mig_machine = quiet_machine(tmp_path, "dgx-a100-mig-mixed", "mig-machine", fault.faults)

    def fill(word: str) -> str:
        return (
            word.replace("{tmp}", str(tmp_path))
            .replace("{mig-machine}", str(mig_machine))
            .replace("{machine}", str(machine))
        )

    argv = [fill(word) for word in (*fault.args, *MODES[mode])]
    code, stdout, stderr = run_gfd(argv)
    assert stderr.splitlines() == [stderr.rstrip("\n")], f"not one line:\n{stderr}"
    assert stderr.startswith(f"gfd: error: {fill(fault.says)}"), stderr
    assert code == status, stderr
    assert stdout == "", "a failed command prints nothing on stdout"
    assert not (tmp_path / "features.d" / "gfd").exists()


def test_the_same_contradiction_is_the_same_status_in_labels_and_a_one_shot() -> None:
    """The issue's case: one bad MPS-on-MIG config exited 2 from labels and 1 from --oneshot."""
    oneshot, labels = (
        FAULTS["mps-on-mig"].statuses["oneshot"],
        FAULTS["mps-on-mig"].statuses["labels"],
    )
    assert oneshot == labels == EXIT_USAGE
