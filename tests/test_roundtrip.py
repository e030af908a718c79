"""The central test: reading a simulated machine through the real pynvml gives back its facts.

It proves the reader against an NVML ABI and the simulator against the reader, for
every bundled profile, and for a facts file captured and replayed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.facts import dump_facts, load_facts
from gfd.nvml.reader import read_facts
from gfd.sim import BUNDLED_PROFILES, load_profile, simulate

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
