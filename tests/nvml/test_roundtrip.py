"""The central test: reading a simulated machine through the real pynvml gives back its facts.

It proves the reader against an NVML ABI and the simulator against the reader, for
every bundled profile, and for a facts file captured and replayed: what ``gfd facts``
writes (YAML or JSON, every bundled profile, machines of any driver version) ``gfd
--simulate`` takes as it is and labels as the machine it was captured from.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gfd.facts import Gpu, NodeFacts, dump_facts
from gfd.nvml.branches import driver_branch, exported_in
from gfd.nvml.reader import read_facts, read_facts_without_nvml
from gfd.sim import BUNDLED_PROFILES, load_profile, simulate
from tests.facts_readback import load_facts
from tests.host import gfd_main
from tests.oracles import oracle_path

EXPECTED_PROFILES = {
    "dgx-a100",
    "dgx-h100",
    "hgx-h200",
    "dgx1-v100",
    "pcie-l4x4",
    "rtx4090x8",
    "k80-pcie-tree",
    "t4-single",
    "mixed-a100-h100",
}


def test_every_promised_profile_is_bundled() -> None:
    assert set(BUNDLED_PROFILES) >= EXPECTED_PROFILES


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_read_facts_of_simulated_profile_equals_profile(profile: str) -> None:
    with simulate(profile) as machine:
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    assert facts == load_profile(profile).facts


def test_captured_facts_replay_identically(tmp_path: Path) -> None:
    with simulate("dgx1-v100") as machine:
        captured = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    path = tmp_path / "captured.yaml"
    path.write_text(dump_facts(captured))
    with simulate(str(path)) as machine:
        replayed = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    assert replayed == captured == load_facts(path)


def test_reading_twice_in_one_process_switches_machines() -> None:
    for profile in ("t4-single", "dgx-h100", "t4-single"):
        with simulate(profile) as machine:
            facts = read_facts(
                library_path=machine.library_path,
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
            )
        assert facts == load_profile(profile).facts


# --------------------------------------------------------------------------- #
# Capture and replay through the command line: what ``gfd facts`` writes, ``--simulate``
# takes as it is (its ``derived:`` section included) and labels as the machine it came from.


def gfd_out(*args: str) -> str:
    """What ``gfd ARGS`` prints (run in this process); it must succeed."""
    out = io.StringIO()
    code = gfd_main([*args, "--log-level", "error"], env={}, stdout=out)
    assert code == 0, f"gfd {' '.join(args)} exited {code}"
    return out.getvalue()


def labels_of(source: str | Path, strategy: str = "none") -> dict[str, str]:
    text = gfd_out("--simulate", str(source), "--mig-strategy", strategy, "labels")
    return dict(line.split("=", 1) for line in text.splitlines())


def strategies(facts: NodeFacts) -> tuple[str, ...]:
    """MIG strategies worth labelling ``facts`` under: all three where MIG is on."""
    if any(gpu.mig_mode_current for gpu in facts.gpus):
        return ("none", "single", "mixed")
    return ("none",)


@functools.cache
def profile_labels(profile: str, strategy: str) -> dict[str, str]:
    return labels_of(profile, strategy)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_what_gfd_facts_writes_replays_to_the_same_labels(
    profile: str, fmt: str, tmp_path: Path
) -> None:
    captured = gfd_out("--simulate", profile, "facts", "--format", fmt)
    path = tmp_path / f"node.{fmt}"
    path.write_text(captured)
    facts = load_profile(profile).facts
    assert load_profile(str(path)).facts == facts
    for strategy in strategies(facts):
        assert labels_of(path, strategy) == profile_labels(profile, strategy), strategy
    # Captured again from the replay: the same text, derived section and all.
    assert gfd_out("--simulate", str(path), "facts", "--format", fmt) == captured


#: Releases of branches the simulator does not emulate (and one older than any it does),
#: with their CUDA version and a machine they shipped for.
CAPTURED_DRIVERS = [
    ("450.80.02", 11000, "dgx-a100-mig-mixed"),
    ("560.35.03", 12060, "gb200-nvl4"),
    ("565.57.01", 12070, "gb200-nvl4"),
    ("575.57.08", 12090, "hgx-h200-mig"),
    ("580.95.05", 13000, "hgx-h200"),
    ("590.44.01", 13010, "dgx-h100"),
]


def _without_gpu_max_generation(gpu: Gpu) -> Gpu:
    return (
        gpu if gpu.pcie is None else replace(gpu, pcie=replace(gpu.pcie, gpu_max_generation=None))
    )


@pytest.mark.parametrize(("driver", "cuda", "profile"), CAPTURED_DRIVERS)
def test_a_machine_of_any_driver_version_replays_as_it_was_captured(
    driver: str, cuda: int, profile: str, tmp_path: Path
) -> None:
    machine = tmp_path / "machine.yaml"
    facts = replace(load_profile(profile).facts, driver_version=driver, cuda_driver_version=cuda)
    if not exported_in("nvmlDeviceGetGpuMaxPcieLinkGeneration", driver_branch(driver)):
        # What such a driver captures: its NVML has no GPU maximum of the PCIe link.
        facts = replace(facts, gpus=tuple(_without_gpu_max_generation(g) for g in facts.gpus))
    machine.write_text(dump_facts(facts))
    captured = tmp_path / "captured.yaml"
    captured.write_text(gfd_out("--simulate", str(machine), "facts"))
    # gfd facts records the version it saw, not the branch that served it.
    assert load_facts(captured).driver_version == driver
    for strategy in strategies(facts):
        labels = labels_of(captured, strategy)
        assert labels == labels_of(machine, strategy), strategy
        assert labels["nvidia.com/cuda.driver-version.full"] == driver


@pytest.mark.oracle("real-nvml")
def test_a_node_without_driver_replays_as_the_agent_labelled_it(tmp_path: Path) -> None:
    """On NVIDIA's real libraries without the kernel driver, ``gfd facts`` fails with one
    line, as the agent does by default; with ``--fail-on-init-error=false`` it writes the facts
    the agent labels such a node with, and they replay to the agent's labels."""
    libraries = sorted(oracle_path("real-nvml").glob("*/libnvidia-ml.so.1"))
    assert libraries
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    node = ("--sysfs-root", str(sysfs), "--machine-type-file", str(tmp_path / "absent"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    facts = tmp_path / "no-driver.yaml"
    facts.write_text(
        dump_facts(read_facts_without_nvml(sysfs_root=sysfs, machine_type_file=tmp_path / "x"))
    )
    for library in libraries:
        run = functools.partial(
            subprocess.run, capture_output=True, text=True, timeout=60,
            env={**env, "LD_LIBRARY_PATH": str(library.parent)},
        )  # fmt: skip
        done = run([sys.executable, "-m", "gfd", "facts", *node])
        assert done.returncode == 1 and done.stdout == "", library
        (line,) = [x for x in done.stderr.splitlines() if x.startswith("gfd: error: ")]
        assert "NVML_ERROR_DRIVER_NOT_LOADED" in line
        output = tmp_path / library.parent.name / "gfd"
        output.parent.mkdir()
        agent = [sys.executable, "-m", "gfd", "--oneshot", "--no-timestamp", "-o", str(output)]
        done = run([*agent, "--fail-on-init-error=false", *node])
        assert done.returncode == 0, done.stderr
        published = dict(line.split("=", 1) for line in output.read_text().splitlines())
        assert labels_of(facts) == published, library
        captured = tmp_path / library.parent.name / "facts.yaml"
        done = run([sys.executable, "-m", "gfd", "facts", "--fail-on-init-error=false", *node])
        assert done.returncode == 0, done.stderr
        captured.write_text(done.stdout)
        assert labels_of(captured) == published, library
