"""Changing a simulated machine under a running reader, as a driver, GPU or link change would.

The simulator library pynvml holds is re-configured in place with new facts (and faults);
the machine's sysfs tree stays as it was, so a GPU taken out of the facts is still on the
PCI bus: a GPU that fell off it.
"""

from __future__ import annotations

import ctypes
import dataclasses
from pathlib import Path

from gfd.facts import NodeFacts
from gfd.sim import SimulatedMachine, configure_library
from gfd.sim.faults import NO_FAULTS, Faults
from gfd.sim.machine_file import render_machine_file


def serve(
    machine: SimulatedMachine, facts: NodeFacts, directory: Path, faults: Faults = NO_FAULTS
) -> None:
    """Re-configure the loaded simulator (the library pynvml holds) to serve ``facts``."""
    path = directory / "changed.conf"
    path.write_text(render_machine_file(facts, faults), encoding="utf-8")
    configure_library(ctypes.CDLL(str(machine.library_path)), path)


def without_last_gpu(facts: NodeFacts) -> NodeFacts:
    """``facts`` with the last GPU gone, and the pairs that named it."""
    last = len(facts.gpus) - 1
    return dataclasses.replace(
        facts,
        gpus=facts.gpus[:last],
        pci_pairs=tuple(p for p in facts.pci_pairs if p.b < last),
        nvlink_p2p=tuple(p for p in facts.nvlink_p2p if p.b < last),
    )
