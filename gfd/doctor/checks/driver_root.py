"""The ``driver-root`` link: the driver's root, when one is used, holds a loadable NVML.

A root is used when ``--driver-root-ctr-path`` names one, or when ``/driver-root`` is
mounted (:mod:`gfd.nvml.driver_root`). No root in use is fine: NVML then comes from the
dynamic linker's search, where the NVIDIA container runtime puts it.
"""

from __future__ import annotations

from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, ok, problem


def examine(examination: Examination) -> Answer:
    lookup = examination.driver_root
    if examination.simulated:
        return ok("not used under --simulate: NVML is the simulator's")
    if lookup.root is None:
        return ok(f"no driver root in use ({lookup.chosen}): NVML comes from the dynamic linker")
    if lookup.error is not None:
        return problem(
            f"driver root {lookup.root} ({lookup.chosen}): {lookup.error}",
            "mount the driver's root there (hostPath /run/nvidia/driver under the GPU "
            "Operator, / for a driver installed on the host), or point "
            "--driver-root-ctr-path at where it is mounted ('' for none)",
        )
    return ok(f"driver root {lookup.root} ({lookup.chosen}) holds {lookup.library}")
