"""Linux cpulists (``0-47,96-143``): how the facts write a set of CPUs.

This module owns the one canonical form of a cpulist, shared by the reader (a GPU's CPU
affinity), the simulator and the topology renderer, and the pattern the facts check a
cpulist against.
"""

from __future__ import annotations

import re

CPULIST_PATTERN = re.compile(r"^(\d+(-\d+)?(,\d+(-\d+)?)*)?$")


def cpulist_from_ids(cpus: list[int] | tuple[int, ...]) -> str:
    """Canonical Linux cpulist for a set of CPU ids: ``[0,1,2,5]`` → ``0-2,5``."""
    ids = sorted(set(cpus))
    ranges: list[str] = []
    start = prev = None
    for cpu in ids:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
        start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(ranges)
