"""A simulated machine that gfd alone reads (``gfd --simulate``) leaves out the sysfs files
only other programs read, and gfd reads it exactly as the full machine.

The oracle is the full tree (what ``prepare_machine`` writes for NVIDIA's reference): the
facts the reader returns (NVML, the sysfs attributes, vGPU from the config space) and the
GPUs the gpu-lost check finds on the PCI bus must not change with the files left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.facts import NodeFacts
from gfd.facts.pci import PCI_DEVICES
from gfd.health.checks.gpu_lost import PciGpu, PciScanner
from gfd.nvml.reader import NvmlReader
from gfd.sim import BUNDLED_PROFILES, load_profile, simulate
from gfd.sim.sysfs_tree import READ_BY_OTHER_PROGRAMS


def _read(
    profile: str, tmp_path: Path, for_other_programs: bool
) -> tuple[NodeFacts, tuple[PciGpu, ...] | None, set[str]]:
    with simulate(
        load_profile(profile), workdir=tmp_path, for_other_programs=for_other_programs
    ) as machine:
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        try:
            facts = reader.read()
        finally:
            reader.close()
        devices = machine.sysfs_root / PCI_DEVICES
        names = {path.name for path in devices.glob("*/*")}
        return facts, PciScanner(machine.sysfs_root).scan(), names


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_gfd_reads_the_machine_without_other_programs_files_as_the_full_one(
    profile: str, tmp_path: Path
) -> None:
    full_facts, full_gpus, full_names = _read(profile, tmp_path, for_other_programs=True)
    facts, gpus, names = _read(profile, tmp_path, for_other_programs=False)
    assert (facts, gpus) == (full_facts, full_gpus)
    # Not vacuous: the full tree has the files, the other not.
    if full_facts.gpus:
        assert "resource" in full_names
    assert names == full_names - set(READ_BY_OTHER_PROGRAMS)
