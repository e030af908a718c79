"""NVIDIA's GPU Feature Discovery and gfd on the same simulated machine, one per driver branch.

Both programs load the simulated ``libnvidia-ml.so.1`` of the machine's branch (470, 525,
535, 550, 570+: the export set of that branch's real library); the harness is
``tests/conformance/reference.py``. The label maps must be equal but for gfd's own
topology labels, the one reviewed difference that applies to these machines
(``tests/conformance/differences.py``). The reference's side is its record
(``tests/records/reference-gfd/branches.json``) unless ``GFD_REFERENCE_BIN`` points at a
build, which then runs live; gfd always runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.facts import NodeFacts
from tests.conformance.differences import GFD_OWN_KEYS
from tests.conformance.reference import (
    MachineSpec,
    ReferenceSource,
    Run,
    facts_machine,
    profile_machine,
    reference_case,
    reference_source,
    run_gfd,
)

#: The record of this suite: ``tests/records/reference-gfd/branches.json``.
SUITE = "branches"

#: One bundled profile per emulated driver branch.
PROFILES_BY_BRANCH = {
    470: "k80-pcie-tree",
    525: "dgx1-v100",
    535: "t4-single",
    550: "dgx-a100",
    570: "dgx-h100",
}
#: NVML up, zero GPUs.
NO_GPUS = NodeFacts(driver_version="550.163.01", cuda_driver_version=12040, machine_type="VM")
NO_GPUS_RUN = Run(case_id="no-gpus", machine_key="no-gpus")


def branch_run(branch: int, profile: str) -> Run:
    return Run(case_id=f"branch-{branch}-{profile}", machine_key=profile)


def suite_cases() -> tuple[list[Run], dict[str, MachineSpec]]:
    """Every case of this suite and its machines (for the recorder, too)."""
    runs = [branch_run(b, p) for b, p in sorted(PROFILES_BY_BRANCH.items())] + [NO_GPUS_RUN]
    machines = {p: profile_machine(p) for p in PROFILES_BY_BRANCH.values()}
    machines["no-gpus"] = facts_machine("no-gpus", NO_GPUS)
    return runs, machines


@pytest.fixture(scope="module")
def source() -> ReferenceSource:
    return reference_source(SUITE)


@pytest.mark.parametrize(("branch", "profile"), sorted(PROFILES_BY_BRANCH.items()))
def test_same_labels_as_the_reference_on_each_branch(
    source: ReferenceSource, branch: int, profile: str, tmp_path: Path
) -> None:
    spec = profile_machine(profile)
    machine = spec.prepare(tmp_path)
    run = branch_run(branch, profile)
    theirs = reference_case(source, spec, run, machine, tmp_path / "reference.out").labels
    ours = run_gfd(machine, tmp_path / "gfd.out").labels
    assert theirs is not None and ours is not None
    assert set(ours) - set(theirs) <= GFD_OWN_KEYS, sorted(set(ours) - set(theirs))
    common = {k: v for k, v in ours.items() if k not in GFD_OWN_KEYS}
    assert common == theirs
    # The machine really runs that branch (both read it from the simulated NVML).
    assert theirs["nvidia.com/cuda.driver-version.major"] == str(branch)


def test_a_node_without_gpus_gets_the_references_labels(
    source: ReferenceSource, tmp_path: Path
) -> None:
    """NVML up, zero GPUs: no cuda.*, no gpu.machine, only vgpu.present (and no topology)."""
    spec = facts_machine("no-gpus", NO_GPUS)
    machine = spec.prepare(tmp_path)
    theirs = reference_case(source, spec, NO_GPUS_RUN, machine, tmp_path / "reference.out").labels
    assert theirs == {"nvidia.com/vgpu.present": "false"}
    assert run_gfd(machine, tmp_path / "gfd.out").labels == theirs
