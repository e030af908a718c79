"""The simulator emulates driver branches: each exports what that branch's real NVML exports.

The export facts come from NVIDIA's real libraries (``../shared/reference/nvml-exports``, the
``.dynsym`` of 470.256.02, 525.147.05, 535.261.03 and 550.163.01); where those lists are at
hand, the simulator of each branch is held against them. The reader, run on each branch,
loses exactly the facts that branch cannot report, and nothing else. Any other driver version
is served with the export set of the nearest emulated branch at or below it (before 470:
470's, with a warning); only a text that is no driver version is refused.
"""

from __future__ import annotations

import ctypes
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.facts import FabricInfo, FactsError, NodeFacts, PcieLink
from gfd.nvml.branches import (
    EMULATED_BRANCHES,
    FIRST_EXPORTED_IN,
    LATEST_BRANCH,
    NotADriverVersion,
    driver_branch,
    exported_in,
    older_than_emulated,
)
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


def on_branch(facts: NodeFacts, branch: int, version: str | None = None) -> NodeFacts:
    """``facts`` as the driver of ``branch`` (release ``version``, by default the branch's
    own) reports them: what it has no call for is absent."""
    gpus = []
    for gpu in facts.gpus:
        fabric = gpu.fabric
        if branch < 525:
            fabric = None
        elif branch < 550 and fabric is not None:
            fabric = dataclasses.replace(fabric, health_mask=None)
        pcie = gpu.pcie
        if branch < 525 and pcie is not None:
            pcie = dataclasses.replace(pcie, gpu_max_generation=None)
        gpus.append(
            dataclasses.replace(
                gpu,
                fabric=fabric,
                gpu_numa_id=gpu.gpu_numa_id if branch >= 550 else None,
                pcie=pcie,
            )
        )
    return dataclasses.replace(
        facts, driver_version=version or BRANCH_VERSIONS[branch], gpus=tuple(gpus)
    )


@pytest.mark.parametrize("branch", EMULATED_BRANCHES)
def test_each_branch_library_exports_what_the_table_says(branch: int, tmp_path: Path) -> None:
    facts = on_branch(load_profile("t4-single").facts, branch)
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
    assert {driver_branch(_version_of(listing)) for listing in versions} == set(
        EMULATED_BRANCHES[:-1]
    )
    functions = simulator_functions()
    for listing in versions:
        version = _version_of(listing)
        real = set(listing.read_text().split())
        branch = driver_branch(version)
        wrong = sorted(
            name
            for name in functions
            if (name in real) != (branch >= FIRST_EXPORTED_IN.get(name, 470))
        )
        assert not wrong, f"{version}: the simulator's export set differs on {wrong}"


def _version_of(listing: Path) -> str:
    """``libnvidia-ml.so.470.256.02.txt`` → ``470.256.02``."""
    return listing.name.removeprefix("libnvidia-ml.so.").removesuffix(".txt")


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


@pytest.mark.parametrize(
    ("version", "branch"),
    [
        ("390.157", 470),
        ("450.80.02", 470),
        ("510.108.03", 470),
        ("545.29.06", 535),
        ("560.35.03", 550),
        ("565.57.01", 550),
        ("575.64.05", 570),
        ("590.44.01", 570),
    ],
)
def test_any_driver_is_served_with_the_nearest_emulated_branch_at_or_below(
    version: str, branch: int, tmp_path: Path
) -> None:
    assert driver_branch(version) == branch
    facts = on_branch(load_profile("t4-single").facts, branch, version)
    machine = prepare_machine(facts, tmp_path)
    served = {n for n in dynamic_exports(machine.nvml_dir / "libnvidia-ml.so.1") if n[:4] == "nvml"}
    assert served == {n for n in simulator_functions() if exported_in(n, branch)}
    # The machine reports the version it was given, not its branch's.
    assert "driver_version " + version in machine.config_path.read_text().splitlines()


def test_a_driver_older_than_470_is_served_as_470_with_one_warning(tmp_path: Path) -> None:
    profile = tmp_path / "node.yaml"
    original = Path(load_profile("t4-single").source).read_text()
    older = original.replace("driver_version: 535.261.03", "driver_version: 450.80.02")
    # A driver older than 525 has no nvmlDeviceGetGpuMaxPcieLinkGeneration to report it.
    profile.write_text(older.replace("gpu_max_generation: 3, ", ""))
    done = subprocess.run(
        [sys.executable, "-m", "gfd.sim", str(profile), str(tmp_path / "machine")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "driver 450.80.02 is older than branch 470" in line
    assert "served with 470's export set" in line
    assert older_than_emulated("470.256.02") is None
    assert older_than_emulated("not a version") is None


def test_what_is_no_driver_version_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    profile = tmp_path / "node.yaml"
    original = Path(load_profile("t4-single").source).read_text()
    profile.write_text(original.replace("driver_version: 535.261.03", "driver_version: custom"))
    done = subprocess.run(
        [sys.executable, "-m", "gfd.sim", str(profile), str(tmp_path / "machine")],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{profile}: driver_version: 'custom' is not an NVIDIA driver version" in line


@pytest.mark.parametrize("text", ["", "custom-build", "v550.54.15", "550.x", "550.54.15 "])
def test_texts_that_are_no_driver_version_are_refused(text: str) -> None:
    facts = dataclasses.replace(load_profile("t4-single").facts, driver_version=text)
    with pytest.raises(FactsError, match="driver_version: .* is not an NVIDIA driver version"):
        prepare_machine(facts, Path("/nonexistent/never-written"))


@pytest.mark.parametrize(
    ("field", "branch", "problem"),
    [
        ("gpu_numa_id", 535, "has no nvmlDeviceGetNumaNodeId"),
        ("fabric", 470, "has no nvmlDeviceGetGpuFabricInfo"),
        ("fabric.health_mask", 525, "which has no health mask"),
        ("pcie.gpu_max_generation", 470, "has no nvmlDeviceGetGpuMaxPcieLinkGeneration"),
    ],
)
def test_facts_a_branch_cannot_report_are_refused(field: str, branch: int, problem: str) -> None:
    facts = load_profile("gb200-nvl4").facts
    gpus = [dataclasses.replace(g, gpu_numa_id=None) for g in facts.gpus]
    if field == "gpu_numa_id":
        gpus[0] = dataclasses.replace(gpus[0], gpu_numa_id=1)
    if field.startswith("pcie"):
        gpus = [dataclasses.replace(g, fabric=None) for g in gpus]
        gpus[0] = dataclasses.replace(gpus[0], pcie=PcieLink(5, 16, 5, 16, 5, 0))
    facts = dataclasses.replace(facts, driver_version=BRANCH_VERSIONS[branch], gpus=tuple(gpus))
    with pytest.raises(Exception, match=problem) as raised, simulate(facts):
        pass
    assert f"gpus[0].{field}" in str(raised.value)


def test_versions_map_to_branches() -> None:
    assert driver_branch("470.256.02") == 470
    assert driver_branch("580.105.08") == LATEST_BRANCH
    assert driver_branch("595.1") == LATEST_BRANCH
    assert driver_branch("550") == 550
    assert driver_branch("550.54.15.1") == 550
    with pytest.raises(NotADriverVersion):
        driver_branch("custom-build")
