"""Tests of the NVML simulator (gfd.sim)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from gfd.facts import NodeFacts
from gfd.sim import SimulatedMachine, SimulationProfile, library_path, simulate


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
