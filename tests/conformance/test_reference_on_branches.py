"""NVIDIA's GPU Feature Discovery and gfd on the same simulated machine, one per driver branch.

Both programs load the simulated ``libnvidia-ml.so.1`` of the machine's branch (470, 525,
535, 550, 570+: the export set of that branch's real library); the harness is
``tests/conformance/reference.py``. The label maps must be equal but for gfd's own
topology labels, the one reviewed difference that applies to these machines
(``tests/conformance/differences.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.facts import NodeFacts
from tests.conformance.differences import GFD_TOPOLOGY_KEYS
from tests.conformance.reference import machine_for, reference_binary, run_gfd, run_reference

#: One bundled profile per emulated driver branch.
PROFILES_BY_BRANCH = {
    470: "k80-pcie-tree",
    525: "dgx1-v100",
    535: "t4-single",
    550: "dgx-a100",
    570: "dgx-h100",
}


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_binary()


@pytest.mark.oracle("reference-gfd")
@pytest.mark.parametrize(("branch", "profile"), sorted(PROFILES_BY_BRANCH.items()))
def test_same_labels_as_the_reference_on_each_branch(
    reference: Path, branch: int, profile: str, tmp_path: Path
) -> None:
    machine = machine_for(profile, tmp_path)
    theirs = run_reference(reference, machine, tmp_path / "reference.out").labels
    ours = run_gfd(machine, tmp_path / "gfd.out").labels
    assert theirs is not None and ours is not None
    assert set(ours) - set(theirs) <= GFD_TOPOLOGY_KEYS, sorted(set(ours) - set(theirs))
    common = {k: v for k, v in ours.items() if k not in GFD_TOPOLOGY_KEYS}
    assert common == theirs
    # The machine really runs that branch (both read it from the simulated NVML).
    assert theirs["nvidia.com/cuda.driver-version.major"] == str(branch)


@pytest.mark.oracle("reference-gfd")
def test_a_node_without_gpus_gets_the_references_labels(reference: Path, tmp_path: Path) -> None:
    """NVML up, zero GPUs: no cuda.*, no gpu.machine, only vgpu.present (and no topology)."""
    facts = NodeFacts(driver_version="550.163.01", cuda_driver_version=12040, machine_type="VM")
    machine = machine_for(facts, tmp_path)
    theirs = run_reference(reference, machine, tmp_path / "reference.out").labels
    assert theirs == {"nvidia.com/vgpu.present": "false"}
    assert run_gfd(machine, tmp_path / "gfd.out").labels == theirs
