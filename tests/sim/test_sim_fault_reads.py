"""The faults the GPU health checks meet, through gfd's own reader: a GPU that vanishes
from NVML's enumeration and NVLinks that go down, between two reads.

Each fault is set to fire right after the first read: ``after_calls`` is the number of
calls a whole read makes on the GPU, measured with ``gpu_lost`` (the fewest calls a lost
GPU may answer and still let a read through), since both faults count calls the way
``gpu_lost`` does. Every case runs as one-shot reads (``read_facts``) and on one open
:class:`gfd.nvml.reader.NvmlReader` session, whose caches must not hide the change.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from gfd.base.errors import NvmlGpuLost
from gfd.facts import NodeFacts, NvLink, PciPair
from gfd.facts.pci import PCI_DEVICES, sysfs_bus_id
from gfd.nvml.reader import NvmlReader, read_facts
from gfd.sim import (
    Faults,
    GpuLost,
    GpuVanished,
    NvLinkDown,
    SimulatedMachine,
    load_profile,
    simulate,
)
from tests.sim import read_simulated

READS = ["one-shot reads", "one session"]


@functools.cache
def calls_of_a_read_on(profile: str, gpu: int) -> int:
    """The NVML calls one whole read of ``profile`` makes on GPU ``gpu``."""
    loaded = load_profile(profile)

    def read_passes(after_calls: int) -> bool:
        lost = Faults(gpu_lost=(GpuLost(gpu=gpu, after_calls=after_calls),))
        try:
            read_simulated(dataclasses.replace(loaded, faults=lost))
        except NvmlGpuLost:
            return False
        return True

    high = 1
    while not read_passes(high):
        high *= 2
    low = high // 2
    while low < high:
        middle = (low + high) // 2
        if read_passes(middle):
            high = middle
        else:
            low = middle + 1
    return high


@contextmanager
def reads_of(machine: SimulatedMachine, how: str) -> Iterator[Callable[[], NodeFacts]]:
    """Read ``machine`` again and again, one-shot or on one session."""
    where = {
        "library_path": machine.library_path,
        "sysfs_root": machine.sysfs_root,
        "machine_type_file": machine.machine_type_file,
    }
    if how == "one-shot reads":
        yield lambda: read_facts(**where)  # type: ignore[arg-type]
        return
    reader = NvmlReader(**where)  # type: ignore[arg-type]
    try:
        yield reader.read
    finally:
        reader.close()


def without_gpu(facts: NodeFacts, gone: int) -> NodeFacts:
    """``facts`` as NVML reports them once GPU ``gone`` has vanished.

    The GPUs after it move down an index, and links to it read as inactive links.
    """
    bus = facts.gpus[gone].bus_id
    assert not facts.nvlink_p2p, "renumbering nvlink_p2p is not needed by these profiles"

    def moved(index: int) -> int:
        return index - 1 if index > gone else index

    gpus = tuple(
        dataclasses.replace(
            gpu,
            index=moved(gpu.index),
            nvlinks=tuple(
                NvLink(index=link.index, active=False) if link.remote_bus_id == bus else link
                for link in gpu.nvlinks
            ),
        )
        for gpu in facts.gpus
        if gpu.index != gone
    )
    pairs = tuple(
        PciPair(a=moved(pair.a), b=moved(pair.b), level=pair.level)
        for pair in facts.pci_pairs
        if gone not in (pair.a, pair.b)
    )
    return dataclasses.replace(facts, gpus=gpus, pci_pairs=pairs)


def with_links_down(facts: NodeFacts, gpu: int, links: tuple[int, ...] | None) -> NodeFacts:
    gpus = list(facts.gpus)
    gpus[gpu] = dataclasses.replace(
        gpus[gpu],
        nvlinks=tuple(
            NvLink(index=link.index, active=False) if links is None or link.index in links else link
            for link in gpus[gpu].nvlinks
        ),
    )
    return dataclasses.replace(facts, gpus=tuple(gpus))


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize(
    ("profile", "gone"),
    [
        ("dgx-a100", 3),  # NVSwitch: the other GPUs' links are the switches'
        ("dgx1-v100", 3),  # cube mesh: its peers' links to it go down with it
    ],
)
def test_a_gpu_that_vanishes_is_gone_from_the_next_read(profile: str, gone: int, how: str) -> None:
    loaded = load_profile(profile)
    before = loaded.facts
    vanished = GpuVanished(gpu=gone, after_calls=calls_of_a_read_on(profile, gone))
    faulty = dataclasses.replace(loaded, faults=Faults(gpu_vanished=(vanished,)))
    gone_bus = before.gpus[gone].bus_id
    with simulate(faulty) as machine, reads_of(machine, how) as read:
        assert read() == before
        after = read()
        assert len(after.gpus) == len(before.gpus) - 1
        assert gone_bus not in {gpu.bus_id for gpu in after.gpus}
        assert after == without_gpu(before, gone)
        # Gone for good, and still on the PCI bus.
        assert read() == after
        device = machine.sysfs_root / PCI_DEVICES / sysfs_bus_id(gone_bus)
        assert (device / "vendor").read_text() == "0x10de\n"
        assert (device / "class").read_text() == f"0x{before.gpus[gone].pci_class:06x}\n"


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("links", [(0, 3), None], ids=["links 0 and 3", "every link"])
def test_nvlinks_that_go_down_read_inactive_in_the_next_read(
    links: tuple[int, ...] | None, how: str
) -> None:
    loaded = load_profile("dgx-h100")
    before = loaded.facts
    down = NvLinkDown(gpu=5, after_calls=calls_of_a_read_on("dgx-h100", 5), links=links)
    faulty = dataclasses.replace(loaded, faults=Faults(nvlink_down=(down,)))
    with simulate(faulty) as machine, reads_of(machine, how) as read:
        first = read()
        assert all(link.active for link in first.gpus[5].nvlinks)
        assert first == before
        second = read()
        inactive = [link.index for link in second.gpus[5].nvlinks if not link.active]
        assert inactive == (list(links) if links else list(range(18)))
        assert second == with_links_down(before, 5, links)
        assert read() == second


def test_the_measured_calls_are_exactly_what_a_read_needs() -> None:
    # One call fewer and the lost GPU fails the read; the count measured is no bound.
    calls = calls_of_a_read_on("dgx-a100", 3)
    fewer = Faults(gpu_lost=(GpuLost(gpu=3, after_calls=calls - 1),))
    with pytest.raises(NvmlGpuLost):
        read_simulated(dataclasses.replace(load_profile("dgx-a100"), faults=fewer))


def test_profiles_used_above_have_what_the_cases_need() -> None:
    mesh = load_profile("dgx1-v100").facts
    gone_bus = mesh.gpus[3].bus_id
    assert any(link.remote_bus_id == gone_bus for g in mesh.gpus for link in g.nvlinks)
    assert [link.index for link in load_profile("dgx-h100").facts.gpus[5].nvlinks] == list(
        range(18)
    )
