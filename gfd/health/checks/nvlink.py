"""The ``nvlink`` check: an NVLink seen active earlier in this process's life that is now
inactive or gone (``NVLinkDegraded``), by GPU UUID.

A link never seen up is not reported: a GPU whose links are unused (or cabled to
nothing) is not degraded. What was seen up outlives a reload.
"""

from __future__ import annotations

from typing import ClassVar

from gfd.config.values import NVLINK_CHECK
from gfd.health.check import (
    FAILING,
    OK,
    UNKNOWN,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    gpu_name,
)
from gfd.pci import sysfs_bus_id

REASON_NVLINK = "NVLinkDegraded"


class NvLinkCheck:
    """Reports the links of each GPU that were active in an earlier cycle and are not now."""

    name: ClassVar[str] = NVLINK_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_NVLINK,)
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        #: Per GPU UUID: the links seen active.
        self._links_up: dict[str, set[int]] = {}
        if isinstance(previous, NvLinkCheck):
            self._links_up = {uuid: set(links) for uuid, links in previous._links_up.items()}

    def observe(self, seen: Observation) -> CheckResult:
        if seen.facts is None:
            return CheckResult(NVLINK_CHECK, UNKNOWN)
        problems = []
        for gpu in seen.facts.gpus:
            active = {link.index for link in gpu.nvlinks if link.active}
            links_up = self._links_up.setdefault(gpu.uuid, set())
            down = sorted(links_up - active)
            links_up.update(active)
            if down:
                links = ", ".join(map(str, down))
                plural = "s" if len(down) > 1 else ""
                problems.append(
                    Problem(
                        NVLINK_CHECK,
                        REASON_NVLINK,
                        f"{gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))}: NVLink{plural} "
                        f"{links} down (active earlier)",
                    )
                )
        return CheckResult(NVLINK_CHECK, FAILING if problems else OK, tuple(problems))
