"""The simulator emulates driver branches: each exports what that branch's real NVML exports.

The export facts come from NVIDIA's real libraries (``../shared/reference/nvml-exports``, the
``.dynsym`` of 470.256.02, 525.147.05, 535.261.03 and 550.163.01); where those lists are at
hand, the simulator of each branch is held against them. The reader, run on each branch,
loses exactly the facts that branch cannot report, and nothing else.
"""

from __future__ import annotations

import ctypes
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.facts import FabricInfo, NodeFacts
from gfd.nvml.branches import EMULATED_BRANCHES, FIRST_EXPORTED_IN, LATEST_BRANCH, driver_branch
from gfd.nvml.reader import NVML_CALLS
from gfd.sim import configure_library, library_path, load_profile, prepare_machine, simulate
from gfd.sim.branch_library import dynamic_exports
from tests.oracles import oracle_path
from tests.sim import read_simulated

#: A version of each emulated branch, as NVIDIA numbers its releases.
BRANCH_VERSIONS = {
    470: "470.256.02",
    525: "525.147.05",
    535: "535.261.03",
    550: "550.163.01",
    570: "570.148.08",
}


def simulator_functions() -> set[str]:
    return {name for name in dynamic_exports(library_path()) if name.startswith("nvml")}


def on_branch(facts: NodeFacts, branch: int) -> NodeFacts:
    """``facts`` as the driver of ``branch`` reports them: what it has no call for is absent."""
    gpus = []
    for gpu in facts.gpus:
        fabric = gpu.fabric
        if branch < 525:
            fabric = None
        elif branch < 550 and fabric is not None:
            fabric = dataclasses.replace(fabric, health_mask=None)
        gpus.append(
            dataclasses.replace(
                gpu, fabric=fabric, gpu_numa_id=gpu.gpu_numa_id if branch >= 550 else None
            )
        )
    return dataclasses.replace(facts, driver_version=BRANCH_VERSIONS[branch], gpus=tuple(gpus))


@pytest.mark.parametrize("branch", EMULATED_BRANCHES)
def test_each_branch_library_exports_what_the_table_says(branch: int, tmp_path: Path) -> None:
    facts = dataclasses.replace(
        load_profile("t4-single").facts, driver_version=BRANCH_VERSIONS[branch]
    )
    machine = prepare_machine(facts, tmp_path)
    library = ctypes.CDLL(str(machine.nvml_dir / "libnvidia-ml.so.1"))
    for name in sorted(simulator_functions()):
        expected = branch >= FIRST_EXPORTED_IN.get(name, 470)
        assert hasattr(library, name) == expected, f"branch {branch}: {name}"
    # The library still works on the functions it keeps.
    configure_library(library, machine.config_path)
    count = ctypes.c_uint()
    assert library.nvmlInitWithFlags(0) == 0
    assert library.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value == 1
    assert library.nvmlShutdown() == 0
    configure_library(library, None)


@pytest.mark.oracle("nvml-exports")
def test_branch_libraries_match_the_real_export_lists() -> None:
    """Every function the simulator implements is exported on a branch iff NVIDIA's is."""
    lists = oracle_path("nvml-exports")
    versions = sorted(lists.glob("libnvidia-ml.so.*.txt"))
    assert {driver_branch(f.name.removeprefix("libnvidia-ml.so.")) for f in versions} == set(
        EMULATED_BRANCHES[:-1]
    )
    functions = simulator_functions()
    for listing in versions:
        version = listing.name.removeprefix("libnvidia-ml.so.").removesuffix(".txt")
        real = set(listing.read_text().split())
        branch = driver_branch(version)
        wrong = sorted(
            name
            for name in functions
            if (name in real) != (branch >= FIRST_EXPORTED_IN.get(name, 470))
        )
        assert not wrong, f"{version}: the simulator's export set differs on {wrong}"


