"""The NVML reader across cycles: one session, static facts read once, every change still seen.

:class:`gfd.nvml.reader.NvmlReader` keeps NVML initialised between reads and does not ask
again what cannot change while a GPU keeps its UUID. These tests hold it to the central
property (reading a simulated machine gives back its facts) read after read, and swap
the machine under an open session (the simulator re-configured in place, as a driver,
MIG or link change would look) to prove the very next read sees the new machine.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from gfd.facts import FabricInfo, Gpu, NodeFacts, NvLink
from gfd.nvml.reader import NvmlReader, read_facts
from gfd.sim import SimulatedMachine, configure_library, load_profile, simulate
from tests.sim_swap import serve


def _reader(machine: SimulatedMachine) -> NvmlReader:
    return NvmlReader(
        library_path=machine.library_path,
        sysfs_root=machine.sysfs_root,
        machine_type_file=machine.machine_type_file,
    )


@pytest.mark.parametrize(
    "profile", ["dgx-h100", "dgx-a100-mig-mixed", "dgx2-v100", "k80-pcie-tree", "gb200-nvl4"]
)
def test_reads_of_one_session_give_the_facts_each_time_with_fewer_calls(profile: str) -> None:
    expected = load_profile(profile).facts
    with simulate(profile) as machine:
        reader = _reader(machine)
        try:
            first = reader.read()
            first_calls = reader.last_calls
            second = reader.read()
            steady_calls = reader.last_calls
            third = reader.read()
        finally:
            reader.close()
        fresh_calls = _calls_of_a_fresh_read(machine)
    assert first == second == third == expected
    # The first read of a session is exactly a one-shot read.
    assert first_calls == fresh_calls
    assert steady_calls < first_calls
    assert reader.last_calls == steady_calls


def _calls_of_a_fresh_read(machine: SimulatedMachine) -> int:
    reader = _reader(machine)
    try:
        reader.read()
        return reader.last_calls
    finally:
        reader.close()


def _replace_gpu(facts: NodeFacts, index: int, **changes: object) -> NodeFacts:
    gpus = list(facts.gpus)
    gpus[index] = dataclasses.replace(gpus[index], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(facts, gpus=tuple(gpus))


def _link_down(facts: NodeFacts) -> NodeFacts:
    gpu = facts.gpus[3]
    links = list(gpu.nvlinks)
    links[5] = NvLink(index=links[5].index, active=False, remote_bus_id=None, remote_type=None)
    return _replace_gpu(facts, 3, nvlinks=tuple(links))


def _one_gpu_fewer(facts: NodeFacts) -> NodeFacts:
    last = len(facts.gpus) - 1
    return dataclasses.replace(
        facts,
        gpus=facts.gpus[:last],
        pci_pairs=tuple(p for p in facts.pci_pairs if p.b < last),
    )


def _gpu_replaced(facts: NodeFacts) -> NodeFacts:
    old = facts.gpus[2]
    return _replace_gpu(
        facts,
        2,
        uuid=old.uuid[:-4] + "beef",
        memory_total_bytes=(old.memory_total_bytes or 0) // 2,
        cpu_affinity="0-3",
    )


def _mig_devices_recreated(facts: NodeFacts) -> NodeFacts:
    gpu = facts.gpus[0]
    kept = tuple(dataclasses.replace(m, uuid=m.uuid[:-4] + "0a0a") for m in gpu.mig_devices[1:])
    return _replace_gpu(facts, 0, mig_devices=kept)


def _mig_disabled(facts: NodeFacts) -> NodeFacts:
    return _replace_gpu(facts, 1, mig_mode_current=False, mig_mode_pending=False, mig_devices=())


def _fabric_completed(facts: NodeFacts) -> NodeFacts:
    gpu: Gpu = facts.gpus[0]
    assert gpu.fabric is not None
    fabric = dataclasses.replace(gpu.fabric, state="in-progress", clique_id=0)
    return _replace_gpu(facts, 0, fabric=fabric)


CHANGES: dict[str, tuple[str, Callable[[NodeFacts], NodeFacts]]] = {
    "driver upgraded": (
        "dgx-h100",
        lambda f: dataclasses.replace(f, driver_version="570.172.08", cuda_driver_version=12080),
    ),
    "an NVLink went down": ("dgx-h100", _link_down),
    "a GPU fell off the bus": ("dgx-h100", _one_gpu_fewer),
    "a GPU was replaced (new UUID)": ("dgx-h100", _gpu_replaced),
    "MIG devices destroyed and re-created": ("dgx-a100-mig-mixed", _mig_devices_recreated),
    "MIG turned off on one GPU": ("dgx-a100-mig-mixed", _mig_disabled),
    "fabric state changed": ("gb200-nvl4", _fabric_completed),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_under_an_open_session_is_seen_by_the_next_read(
    change: str, tmp_path: Path
) -> None:
    profile, make = CHANGES[change]
    before = load_profile(profile).facts
    after = make(before)
    assert after != before
    with simulate(profile) as machine:
        reader = _reader(machine)
        try:
            assert reader.read() == before
            assert reader.read() == before
            serve(machine, after, tmp_path)
            assert reader.read() == after
            assert reader.read() == after
            # And back: a cache must not hold on to the changed facts either.
            serve(machine, before, tmp_path)
            assert reader.read() == before
        finally:
            reader.close()


def test_an_nvml_error_ends_the_session_and_the_next_read_starts_afresh(tmp_path: Path) -> None:
    facts = load_profile("dgx-h100").facts
    with simulate("dgx-h100") as machine:
        reader = _reader(machine)
        try:
            reader.read()
            steady = reader.read() and reader.last_calls
            (tmp_path / "none").mkdir()
            configure_library(ctypes.CDLL(str(machine.library_path)), None)
            with pytest.raises(Exception, match="NVML"):
                reader.read()
            serve(machine, facts, tmp_path)
            assert reader.read() == facts
            # A new session: everything was asked again.
            assert reader.last_calls > steady
        finally:
            reader.close()


def test_a_whole_read_comes_back_after_full_read_every_reads() -> None:
    with simulate("dgx-h100") as machine:
        reader = _reader(machine)
        try:
            counts = []
            for _ in range(NvmlReader.FULL_READ_EVERY + 1):
                reader.read()
                counts.append(reader.last_calls)
        finally:
            reader.close()
    assert counts[0] == counts[-1] > counts[1]
    assert len(set(counts[1:-1])) == 1


def test_two_readers_in_one_process_take_the_session_in_turn() -> None:
    h100 = load_profile("dgx-h100").facts
    with simulate("dgx-h100") as machine:
        first, second = _reader(machine), _reader(machine)
        try:
            assert first.read() == h100
            assert second.read() == h100
            assert first.read() == h100
            # The one-shot read_facts takes and gives back the session too.
            assert (
                read_facts(
                    library_path=machine.library_path,
                    sysfs_root=machine.sysfs_root,
                    machine_type_file=machine.machine_type_file,
                )
                == h100
            )
            assert first.read() == h100
        finally:
            first.close()
            second.close()


def test_fabric_facts_are_present_in_the_profile_used_above() -> None:
    # The fabric case is only a test if the profile has fabric facts to change.
    gpu = load_profile("gb200-nvl4").facts.gpus[0]
    assert isinstance(gpu.fabric, FabricInfo) and gpu.fabric.state == "completed"
