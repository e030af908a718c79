"""The ``nvlink`` check: NVLinks down on a GPU (``NVLinkDegraded``), by GPU UUID, judged two ways.

- **Fewer active than expected, from the first cycle.** A GPU that reports NVLinks (NVML
  lists them: ``NVML_FI_DEV_NVLINK_LINK_COUNT``) is expected to have active as many as
  its model is built with (:data:`MODEL_LINKS`, from NVIDIA's published specifications:
  the SXM boards, whose links are soldered to the baseboard or its NVSwitches), and as
  many as the most any other GPU of the same model on the node has, where that model's
  GPUs reach an NVSwitch (a GPU of an NVSwitch baseboard has every link cabled). So a
  GPU that booted with two of its 18 links down is reported at once.
- **Active earlier, now down.** A link seen active earlier in this process's life that
  is now inactive, or that NVML no longer reports at all. This catches a model outside
  the table without peers on an NVSwitch (a point-to-point mesh of an unknown board).

Not judged: a GPU NVML reports no NVLinks for (GPUs without NVLink; a GPU passed to a
virtual machine, whose link count NVML does not report: the real H200 captured), a model
none of whose GPUs on the node has a link up (NVLink not in use there), and the bridged
links of PCIe cards (A100 PCIe, H100 NVL, RTX boards): a card without a bridge
is a card without a bridge, not a degraded one, so neither the table nor the peer rule
names them (their links reach other GPUs, never an NVSwitch). What was seen up outlives
a reload.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import ClassVar

from gfd.base.frozen import frozen_dataclass
from gfd.config.values import NVLINK_CHECK
from gfd.facts import Gpu
from gfd.facts.pci import sysfs_bus_id
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

REASON_NVLINK = "NVLinkDegraded"


@frozen_dataclass
class ModelLinks:
    """The NVLinks a GPU model is built with: its NVML names (``pattern``) and ``links``."""

    pattern: re.Pattern[str]
    links: int
    #: The model as NVIDIA's specifications name it.
    model: str


#: NVLinks per GPU of the SXM models, as NVIDIA publishes them (the NVLink page's "maximum
#: links per GPU", and each architecture's whitepaper): Volta 6 (NVLink 2, 300 GB/s),
#: Ampere 12 (NVLink 3, 600 GB/s), Hopper 18 (NVLink 4, 900 GB/s), Blackwell 18 (NVLink 5,
#: 1.8 TB/s). Matched against NVML's product name in full; the PCIe and NVL cards of the
#: same chips (``Tesla V100-PCIE-…``, ``NVIDIA A100-PCIE-…``, ``NVIDIA H100 NVL``,
#: ``NVIDIA H200 NVL``) are other names, and not listed.
MODEL_LINKS: tuple[ModelLinks, ...] = (
    ModelLinks(re.compile(r"Tesla V100-SXM[23]-\d+GB"), 6, "V100 SXM2/SXM3"),
    ModelLinks(re.compile(r"NVIDIA A100-SXM4-\d+GB"), 12, "A100 SXM4"),
    ModelLinks(re.compile(r"NVIDIA H100 80GB HBM3"), 18, "H100 SXM5"),
    ModelLinks(re.compile(r"NVIDIA H200"), 18, "H200 SXM"),
    ModelLinks(re.compile(r"NVIDIA B200"), 18, "B200"),
    ModelLinks(re.compile(r"NVIDIA GB200"), 18, "GB200"),
)


@functools.lru_cache(maxsize=64)
def model_links(name: str) -> ModelLinks | None:
    """The published NVLink count of the GPU model NVML names ``name``, if listed (a node
    has a model or two: the answer is kept, as every cycle asks it again)."""
    return next((known for known in MODEL_LINKS if known.pattern.fullmatch(name)), None)


@frozen_dataclass
class Expected:
    """How many active NVLinks a GPU should have, and why (for the message)."""

    links: int
    why: str


def expected_links(
    gpus: Sequence[Gpu], active: Sequence[frozenset[int]] | None = None
) -> dict[str, Expected]:
    """Per GPU UUID (of those that report NVLinks), the active links it should have;
    ``active``: each GPU's active link indices, when the caller has them already."""
    if active is None:
        active = [frozenset(link.index for link in gpu.nvlinks if link.active) for gpu in gpus]
    in_use: set[str] = set()
    most: dict[str, int] = {}
    for gpu, up in zip(gpus, active, strict=True):
        if not up:
            continue
        in_use.add(gpu.name)
        if any(link.active and link.remote_type == "switch" for link in gpu.nvlinks):
            most[gpu.name] = max(most.get(gpu.name, 0), len(up))
    expected: dict[str, Expected] = {}
    for gpu in gpus:
        if not gpu.nvlinks or gpu.name not in in_use:
            # A model none of whose GPUs here has a link up does not use NVLink on this
            # node (one SXM GPU passed to a virtual machine): nothing to expect of it.
            continue
        known = model_links(gpu.name)
        peers = most.get(gpu.name, 0)
        if known is not None and known.links >= peers:
            expected[gpu.uuid] = Expected(known.links, f"{known.model} GPUs have {known.links}")
        elif peers:
            expected[gpu.uuid] = Expected(
                peers, f"the other {gpu.name} GPUs here have {peers} active"
            )
    return expected


class NvLinkCheck:
    """Reports GPUs with fewer active NVLinks than expected, or links that went down."""

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
        gpus = seen.facts.gpus
        actives = [frozenset(link.index for link in gpu.nvlinks if link.active) for gpu in gpus]
        expected = expected_links(gpus, actives)
        problems = []
        for gpu, active in zip(gpus, actives, strict=True):
            links_up = self._links_up.setdefault(gpu.uuid, set())
            down_earlier = links_up - active
            if not active <= links_up:
                links_up.update(active)
            should = expected.get(gpu.uuid)
            if not down_earlier and (should is None or len(active) >= should.links):
                continue
            where = gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))
            if should is not None and len(active) < should.links:
                inactive = {link.index for link in gpu.nvlinks if not link.active}
                down = _listing(inactive | down_earlier)
                problems.append(
                    Problem(
                        NVLINK_CHECK,
                        REASON_NVLINK,
                        f"{where}: {len(active)} of {should.links} NVLinks active"
                        f"{f' ({down} down)' if down else ''}: {should.why}",
                    )
                )
            elif down_earlier:
                problems.append(
                    Problem(
                        NVLINK_CHECK,
                        REASON_NVLINK,
                        f"{where}: {_listing(down_earlier)} down (active earlier)",
                    )
                )
        return CheckResult(NVLINK_CHECK, FAILING if problems else OK, tuple(problems))


def _listing(links: set[int]) -> str:
    """``NVLinks 4, 11`` / ``NVLink 3`` / ``""``."""
    if not links:
        return ""
    plural = "s" if len(links) > 1 else ""
    return f"NVLink{plural} {', '.join(map(str, sorted(links)))}"
