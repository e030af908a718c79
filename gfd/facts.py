"""The facts: everything gfd reads from a node, as frozen dataclasses.

This module owns the facts model and its serialised form (schema version
``SCHEMA_VERSION``, documented in ``docs/facts.md``). The reader produces facts,
the simulator serves them, and everything downstream (topology, labels) sees the
hardware only through them. ``dump_facts``/``load_facts`` round-trip losslessly
through YAML or JSON; loading checks every field and names the file, the field
path and the problem.

Conventions: ``None`` means "NVML (or sysfs) did not report it" (NOT_SUPPORTED,
unreadable), never "zero". PCI bus ids use NVML's form ``00000000:1B:00.0``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

# Re-exported: the error belongs to the facts model; it is defined in gfd.errors so
# that gfd.errors imports nothing of gfd (no import circle).
from gfd.errors import FactsError as FactsError
from gfd.facts_limits import check_data_bounds, check_document_bounds

SCHEMA_VERSION = 1
#: Top-level key under which ``gfd facts`` adds what it derives from the facts; never read back.
DERIVED_KEY = "derived"

#: NVML's ``nvmlGpuTopologyLevel_t`` names, in order of increasing distance.
PCI_LEVELS: dict[str, int] = {
    "internal": 0,
    "single": 10,
    "multiple": 20,
    "hostbridge": 30,
    "node": 40,
    "system": 50,
}
PciLevel = Literal["internal", "single", "multiple", "hostbridge", "node", "system"]

#: NVML's ``nvmlNvLinkRemoteDeviceType_t``.
NVLINK_REMOTE_TYPES: dict[str, int] = {"gpu": 0, "ibmnpu": 1, "switch": 2, "unknown": 0xFF}
NvLinkRemoteType = Literal["gpu", "ibmnpu", "switch", "unknown"]

#: NVML's ``nvmlGpuFabricState_t``.
FABRIC_STATES: dict[str, int] = {
    "not-supported": 0,
    "not-started": 1,
    "in-progress": 2,
    "completed": 3,
}
FabricState = Literal["not-supported", "not-started", "in-progress", "completed"]

#: ``NVML_GPU_INSTANCE_PROFILE_*`` indices of the profile variants, and the suffix NVIDIA's
#: tools write after the profile (``1g.12gb+me``, ``1g.12gb+me.all``, ``4g.71gb-me``,
#: ``1g.24gb+gfx``): ``+me`` media extensions (REV1), ``+me.all`` all media engines,
#: ``-me`` no media engine, ``+gfx`` graphics. Other indices have no suffix.
GI_PROFILE_VARIANTS: dict[int, str] = {
    0x7: "+me",
    0x8: "+me",
    0xA: "+gfx",
    0xB: "+gfx",
    0xC: "+gfx",
    0xD: "-me",
    0xE: "-me",
    0xF: "+me.all",
    0x10: "+me.all",
    0x11: "+gfx",
}
#: ``NVML_GPU_INSTANCE_PROFILE_COUNT`` of current headers: indices run below it.
GI_PROFILE_INDEX_COUNT = 0x12
#: NVML's ``nvmlGpuP2PStatus_t`` (``NVML_P2P_STATUS_*``), as names.
P2P_STATUSES: dict[str, int] = {
    "ok": 0,
    "chipset-not-supported": 1,
    "gpu-not-supported": 2,
    "ioh-topology-not-supported": 3,
    "disabled-by-regkey": 4,
    "not-supported": 5,
    "unknown": 6,
}
P2PStatus = Literal[
    "ok",
    "chipset-not-supported",
    "gpu-not-supported",
    "ioh-topology-not-supported",
    "disabled-by-regkey",
    "not-supported",
    "unknown",
]

BUS_ID_PATTERN = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
CPULIST_PATTERN = re.compile(r"^(\d+(-\d+)?(,\d+(-\d+)?)*)?$")


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU, as ``nvmlDeviceGetNvLink*`` reports it."""

    index: int
    active: bool
    #: PCI bus id of the far end (a GPU or an NVSwitch); None when not reported.
    remote_bus_id: str | None = None
    remote_type: NvLinkRemoteType | None = None


@dataclass(frozen=True)
class FabricInfo:
    """``nvmlDeviceGetGpuFabricInfoV``: the GPU's NVLink fabric (clique) membership."""

    #: 16 bytes as a canonical UUID string (all zero when not attached).
    cluster_uuid: str
    clique_id: int
    state: FabricState
    #: NVML return code of the fabric registration (0 is SUCCESS).
    status: int
    health_mask: int | None = None


