"""NVIDIA's GPU Feature Discovery and gfd on the same simulated machine, one per driver branch.

Both programs load the simulated ``libnvidia-ml.so.1`` of the machine's branch (470, 525,
535, 550, 570+: the export set of that branch's real library) from ``LD_LIBRARY_PATH``,
as on a real node. The reference reads each GPU's PCI directory from the fixed path
``/sys/bus/pci/devices`` (it has no flag for it), so it runs in a private mount namespace
with the simulator's tree bind-mounted there (``unshare -m``, root only); gfd is pointed at
the same tree with ``--sysfs-root``. The label maps must be equal but for gfd's own
topology labels, the one reviewed difference.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.facts import NodeFacts
from gfd.sim import prepare_machine
from tests.oracles import oracle_path, oracles_required
from tests.reliability.agent_process import parse_label_lines

#: One bundled profile per emulated driver branch.
PROFILES_BY_BRANCH = {
    470: "k80-pcie-tree",
    525: "dgx1-v100",
    535: "t4-single",
    550: "dgx-a100",
    570: "dgx-h100",
}
#: gfd's interconnect labels, which the reference has no equivalent of (docs/labels.md).
GFD_ONLY_KEYS = frozenset(
    f"nvidia.com/gpu.{name}"
    for name in (
        "interconnect",
        "numa-nodes",
        "numa.max-gpus",
        "nvlink-domains",
        "nvlink.largest-domain",
        "nvlink.min-links",
        "pcie.worst",
    )
)


def _can_unshare() -> str | None:
    """Why a private mount namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root: the reference's fixed /sys/bus/pci/devices needs a bind mount"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return None


@pytest.fixture(scope="module")
def reference() -> Path:
    binary = oracle_path("reference-gfd")
    reason = _can_unshare()
    if reason is not None:
        if oracles_required():
            pytest.fail(f"the reference cannot run on a simulated machine: {reason}")
        pytest.skip(reason)
    return binary


def _reference_labels(binary: Path, machine_dir: Path, env: dict[str, str]) -> dict[str, str]:
    output = machine_dir / "reference.out"
    devices = machine_dir / "sys" / "bus" / "pci" / "devices"
    script = (
        f"mount --bind {devices} /sys/bus/pci/devices && exec {binary} --oneshot --no-timestamp "
        f"--use-node-feature-api=false --output-file {output} "
        f"--machine-type-file {machine_dir / 'sys/class/dmi/id/product_name'}"
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return parse_label_lines(output.read_text())


def _gfd_labels(machine_dir: Path, env: dict[str, str]) -> dict[str, str]:
    output = machine_dir / "gfd.out"
    done = subprocess.run(
        [
            sys.executable, "-m", "gfd", "--oneshot", "--no-timestamp", "--log-level", "error",
            "--output-file", str(output),
            "--sysfs-root", str(machine_dir / "sys"),
            "--machine-type-file", str(machine_dir / "sys/class/dmi/id/product_name"),
        ],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return parse_label_lines(output.read_text())


@pytest.mark.oracle("reference-gfd")
@pytest.mark.parametrize(("branch", "profile"), sorted(PROFILES_BY_BRANCH.items()))
def test_same_labels_as_the_reference_on_each_branch(
    reference: Path, branch: int, profile: str, tmp_path: Path
) -> None:
    machine = prepare_machine(profile, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    env.update(machine.environment())
    theirs = _reference_labels(reference, tmp_path, env)
    ours = _gfd_labels(tmp_path, env)
    assert set(ours) - set(theirs) <= GFD_ONLY_KEYS, sorted(set(ours) - set(theirs))
    common = {k: v for k, v in ours.items() if k not in GFD_ONLY_KEYS}
    assert common == theirs
    # The machine really runs that branch (both read it from the simulated NVML).
    assert theirs["nvidia.com/cuda.driver-version.major"] == str(branch)


@pytest.mark.oracle("reference-gfd")
def test_a_node_without_gpus_gets_the_references_labels(reference: Path, tmp_path: Path) -> None:
    """NVML up, zero GPUs: no cuda.*, no gpu.machine, only vgpu.present (and no topology)."""
    facts = NodeFacts(driver_version="550.163.01", cuda_driver_version=12040, machine_type="VM")
    machine = prepare_machine(facts, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    env.update(machine.environment())
    theirs = _reference_labels(reference, tmp_path, env)
    assert theirs == {"nvidia.com/vgpu.present": "false"}
    assert _gfd_labels(tmp_path, env) == theirs
