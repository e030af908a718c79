"""The ``memory`` check: a GPU's memory as NVML reports it in the facts (``memory_health``).

Per GPU, most urgent first:

- ``GPUMemoryFailure``: the row remapper reports a failed remapping (the memory can no
  longer be repaired in place: the GPU needs service);
- ``GPUResetRequired``: a row remapping is pending, or (on a GPU without row remapping,
  before Ampere) a page retirement is pending; it takes effect at the next GPU reset;
- ``UncorrectableECC``: the volatile uncorrected ECC count rose above the count this
  process first saw for the GPU (by UUID).

When each clears: a pending or failed remapping, or a pending retirement, clears as soon
as NVML stops reporting it (after the reset). An ECC rise is held as a fatal Xid is
(:mod:`gfd.health.checks.xid`): for the life of the process, or with
``--health-event-hold`` until that long has passed without a further rise, after which
the count then seen is the new baseline. A count that falls (the driver reloaded, or the
GPU was reset) becomes the baseline at once.

A part NVML does not report — ECC off or not supported, no remapped rows and no retired
pages, no memory health at all — is "cannot decide" for that GPU, never a problem.
What it remembers outlives a reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gfd.config.values import MEMORY_CHECK
from gfd.facts import Gpu, MemoryHealth
from gfd.facts.pci import sysfs_bus_id
from gfd.health.check import (
    CANNOT_DECIDE,
    FAILING,
    OK,
    UNKNOWN,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    blind_spots,
    gpu_name,
)

REASON_MEMORY_FAILURE = "GPUMemoryFailure"
REASON_RESET_REQUIRED = "GPUResetRequired"
REASON_UNCORRECTABLE_ECC = "UncorrectableECC"

#: What cannot be judged of a GPU, in the order the note lists them.
NO_ECC_COUNT = "no uncorrectable ECC count (ECC off or not supported)"
NO_REPAIR_STATE = "no remapped rows or retired pages"


@dataclass
class _EccCount:
    """One GPU's volatile uncorrected ECC count as last seen, and the rise held."""

    last: int
    #: Errors counted since the count was first seen (or the last hold ran out).
    new_errors: int = 0
    #: When (check's clock) the count last rose.
    risen_at: float = 0.0


class MemoryCheck:
    """Judges each GPU's memory health from the cycle's facts."""

    name: ClassVar[str] = MEMORY_CHECK
    reasons: ClassVar[tuple[str, ...]] = (
        REASON_MEMORY_FAILURE,
        REASON_RESET_REQUIRED,
        REASON_UNCORRECTABLE_ECC,
    )
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        self._hold = setup.events.hold
        self._clock = setup.clock
        #: Per GPU UUID.
        self._ecc: dict[str, _EccCount] = {}
        if isinstance(previous, MemoryCheck):
            self._ecc = {
                uuid: _EccCount(count.last, count.new_errors, count.risen_at)
                for uuid, count in previous._ecc.items()
            }

    def observe(self, seen: Observation) -> CheckResult:
        if seen.facts is None:
            return CheckResult(MEMORY_CHECK, UNKNOWN)
        now = self._clock()
        problems: list[Problem] = []
        blind: dict[str, list[int]] = {NO_ECC_COUNT: [], NO_REPAIR_STATE: []}
        for gpu in seen.facts.gpus:
            health = gpu.memory_health or MemoryHealth()
            name = gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))
            problems.extend(_repair_problems(name, health))
            if health.remapped_rows is None and health.retired_pages is None:
                blind[NO_REPAIR_STATE].append(gpu.index)
            if health.ecc_enabled and health.volatile_uncorrected_ecc is not None:
                rise = self._ecc_rise(gpu, health.volatile_uncorrected_ecc, now)
                if rise is not None:
                    problems.append(
                        Problem(MEMORY_CHECK, REASON_UNCORRECTABLE_ECC, f"{name}: {rise}")
                    )
            else:
                blind[NO_ECC_COUNT].append(gpu.index)
        if problems:
            rank = {reason: position for position, reason in enumerate(self.reasons)}
            problems.sort(key=lambda problem: rank[problem.reason])
            return CheckResult(MEMORY_CHECK, FAILING, tuple(problems))
        note = blind_spots(blind)
        if note:
            return CheckResult(MEMORY_CHECK, CANNOT_DECIDE, note=note)
        return CheckResult(MEMORY_CHECK, OK)

    def _ecc_rise(self, gpu: Gpu, count: int, now: float) -> str | None:
        """The GPU's ECC rise in words while it is held, else None."""
        known = self._ecc.get(gpu.uuid)
        if known is None:
            self._ecc[gpu.uuid] = _EccCount(last=count)
            return None
        # A count below the last one restarted (driver reload, GPU reset): count from it.
        if count > known.last:
            known.new_errors += count - known.last
            known.risen_at = now
        known.last = count
        if not known.new_errors:
            return None
        if self._hold is not None and now - known.risen_at >= self._hold:
            known.new_errors = 0
            return None
        return f"{_many(known.new_errors, 'new uncorrectable ECC error')} (volatile count {count})"


def _repair_problems(name: str, health: MemoryHealth) -> list[Problem]:
    """What the row remapper or page retirement asks for, most urgent first."""
    rows, pages = health.remapped_rows, health.retired_pages
    problems = []
    if rows is not None and rows.failure:
        problems.append(
            Problem(
                MEMORY_CHECK,
                REASON_MEMORY_FAILURE,
                f"{name}: row remapping failed ({_many(rows.uncorrectable, 'row')} remapped for "
                f"uncorrectable errors, {rows.correctable} for correctable): the GPU needs service",
            )
        )
    if rows is not None and rows.pending:
        problems.append(
            Problem(
                MEMORY_CHECK,
                REASON_RESET_REQUIRED,
                f"{name}: a row remapping is pending: reset the GPU",
            )
        )
    if rows is None and pages is not None and pages.pending:
        problems.append(
            Problem(
                MEMORY_CHECK,
                REASON_RESET_REQUIRED,
                f"{name}: a page retirement is pending ({_many(pages.double_bit, 'page')} retired "
                f"for double-bit errors, {pages.single_bit} for single-bit): reset the GPU",
            )
        )
    return problems


def _many(count: int, thing: str) -> str:
    return f"{count} {thing}{'s' if count != 1 else ''}"