@pytest.mark.parametrize("branch", EMULATED_BRANCHES)
@pytest.mark.parametrize("profile", ["gb200-nvl4", "dgx-a100-mig-mixed", "dgx1-v100"])
def test_reader_on_every_branch_loses_only_what_the_branch_lacks(branch: int, profile: str) -> None:
    facts = on_branch(load_profile(profile).facts, branch)
    absent: list[tuple[str, str]] = []
    assert read_simulated(facts, lambda call, cause: absent.append((call, cause))) == facts
    missing = {call for call, cause in absent if cause == "NVML_ERROR_FUNCTION_NOT_FOUND"}
    lacking = {name for name, first in FIRST_EXPORTED_IN.items() if branch < first}
    # Only functions the branch lacks are missing, each an optional call or one with a fallback.
    assert missing <= lacking & {c.symbol for c in NVML_CALLS if c.role == "optional" or c.fallback}
    assert ("nvmlDeviceGetNumaNodeId" in missing) == (branch < 550)


def test_fabric_falls_back_to_the_v1_call_without_health_mask() -> None:
    facts = on_branch(load_profile("gb200-nvl4").facts, 535)
    assert all(g.fabric is not None and g.fabric.health_mask is None for g in facts.gpus)
    read = read_simulated(facts)
    assert [g.fabric for g in read.gpus] == [g.fabric for g in facts.gpus]
    assert isinstance(read.gpus[0].fabric, FabricInfo) and read.gpus[0].fabric.state == "completed"


def test_mig_on_470_reads_profiles_through_the_v1_call() -> None:
    facts = on_branch(load_profile("dgx-a100-mig-mixed").facts, 470)
    calls: list[tuple[str, str]] = []
    assert read_simulated(facts, lambda call, cause: calls.append((call, cause))) == facts
    assert ("nvmlDeviceGetGpuInstanceProfileInfoV", "NVML_ERROR_FUNCTION_NOT_FOUND") in calls


@pytest.mark.parametrize("version", ["545.29.06", "390.157", "510.108.03"])
def test_unknown_branch_is_refused_naming_the_file_and_field(version: str, tmp_path: Path) -> None:
    text = load_profile("t4-single").source
    profile = tmp_path / "node.yaml"
    original = Path(text).read_text()
    profile.write_text(
        original.replace("driver_version: 535.261.03", f"driver_version: '{version}'")
    )
    done = subprocess.run(
        [sys.executable, "-m", "gfd.sim", str(profile), str(tmp_path / "machine")],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{profile}: driver_version: driver branch {version.split('.')[0]}" in line
    assert "470, 525, 535, 550 and 570 or later" in line


@pytest.mark.parametrize(
    ("field", "branch", "problem"),
    [
        ("gpu_numa_id", 535, "has no nvmlDeviceGetNumaNodeId"),
        ("fabric", 470, "has no nvmlDeviceGetGpuFabricInfo"),
        ("fabric.health_mask", 525, "which has no health mask"),
    ],
)
def test_facts_a_branch_cannot_report_are_refused(field: str, branch: int, problem: str) -> None:
    facts = load_profile("gb200-nvl4").facts
    gpus = [dataclasses.replace(g, gpu_numa_id=None) for g in facts.gpus]
    if field == "gpu_numa_id":
        gpus[0] = dataclasses.replace(gpus[0], gpu_numa_id=1)
    facts = dataclasses.replace(facts, driver_version=BRANCH_VERSIONS[branch], gpus=tuple(gpus))
    with pytest.raises(Exception, match=problem) as raised, simulate(facts):
        pass
    assert f"gpus[0].{field}" in str(raised.value)


def test_versions_map_to_branches() -> None:
    assert driver_branch("470.256.02") == 470
    assert driver_branch("580.105.08") == LATEST_BRANCH
    assert driver_branch("595.1") == LATEST_BRANCH
    # NVML's version text is opaque when it names no number: served as the latest.
    assert driver_branch("custom-build") == LATEST_BRANCH
