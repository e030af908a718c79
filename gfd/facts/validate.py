"""Facts from plain data, every field checked: the loading half of the facts' serialised form.

This module owns :func:`facts_from_dict`: it refuses a schema version it does not read and
a document larger than any node (:mod:`gfd.facts.limits`) before building anything, then
builds the dataclasses of :mod:`gfd.facts.model` field by field from their type hints,
and checks what types alone cannot say (GPU indices in order, bus ids and cpulists well
formed and unique, pairs naming GPUs that exist). Every problem is a
:class:`~gfd.base.errors.FactsError` naming the source, the field path and what is wrong.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from gfd.base.errors import FactsError
from gfd.facts.cpulist import CPULIST_PATTERN
from gfd.facts.limits import check_data_bounds
from gfd.facts.model import (
    BUS_ID_PATTERN,
    GI_PROFILE_INDEX_COUNT,
    GI_PROFILE_VARIANTS,
    SCHEMA_VERSION,
    SERIAL_PATTERN,
    MemoryHealth,
    NodeFacts,
    NvLinkP2P,
    PcieLink,
    PciPair,
)


def facts_from_dict(data: Any, source: str = "<facts>") -> NodeFacts:
    """Build and validate facts from plain data, naming ``source`` in every error."""
    if not isinstance(data, Mapping):
        raise FactsError(source, "", f"expected a mapping at the top level, got {_kind(data)}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise FactsError(
            source,
            "schema_version",
            f"unsupported schema version {version!r}; this gfd reads version {SCHEMA_VERSION}",
        )
    # Before anything is built: the work below grows with the lists' lengths.
    check_data_bounds(data, source)
    facts: NodeFacts = _build(NodeFacts, data, source, "")
    _check_consistency(facts, source)
    return facts


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", str: "a string", float: "a number"}.get(
        type(value),
        "a list"
        if isinstance(value, list)
        else "a mapping"
        if isinstance(value, Mapping)
        else type(value).__name__,
    )


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(cls: type, data: Any, source: str, path: str) -> Any:
    if not isinstance(data, Mapping):
        raise FactsError(source, path or "(top level)", f"expected a mapping, got {_kind(data)}")
    hints = _hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise FactsError(
                source,
                _join(path, str(key)),
                f"unknown field (expected one of: {', '.join(known)})",
            )
    kwargs: dict[str, Any] = {}
    for name, f in known.items():
        where = _join(path, name)
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FactsError(source, where, "required field is missing")
            continue
        kwargs[name] = _convert(hints[name], data[name], source, where)
    return cls(**kwargs)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _convert(hint: Any, value: Any, source: str, path: str) -> Any:
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, source, path)
    if origin is Literal:
        allowed = get_args(hint)
        if value not in allowed:
            raise FactsError(
                source, path, f"{value!r} is not one of {', '.join(repr(a) for a in allowed)}"
            )
        return value
    if origin is tuple:
        (item,) = [a for a in get_args(hint) if a is not Ellipsis]
        if not isinstance(value, list):
            raise FactsError(source, path, f"expected a list, got {_kind(value)}")
        return tuple(_convert(item, v, source, f"{path}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, source, path)  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise FactsError(source, path, f"expected a boolean, got {_kind(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FactsError(source, path, f"expected an integer, got {_kind(value)}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise FactsError(source, path, f"expected a string, got {_kind(value)}")
        return value
    raise TypeError(f"facts model has an unsupported type {hint!r} at {path}")  # pragma: no cover


def _check_consistency(facts: NodeFacts, source: str) -> None:
    """Cross-field rules that types alone cannot express."""
    seen_index: set[int] = set()
    seen_bus: set[str] = set()
    for i, gpu in enumerate(facts.gpus):
        where = f"gpus[{i}]"
        if gpu.index != i:
            raise FactsError(
                source,
                f"{where}.index",
                f"GPU indices must be 0..N-1 in order; got {gpu.index} at position {i}",
            )
        seen_index.add(gpu.index)
        if not BUS_ID_PATTERN.match(gpu.bus_id):
            raise FactsError(
                source,
                f"{where}.bus_id",
                f"{gpu.bus_id!r} is not an NVML PCI bus id like '00000000:1B:00.0'",
            )
        if gpu.bus_id in seen_bus:
            raise FactsError(source, f"{where}.bus_id", f"bus id {gpu.bus_id} is used by two GPUs")
        seen_bus.add(gpu.bus_id)
        if gpu.serial is not None and not SERIAL_PATTERN.match(gpu.serial):
            raise FactsError(
                source,
                f"{where}.serial",
                f"{gpu.serial!r} is not a board serial (1 to 29 printable ASCII characters "
                "without spaces, like '1650123000001'; omit it where NVML reports none)",
            )
        if gpu.cpu_affinity is not None and not CPULIST_PATTERN.match(gpu.cpu_affinity):
            raise FactsError(
                source,
                f"{where}.cpu_affinity",
                f"{gpu.cpu_affinity!r} is not a cpulist like '0-47,96-143'",
            )
        for j, link in enumerate(gpu.nvlinks):
            if link.remote_bus_id is not None and not BUS_ID_PATTERN.match(link.remote_bus_id):
                raise FactsError(
                    source,
                    f"{where}.nvlinks[{j}].remote_bus_id",
                    f"{link.remote_bus_id!r} is not an NVML PCI bus id",
                )
        for j, mig in enumerate(gpu.mig_devices):
            index = mig.gi_profile_index
            if index is None:
                continue
            mwhere = f"{where}.mig_devices[{j}]"
            if not 0 <= index < GI_PROFILE_INDEX_COUNT:
                raise FactsError(
                    source,
                    f"{mwhere}.gi_profile_index",
                    f"{index} is not an NVML_GPU_INSTANCE_PROFILE_* index (0..{GI_PROFILE_INDEX_COUNT - 1})",
                )
            if mig.media_extensions != (GI_PROFILE_VARIANTS.get(index) == "+me"):
                raise FactsError(
                    source,
                    f"{mwhere}.media_extensions",
                    f"must be {not mig.media_extensions} for gi_profile_index {index:#x} "
                    f"({GI_PROFILE_VARIANTS.get(index) or 'no variant'})",
                )
        if gpu.memory_total_bytes is not None and gpu.memory_total_bytes < 0:
            raise FactsError(source, f"{where}.memory_total_bytes", "must not be negative")
        if gpu.memory_health is not None:
            _check_memory_health(gpu.memory_health, f"{where}.memory_health", source)
        if gpu.pcie is not None:
            _check_pcie(gpu.pcie, f"{where}.pcie", source)
    gpu_count = len(facts.gpus)
    _check_pairs("pci_pairs", facts.pci_pairs, gpu_count, source)
    _check_pairs("nvlink_p2p", facts.nvlink_p2p, gpu_count, source)


#: NVML's memory counts are unsigned: rows and pages 32 bits, ECC errors 64.
_MEMORY_COUNT_BITS = {
    "remapped_rows.correctable": 32,
    "remapped_rows.uncorrectable": 32,
    "retired_pages.single_bit": 32,
    "retired_pages.double_bit": 32,
    "volatile_uncorrected_ecc": 64,
}


def _check_memory_health(health: MemoryHealth, where: str, source: str) -> None:
    """Each count of ``health`` is one NVML can report: not negative, within its width."""
    for name, bits in _MEMORY_COUNT_BITS.items():
        value: Any = health
        for part in name.split("."):
            value = getattr(value, part) if value is not None else None
        if value is None:
            continue
        if not 0 <= value < 2**bits:
            raise FactsError(
                source, f"{where}.{name}", f"{value} is not a {bits}-bit count (0 to 2**{bits} - 1)"
            )


#: NVML answers each PCIe fact in an ``unsigned int``; utilisation is a percentage.
_PCIE_LIMITS = {
    "current_generation": 2**32 - 1,
    "current_width": 2**32 - 1,
    "max_generation": 2**32 - 1,
    "max_width": 2**32 - 1,
    "gpu_max_generation": 2**32 - 1,
    "replay_counter": 2**32 - 1,
    "gpu_utilization": 100,
}


def _check_pcie(link: PcieLink, where: str, source: str) -> None:
    """Each value of ``link`` is one NVML can report: not negative, within its range."""
    for name, limit in _PCIE_LIMITS.items():
        value = getattr(link, name)
        if value is not None and not 0 <= value <= limit:
            raise FactsError(source, f"{where}.{name}", f"{value} is not between 0 and {limit}")


def _check_pairs(
    field_name: str, pairs: Sequence[PciPair | NvLinkP2P], gpu_count: int, source: str
) -> None:
    """Each entry of a list of GPU pairs names two GPUs ``a < b`` that exist, once."""
    seen: set[tuple[int, int]] = set()
    for k, pair in enumerate(pairs):
        where = f"{field_name}[{k}]"
        if not (0 <= pair.a < pair.b < gpu_count):
            raise FactsError(
                source,
                where,
                f"pair ({pair.a}, {pair.b}) must name two GPU indices a < b below {gpu_count}",
            )
        if (pair.a, pair.b) in seen:
            raise FactsError(source, where, f"pair ({pair.a}, {pair.b}) is listed twice")
        seen.add((pair.a, pair.b))
