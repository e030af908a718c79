"""Tests of the NVML simulator (gfd.sim)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

from gfd.facts import NodeFacts
from gfd.nvml.reader import read_facts
from gfd.sim import SimulatedMachine, SimulationProfile, library_path, simulate

#: The bundled profiles whose facts are a fault, and the health reason each models: the
#: GB200 tray whose fabric registration failed (kept to withhold ``gpu.clique``).
FAULTY_PROFILES = {"gb200-nvl4-fabric-broken": "FabricNotReady"}


def without_memory_health(facts: NodeFacts) -> NodeFacts:
    """``facts`` whose GPUs report no memory health (as facts read before the field, or from a
    driver without the calls): the bundled profiles carry it, these tests want it gone."""
    gpus = tuple(dataclasses.replace(gpu, memory_health=None) for gpu in facts.gpus)
    return dataclasses.replace(facts, gpus=gpus)


@contextlib.contextmanager
def simulate_raw(
    profile: str | Path | SimulationProfile | NodeFacts,
) -> Iterator[SimulatedMachine]:
    """``simulate`` through the full simulator library, the one the ``lib``/``nvml`` fixtures bind.

    These tests call the C library directly; which driver branch's exports it hides is
    tested on its own (tests/sim/test_sim_branches.py).
    """
    with simulate(profile, library=library_path()) as machine:
        yield machine


def read_simulated(
    profile: str | Path | SimulationProfile | NodeFacts,
    on_absent: Callable[[str, str], None] | None = None,
) -> NodeFacts:
    """What gfd's reader reads on ``profile`` served by the simulator (its branch's exports)."""
    with simulate(profile) as machine:
        return read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            on_absent=on_absent,
        )