@dataclass(frozen=True)
class MigDevice:
    """A MIG device (GPU instance + compute instance) on a MIG-enabled GPU."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    gpu_instance_id: int
    compute_instance_id: int
    #: GPU instance profile, as ``nvmlDeviceGetGpuInstanceProfileInfoV`` reports it.
    gi_profile_id: int
    gi_slice_count: int
    gi_memory_mib: int
    #: Compute instance slices and multiprocessors.
    ci_slice_count: int
    multiprocessors: int
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_decoders: int = 0
    ofa_engines: int = 0
    #: The profile carries media extensions (``+me``).
    media_extensions: bool = False
    #: The ``NVML_GPU_INSTANCE_PROFILE_*`` index at which NVML reports the profile
    #: (``0x7`` is ``1_SLICE_REV1``, i.e. ``+me``); it tells the profile's variant
    #: (:data:`GI_PROFILE_VARIANTS`). None in facts captured before it was recorded.
    gi_profile_index: int | None = None


@dataclass(frozen=True)
class Gpu:
    """One physical GPU."""

    index: int
    name: str
    uuid: str
    bus_id: str
    #: ``(device << 16) | vendor`` as in ``nvmlPciInfo_t.pciDeviceId``.
    pci_device_id: int | None = None
    #: PCI class code from sysfs (``0x030200`` 3D controller, ``0x030000`` VGA).
    pci_class: int | None = None
    memory_total_bytes: int | None = None
    compute_major: int | None = None
    compute_minor: int | None = None
    #: ``nvmlDeviceArchitecture_t`` value.
    architecture: int | None = None
    #: ``nvmlBrandType_t`` value.
    brand: int | None = None
    #: NUMA node the GPU's PCI device is attached to (sysfs ``numa_node``; -1 → None).
    numa_node: int | None = None
    #: ``nvmlDeviceGetNumaNodeId``: the GPU's *own* memory NUMA node on coherent
    #: platforms (Grace Hopper/Blackwell); NOT_SUPPORTED (None) on x86 machines.
    #: nvidia-smi shows it as "GPU NUMA ID".
    gpu_numa_id: int | None = None
    #: CPUs local to the GPU, as a Linux cpulist (``0-47,96-143``); None when unknown.
    cpu_affinity: str | None = None
    #: Current and pending MIG mode; None when the GPU does not support MIG.
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    #: ``nvmlNvLinkVersion`` enum of link 0 (1_0=1 … 5_0=7); None without NVLink.
    nvlink_version: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    fabric: FabricInfo | None = None


@dataclass(frozen=True)
class VgpuInfo:
    """vGPU guest detection from PCI config space (vendor-specific capability signed ``VF``).

    Read from ``bus/pci/devices/<addr>/config`` of the NVIDIA display functions; absent
    (``NodeFacts.vgpu`` None) when that config space could not be read in full.
    """

    #: An NVIDIA function carries the vGPU capability: this node is a vGPU guest.
    present: bool
    #: The hypervisor host's vGPU manager version and branch (``460.16``, ``r460_00``).
    host_driver_version: str | None = None
    host_driver_branch: str | None = None


@dataclass(frozen=True, slots=True)
class PciPair:
    """``nvmlDeviceGetTopologyCommonAncestor`` for the GPUs with indices ``a < b``."""

    a: int
    b: int
    level: PciLevel


@dataclass(frozen=True)
class NvLinkP2P:
    """``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`` for GPUs ``a < b``.

    The reader asks only where the answer can change the topology (GPUs on NVSwitch
    fabrics that share no switch), so most nodes have no entry at all.
    """

    a: int
    b: int
    status: P2PStatus


@dataclass(frozen=True)
class NodeFacts:
    """Everything gfd read from one node in one pass."""

    driver_version: str | None = None
    #: ``nvmlSystemGetCudaDriverVersion``: 12040 means CUDA 12.4.
    cuda_driver_version: int | None = None
    #: Raw contents of the DMI product name file; None when unreadable.
    machine_type: str | None = None
    gpus: tuple[Gpu, ...] = ()
    pci_pairs: tuple[PciPair, ...] = ()
    #: NVLink peer-to-peer status of the GPU pairs the reader asked NVML about.
    nvlink_p2p: tuple[NvLinkP2P, ...] = ()
    #: vGPU guest detection; None when PCI config space was unreadable (unprivileged).
    vgpu: VgpuInfo | None = None
    schema_version: int = field(default=SCHEMA_VERSION)

    def pci_level(self, a: int, b: int) -> PciLevel | None:
        """Common-ancestor level of two GPU indices (order does not matter)."""
        lo, hi = min(a, b), max(a, b)
        for pair in self.pci_pairs:
            if pair.a == lo and pair.b == hi:
                return pair.level
        return None


# --------------------------------------------------------------------------- #
# Serialisation


def facts_to_dict(facts: NodeFacts) -> dict[str, Any]:
    """Plain-data form of facts (tuples become lists), keys in declaration order."""
    return _to_plain(facts)  # type: ignore[no-any-return]


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_plain(v) for v in value]
    return value


def dump_facts(
    facts: NodeFacts,
    fmt: Literal["yaml", "json"] = "yaml",
    *,
    derived: Mapping[str, Any] | None = None,
) -> str:
    """Serialise facts deterministically: equal facts give equal text.

    ``derived`` (plain data computed from the facts) is appended under ``derived:``
    for readers; loading ignores it.
    """
    plain = facts_to_dict(facts)
    if derived is not None:
        plain[DERIVED_KEY] = dict(derived)
    if fmt == "json":
        return json.dumps(plain, indent=2) + "\n"
    import yaml

    return str(yaml.safe_dump(plain, sort_keys=False, default_flow_style=None, width=100))


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


def load_facts_text(text: str, source: str, extra_keys: frozenset[str] = frozenset()) -> NodeFacts:
    """Parse YAML or JSON facts text. Top-level ``extra_keys`` are ignored (e.g. ``faults``).

    A document with more GPUs (or MIG devices, NVLinks, pairs) than a node can have is
    refused before it is parsed into objects (:mod:`gfd.facts_limits`).
    """
    check_document_bounds(text, source)
    data = parse_document(text, source)
    if isinstance(data, Mapping):
        # ``derived`` (what ``gfd facts`` computes from the facts, e.g. the topology) is output only.
        ignored = extra_keys | {DERIVED_KEY}
        data = {k: v for k, v in data.items() if k not in ignored}
    return facts_from_dict(data, source)


def read_facts_text(path: str | Path) -> str:
    """The text of a facts (or profile) file, bounded to ``FACTS_FILE_LIMIT``; FactsError else."""
    from gfd.inputs import FACTS_FILE_LIMIT, InputRejected, read_bounded_text

    source = str(path)
    try:
        return read_bounded_text(path, FACTS_FILE_LIMIT)
    except OSError as exc:
        raise FactsError(source, "", f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise FactsError(source, "", f"not UTF-8 text: {exc.reason}") from exc
    except InputRejected as exc:
        raise FactsError(source, "", str(exc)) from exc


def load_facts(path: str | Path, extra_keys: frozenset[str] = frozenset()) -> NodeFacts:
    """Load a facts file (YAML or JSON)."""
    return load_facts_text(read_facts_text(path), str(path), extra_keys)


def parse_document(text: str, source: str) -> Any:
    """Parse YAML (a superset of JSON), turning parser errors into FactsError with a line."""
    import yaml

    try:
        # libyaml's safe loader when PyYAML was built with it: 8x faster on a profile.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise FactsError(source, line, f"not valid YAML/JSON: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise FactsError(source, "", f"not valid YAML/JSON: {exc}") from exc


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
    n = len(facts.gpus)
    seen_pairs: set[tuple[int, int]] = set()
    for k, pair in enumerate(facts.pci_pairs):
        where = f"pci_pairs[{k}]"
        if not (0 <= pair.a < pair.b < n):
            raise FactsError(
                source,
                where,
                f"pair ({pair.a}, {pair.b}) must name two GPU indices a < b below {n}",
            )
        if (pair.a, pair.b) in seen_pairs:
            raise FactsError(source, where, f"pair ({pair.a}, {pair.b}) is listed twice")
        seen_pairs.add((pair.a, pair.b))
    seen_p2p: set[tuple[int, int]] = set()
    for k, entry in enumerate(facts.nvlink_p2p):
        where = f"nvlink_p2p[{k}]"
        if not (0 <= entry.a < entry.b < n):
            raise FactsError(
                source,
                where,
                f"pair ({entry.a}, {entry.b}) must name two GPU indices a < b below {n}",
            )
        if (entry.a, entry.b) in seen_p2p:
            raise FactsError(source, where, f"pair ({entry.a}, {entry.b}) is listed twice")
        seen_p2p.add((entry.a, entry.b))


# --------------------------------------------------------------------------- #
# cpulist helpers shared by the reader, the simulator and the topology renderer


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


def cpulist_to_ids(cpulist: str) -> list[int]:
    """CPU ids of a cpulist: ``0-2,5`` → ``[0, 1, 2, 5]``."""
    ids: list[int] = []
    for part in filter(None, cpulist.split(",")):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids
