"""What a simulated GPU's health calls answer: its memory health and the events it supports.

This module owns, per GPU, what the C library serves to ``nvmlDeviceGetEccMode``,
``nvmlDeviceGetTotalEccErrors``, ``nvmlDeviceGetRemappedRows``,
``nvmlDeviceGetRetiredPages*``, ``nvmlDeviceGetRetiredPagesPendingStatus`` and
``nvmlDeviceGetSupportedEventTypes``, rendered as the machine file's ``value NAME N``
records (:func:`value_records`; a value not written is NOT_SUPPORTED), and the names of
every GPU value of the machine file (:class:`GpuValue`, the PCIe link's included, whose
records :mod:`gfd.sim.pcie_link` writes), which faults that change them use too.

A GPU serves its facts' ``memory_health`` exactly as written, so that gfd's reader reads
back what the facts say (``null``, and each null part, is NOT_SUPPORTED);
:func:`check_memory_health` refuses what NVML could not report that way. Facts without
it (captured before the field, or made by hand) model a GPU without memory health; the
bundled profiles carry theirs. :func:`with_default_memory_health` gives each GPU without
it what real drivers answer for its brand and architecture (:func:`default_memory_health`,
which the bundled profiles follow but for the RTX 4090), following nvml.h's comments and a
real H200 with driver 580.159.04 (``tests/records/real-gpu/``, which
``tests/sim/test_sim_health.py`` holds the defaults to):

- ECC mode: only GPUs with ECC report it. Data-center boards (brands TESLA and NVIDIA) ship
  with ECC on; professional boards (QUADRO, QUADRO_RTX, NVIDIA_RTX) have ECC, off by
  default; GeForce, TITAN, NVS and unknown brands report NOT_SUPPORTED (a few GeForce
  boards have ECC, off by default, as the RTX 4090 of the ``rtx4090x8`` profile).
- ECC counts "require ECC Mode to be enabled": with ECC on, the volatile uncorrected count
  (0 by default; the aggregate count is served equal to it, corrected counts at 0).
- Remapped rows: "for Ampere or newer" (with ECC on); NOT_SUPPORTED before, and on a GPU
  in MIG mode with MIG devices.
- Retired pages: "for Kepler or newer", and in practice through Turing: from Ampere on,
  row remapping replaced dynamic page retirement, and drivers answer NOT_SUPPORTED to all
  three calls (the H200 did; ``nvidia-smi -q`` prints ``N/A`` for *Retired Pages*). NVIDIA's
  own mock NVML answers empty lists instead; facts that want that give ``retired_pages``
  explicitly, so a health check can be run against both.
- Events: the H200 supports every type nvml.h defines (``nvmlEventTypeAll``, 65,439),
  clock events included although nvml.h calls them "Kepler only". Memory-error events
  (ECC single- and double-bit, storms, DRAM retirement, poison) are "available only on
  ECC-enabled devices"; a GPU without ECC on supports the others.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from enum import IntFlag, StrEnum

from gfd.facts import FactsError, Gpu, MemoryHealth, NodeFacts, RemappedRows, RetiredPages

#: nvml.h ``nvmlDeviceArchitecture_t``.
KEPLER = 2
TURING = 6
AMPERE = 7
ARCHITECTURE_UNKNOWN = 0xFFFFFFFF
#: nvml.h ``nvmlBrandType_t`` of boards that ship with ECC on, and that have ECC off.
ECC_ON_BRANDS = frozenset({2, 14})  # TESLA, NVIDIA
ECC_OFF_BRANDS = frozenset({1, 12, 13})  # QUADRO, QUADRO_RTX, NVIDIA_RTX


class GpuValue(StrEnum):
    """The per-GPU values of the machine file (``value NAME N``), as the C library names them."""

    ECC_CURRENT = "ecc_current"
    ECC_PENDING = "ecc_pending"
    ECC_VOLATILE_CORRECTED = "ecc_volatile_corrected"
    ECC_VOLATILE_UNCORRECTED = "ecc_volatile_uncorrected"
    ECC_AGGREGATE_CORRECTED = "ecc_aggregate_corrected"
    ECC_AGGREGATE_UNCORRECTED = "ecc_aggregate_uncorrected"
    REMAPPED_ROWS_CORRECTABLE = "remapped_rows_correctable"
    REMAPPED_ROWS_UNCORRECTABLE = "remapped_rows_uncorrectable"
    REMAPPED_ROWS_PENDING = "remapped_rows_pending"
    REMAPPED_ROWS_FAILURE = "remapped_rows_failure"
    RETIRED_PAGES_SINGLE_BIT = "retired_pages_single_bit"
    RETIRED_PAGES_DOUBLE_BIT = "retired_pages_double_bit"
    RETIRED_PAGES_PENDING = "retired_pages_pending"
    EVENT_TYPES = "event_types"
    #: The PCIe link's (gfd.sim.pcie_link): levels faults set, a count they raise.
    PCIE_CURRENT_GENERATION = "pcie_current_generation"
    PCIE_CURRENT_WIDTH = "pcie_current_width"
    PCIE_MAX_GENERATION = "pcie_max_generation"
    PCIE_MAX_WIDTH = "pcie_max_width"
    PCIE_GPU_MAX_GENERATION = "pcie_gpu_max_generation"
    PCIE_REPLAY_COUNTER = "pcie_replay_counter"
    GPU_UTILIZATION = "gpu_utilization"
    #: The fabric's state, status and health mask: served by the GPU's fabric record, and
    #: changed only by faults (``gfd.sim.faults.fabric``).
    FABRIC_STATE = "fabric_state"
    FABRIC_STATUS = "fabric_status"
    FABRIC_HEALTH_MASK = "fabric_health_mask"


#: The largest value of a 32-bit count (remapped rows, retired pages).
MAX_COUNT32 = 2**32 - 1
#: The largest value of an ECC count.
MAX_COUNT64 = 2**64 - 1


class EventType(IntFlag):
    """The nvml.h ``nvmlEventType`` bits (``nvmlEventTypeAll`` is all of them)."""

    SINGLE_BIT_ECC_ERROR = 0x1
    DOUBLE_BIT_ECC_ERROR = 0x2
    PSTATE = 0x4
    XID_CRITICAL_ERROR = 0x8
    CLOCK = 0x10
    POWER_SOURCE_CHANGE = 0x80
    MIG_CONFIG_CHANGE = 0x100
    SINGLE_BIT_ECC_ERROR_STORM = 0x200
    DRAM_RETIREMENT_EVENT = 0x400
    DRAM_RETIREMENT_FAILURE = 0x800
    NON_FATAL_POISON_ERROR = 0x1000
    FATAL_POISON_ERROR = 0x2000
    GPU_UNAVAILABLE_ERROR = 0x4000
    GPU_RECOVERY_ACTION = 0x8000


#: nvml.h ``nvmlEventTypeAll``: every type.
ALL_EVENTS = functools.reduce(operator.or_, EventType)
#: Events of memory errors, which need ECC on.
MEMORY_ERROR_EVENTS = (
    EventType.SINGLE_BIT_ECC_ERROR
    | EventType.DOUBLE_BIT_ECC_ERROR
    | EventType.SINGLE_BIT_ECC_ERROR_STORM
    | EventType.DRAM_RETIREMENT_EVENT
    | EventType.DRAM_RETIREMENT_FAILURE
    | EventType.NON_FATAL_POISON_ERROR
    | EventType.FATAL_POISON_ERROR
)


def _known_architecture(gpu: Gpu) -> int | None:
    if gpu.architecture is None or gpu.architecture == ARCHITECTURE_UNKNOWN:
        return None
    return gpu.architecture


def default_memory_health(gpu: Gpu) -> MemoryHealth | None:
    """What real drivers report of ``gpu``'s memory, by its brand and architecture (see the
    module's docstring); None: nothing (NOT_SUPPORTED throughout)."""
    if gpu.brand in ECC_OFF_BRANDS:
        return MemoryHealth(ecc_enabled=False)
    if gpu.brand not in ECC_ON_BRANDS:
        return None
    architecture = _known_architecture(gpu)
    rows = None
    pages = None
    in_mig_use = bool(gpu.mig_mode_current and gpu.mig_devices)
    if architecture is not None and architecture >= AMPERE and not in_mig_use:
        # nvml.h: no remapped rows on a GPU in MIG mode with MIG devices.
        rows = RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False)
    elif architecture is not None and KEPLER <= architecture <= TURING:
        pages = RetiredPages(single_bit=0, double_bit=0, pending=False)
    return MemoryHealth(
        ecc_enabled=True, remapped_rows=rows, retired_pages=pages, volatile_uncorrected_ecc=0
    )


def with_default_memory_health(facts: NodeFacts) -> NodeFacts:
    """``facts`` whose GPUs without ``memory_health`` report what real drivers would."""
    gpus = tuple(
        gpu
        if gpu.memory_health is not None
        else dataclasses.replace(gpu, memory_health=default_memory_health(gpu))
        for gpu in facts.gpus
    )
    return dataclasses.replace(facts, gpus=gpus)


def check_memory_health(gpu: Gpu, source: str, where: str) -> None:
    """Refuse a ``memory_health`` that NVML could not report as written (the reader would
    read back something else); ``where`` is the GPU's path (``gpus[0]``)."""
    health = gpu.memory_health
    if health is None:
        return
    path = f"{where}.memory_health"
    if health == MemoryHealth():
        raise FactsError(source, path, "every part is null: write memory_health: null")
    if health.remapped_rows is not None and health.retired_pages is not None:
        raise FactsError(
            source,
            f"{path}.retired_pages",
            "a GPU reports remapped rows (Ampere and later) or retired pages, not both",
        )
    if health.volatile_uncorrected_ecc is not None and health.ecc_enabled is not True:
        raise FactsError(
            source,
            f"{path}.volatile_uncorrected_ecc",
            "NVML counts ECC errors only with ECC on (ecc_enabled: true)",
        )
    if health.remapped_rows is not None and gpu.mig_mode_current and gpu.mig_devices:
        raise FactsError(
            source,
            f"{path}.remapped_rows",
            "NVML does not report remapped rows on a GPU in MIG mode with MIG devices",
        )


def supported_event_types(health: MemoryHealth | None) -> EventType:
    """What ``nvmlDeviceGetSupportedEventTypes`` answers for a GPU of ``health``."""
    ecc_on = health is not None and health.ecc_enabled
    return ALL_EVENTS if ecc_on else ALL_EVENTS & ~MEMORY_ERROR_EVENTS


def value_records(gpu: Gpu) -> list[str]:
    """The ``value`` records of ``gpu``'s machine-file section (its memory_health must have
    passed :func:`check_memory_health`)."""
    health = gpu.memory_health or MemoryHealth()
    values: dict[GpuValue, int] = {}
    if health.ecc_enabled is not None:
        values[GpuValue.ECC_CURRENT] = int(health.ecc_enabled)
        # A pending mode other than the current one waits for a reset the facts do not know of.
        values[GpuValue.ECC_PENDING] = int(health.ecc_enabled)
    if health.volatile_uncorrected_ecc is not None:
        values[GpuValue.ECC_VOLATILE_CORRECTED] = 0
        values[GpuValue.ECC_VOLATILE_UNCORRECTED] = health.volatile_uncorrected_ecc
        values[GpuValue.ECC_AGGREGATE_CORRECTED] = 0
        # Aggregate counts persist across driver loads: at least what this load counted.
        values[GpuValue.ECC_AGGREGATE_UNCORRECTED] = health.volatile_uncorrected_ecc
    rows = health.remapped_rows
    if rows is not None:
        values[GpuValue.REMAPPED_ROWS_CORRECTABLE] = rows.correctable
        values[GpuValue.REMAPPED_ROWS_UNCORRECTABLE] = rows.uncorrectable
        values[GpuValue.REMAPPED_ROWS_PENDING] = int(rows.pending)
        values[GpuValue.REMAPPED_ROWS_FAILURE] = int(rows.failure)
    pages = health.retired_pages
    if pages is not None:
        values[GpuValue.RETIRED_PAGES_SINGLE_BIT] = pages.single_bit
        values[GpuValue.RETIRED_PAGES_DOUBLE_BIT] = pages.double_bit
        values[GpuValue.RETIRED_PAGES_PENDING] = int(pages.pending)
    values[GpuValue.EVENT_TYPES] = int(supported_event_types(gpu.memory_health))
    return [f"value {name} {value}" for name, value in values.items()]
