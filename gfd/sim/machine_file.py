"""The machine file: facts and faults rendered for the C simulator to read.

This module owns the Python half of the line format (``gfdsim-config 1``, documented in
``docs/simulator.md``, *The machine file*): :func:`render_machine_file` writes it (the
fault records come from :mod:`gfd.sim.faults`), and :func:`check_servable` rejects facts
that NVML could not report as given (a name longer than NVML's buffers, an NVLink index
past ``NVML_NVLINK_MAX_LINKS``, a line break inside a string), naming the source and the
field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gfd.facts import (
    FABRIC_STATES,
    NVLINK_REMOTE_TYPES,
    P2P_STATUSES,
    PCI_LEVELS,
    FactsError,
    Gpu,
    MigDevice,
    NodeFacts,
    VgpuInfo,
)
from gfd.facts.limits import MAX_MIG_DEVICES
from gfd.facts.pci import DISPLAY_BASE_CLASS
from gfd.nvml.branches import FIRST_EXPORTED_IN, NotADriverVersion, driver_branch, exported_in
from gfd.nvml.vgpu import HOST_DRIVER_BRANCH_LENGTH, HOST_DRIVER_VERSION_LENGTH
from gfd.sim.gpu_health import check_memory_health, value_records
from gfd.sim.pcie_link import check_pcie, pcie_value_records

if TYPE_CHECKING:
    from gfd.sim.faults import Faults

MAGIC = "gfdsim-config 1"

#: nvml.h buffer sizes (terminating NUL included).
NAME_BUFFER = 96
UUID_BUFFER = 96
DRIVER_VERSION_BUFFER = 80
#: nvml.h ``NVML_NVLINK_MAX_LINKS`` (13.x headers).
NVLINK_MAX_LINKS = 36
GPU_INSTANCE_PROFILE_COUNT = 0x12
#: The C parser's line limit (MAX_LINE) less the key and the line break.
MAX_LINE_TEXT = 65000

#: GPU instance profile ids (as ``nvidia-smi mig -lgip`` shows them) that NVML
#: serves at a fixed ``NVML_GPU_INSTANCE_PROFILE_*`` index on every MIG GPU.
_GI_PROFILE_INDEX_BY_ID = {19: 0x0, 14: 0x1, 9: 0x2, 5: 0x3, 0: 0x4, 20: 0x7, 15: 0x9}
#: Fallback for other ids, by (GPU slices, media extensions).
_GI_PROFILE_INDEX_BY_SHAPE = {
    (1, False): 0x0,
    (2, False): 0x1,
    (3, False): 0x2,
    (4, False): 0x3,
    (7, False): 0x4,
    (8, False): 0x5,
    (6, False): 0x6,
    (1, True): 0x7,
    (2, True): 0x8,
}


def gi_profile_indices(gpu: Gpu) -> dict[int, int]:
    """``NVML_GPU_INSTANCE_PROFILE_*`` index of each GI profile id used on ``gpu``."""
    indices: dict[int, int] = {}
    taken: set[int] = set()
    pending: list[MigDevice] = []
    # Indices the facts name come first: NVML reported the profile there.
    for mig in gpu.mig_devices:
        if mig.gi_profile_index is not None and mig.gi_profile_id not in indices:
            indices[mig.gi_profile_id] = mig.gi_profile_index
            taken.add(mig.gi_profile_index)
    for mig in gpu.mig_devices:
        if mig.gi_profile_id in indices:
            continue
        known = _GI_PROFILE_INDEX_BY_ID.get(mig.gi_profile_id)
        if known is not None and known not in taken:
            indices[mig.gi_profile_id] = known
            taken.add(known)
        else:
            pending.append(mig)
    for mig in pending:
        if mig.gi_profile_id in indices:
            continue
        shaped = _GI_PROFILE_INDEX_BY_SHAPE.get((mig.gi_slice_count, mig.media_extensions))
        if shaped is None or shaped in taken:
            shaped = min(set(range(GPU_INSTANCE_PROFILE_COUNT)) - taken)
        indices[mig.gi_profile_id] = shaped
        taken.add(shaped)
    return indices


def check_servable(facts: NodeFacts, source: str) -> None:
    """Raise FactsError if NVML could not report ``facts`` exactly as written."""
    if facts.driver_version is not None:
        _check_text(facts.driver_version, DRIVER_VERSION_BUFFER, source, "driver_version")
        try:
            branch = driver_branch(facts.driver_version)
        except NotADriverVersion as exc:
            raise FactsError(source, "driver_version", str(exc)) from None
        _check_branch_serves(facts, branch, source)
    if facts.cuda_driver_version is not None and not 0 <= facts.cuda_driver_version < 2**31:
        raise FactsError(source, "cuda_driver_version", "must fit a C int and not be negative")
    if facts.machine_type is not None and (
        "\n" in facts.machine_type or "\0" in facts.machine_type
    ):
        raise FactsError(source, "machine_type", "must be one line of text")
    if facts.vgpu is not None:
        _check_vgpu(facts, facts.vgpu, source)
    for i, gpu in enumerate(facts.gpus):
        where = f"gpus[{i}]"
        check_memory_health(gpu, source, where)
        check_pcie(gpu, source, where)
        _check_text(gpu.name, NAME_BUFFER, source, f"{where}.name")
        _check_text(gpu.uuid, UUID_BUFFER, source, f"{where}.uuid")
        if gpu.cpu_affinity is not None and len(gpu.cpu_affinity) > MAX_LINE_TEXT:
            raise FactsError(
                source, f"{where}.cpu_affinity", f"longer than {MAX_LINE_TEXT} characters"
            )
        for name in (
            "pci_device_id",
            "pci_class",
            "architecture",
            "brand",
            "gpu_numa_id",
            "compute_major",
            "compute_minor",
            "nvlink_version",
            "virtualization_mode",
        ):
            value = getattr(gpu, name)
            if value is not None and not 0 <= value < 2**32:
                raise FactsError(
                    source, f"{where}.{name}", f"{value} does not fit 32 bits unsigned"
                )
        if (gpu.compute_major is None) != (gpu.compute_minor is None):
            raise FactsError(
                source, f"{where}.compute_minor", "compute_major and compute_minor come together"
            )
        if (gpu.mig_mode_current is None) != (gpu.mig_mode_pending is None):
            raise FactsError(
                source,
                f"{where}.mig_mode_pending",
                "mig_mode_current and mig_mode_pending come together (both null: no MIG)",
            )
        if gpu.mig_devices and gpu.mig_mode_current is not True:
            raise FactsError(
                source, f"{where}.mig_devices", "MIG devices need mig_mode_current: true"
            )
        seen_links: set[int] = set()
        for j, link in enumerate(gpu.nvlinks):
            if not 0 <= link.index < NVLINK_MAX_LINKS:
                raise FactsError(
                    source,
                    f"{where}.nvlinks[{j}].index",
                    f"{link.index} is not a link index below {NVLINK_MAX_LINKS}",
                )
            if link.index in seen_links:
                raise FactsError(
                    source, f"{where}.nvlinks[{j}].index", f"link {link.index} is listed twice"
                )
            seen_links.add(link.index)
        if gpu.fabric is not None:
            hexed = gpu.fabric.cluster_uuid.replace("-", "")
            if len(hexed) != 32 or any(c not in "0123456789abcdefABCDEF" for c in hexed):
                raise FactsError(
                    source,
                    f"{where}.fabric.cluster_uuid",
                    f"{gpu.fabric.cluster_uuid!r} is not a UUID of 32 hex digits",
                )
            for name in ("clique_id", "status", "health_mask"):
                value = getattr(gpu.fabric, name)
                if value is not None and not 0 <= value < 2**32:
                    raise FactsError(
                        source, f"{where}.fabric.{name}", f"{value} does not fit 32 bits unsigned"
                    )
        seen_migs: set[int] = set()
        named: dict[int, tuple[int, int]] = {}
        for j, mig in enumerate(gpu.mig_devices):
            if mig.gi_profile_index is None:
                continue
            other = named.setdefault(mig.gi_profile_index, (mig.gi_profile_id, j))
            if other[0] != mig.gi_profile_id:
                raise FactsError(
                    source,
                    f"{where}.mig_devices[{j}].gi_profile_index",
                    f"index {mig.gi_profile_index:#x} is given to profile {other[0]} by "
                    f"mig_devices[{other[1]}] and to profile {mig.gi_profile_id} here; NVML "
                    "reports one profile per index",
                )
        for j, mig in enumerate(gpu.mig_devices):
            mwhere = f"{where}.mig_devices[{j}]"
            if mig.index in seen_migs or mig.index < 0:
                raise FactsError(
                    source, f"{mwhere}.index", f"MIG index {mig.index} is negative or listed twice"
                )
            seen_migs.add(mig.index)
            if mig.index >= MAX_MIG_DEVICES:
                # NVML's MIG slots run below nvmlDeviceGetMaxMigDeviceCount, which the
                # simulator answers with the highest index + 1, and the reader refuses more.
                raise FactsError(
                    source,
                    f"{mwhere}.index",
                    f"{mig.index} is not a MIG slot: slots run below {MAX_MIG_DEVICES}",
                )
            _check_text(mig.name, NAME_BUFFER, source, f"{mwhere}.name")
            _check_text(mig.uuid, UUID_BUFFER, source, f"{mwhere}.uuid")
            for name in (
                "memory_total_bytes",
                "gpu_instance_id",
                "compute_instance_id",
                "gi_profile_id",
                "gi_slice_count",
                "gi_memory_mib",
                "ci_slice_count",
                "multiprocessors",
                "copy_engines",
                "decoders",
                "encoders",
                "jpeg_decoders",
                "ofa_engines",
            ):
                value = getattr(mig, name)
                limit = 2**64 if name == "memory_total_bytes" else 2**32
                if not 0 <= value < limit:
                    raise FactsError(source, f"{mwhere}.{name}", f"{value} is out of range")


#: Facts that only some branches' NVML can report: field of Gpu → the function serving it.
_BRANCH_FIELDS = (
    ("gpu_numa_id", ("nvmlDeviceGetNumaNodeId",)),
    ("fabric", ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo")),
)


#: The one PCIe fact some branches cannot report (470 lacks it).
_GPU_MAX_PCIE_GENERATION = "nvmlDeviceGetGpuMaxPcieLinkGeneration"


def _check_branch_serves(facts: NodeFacts, branch: int, source: str) -> None:
    """A fact the driver branch's NVML has no function for cannot be served as written."""
    for i, gpu in enumerate(facts.gpus):
        for name, functions in _BRANCH_FIELDS:
            if getattr(gpu, name) is None or any(exported_in(f, branch) for f in functions):
                continue
            first = min(FIRST_EXPORTED_IN[f] for f in functions)
            raise FactsError(
                source,
                f"gpus[{i}].{name}",
                f"driver {facts.driver_version} (NVML of branch {branch}) has no "
                f"{functions[-1]}; remove the field or name a driver of branch {first} or later",
            )
        if (
            gpu.pcie is not None
            and gpu.pcie.gpu_max_generation is not None
            and not exported_in(_GPU_MAX_PCIE_GENERATION, branch)
        ):
            raise FactsError(
                source,
                f"gpus[{i}].pcie.gpu_max_generation",
                f"driver {facts.driver_version} (NVML of branch {branch}) has no "
                f"{_GPU_MAX_PCIE_GENERATION}; set it to null or name a driver of branch "
                f"{FIRST_EXPORTED_IN[_GPU_MAX_PCIE_GENERATION]} or later",
            )
        if (
            gpu.fabric is not None
            and gpu.fabric.health_mask is not None
            and not exported_in("nvmlDeviceGetGpuFabricInfoV", branch)
        ):
            raise FactsError(
                source,
                f"gpus[{i}].fabric.health_mask",
                f"driver {facts.driver_version} (NVML of branch {branch}) reports fabric info "
                "through nvmlDeviceGetGpuFabricInfo, which has no health mask; set it to null",
            )


def _check_vgpu(facts: NodeFacts, vgpu: VgpuInfo, source: str) -> None:
    """vGPU facts must fit the capability record the GPUs' config space carries."""
    if not any(
        g.pci_class is not None and g.pci_class >> 16 == DISPLAY_BASE_CLASS for g in facts.gpus
    ):
        if vgpu == VgpuInfo(present=False):
            # What the reader reports of a bus without NVIDIA display functions (a node
            # without GPUs, or whose driver is not loaded): served as it stands.
            return
        raise FactsError(
            source,
            "vgpu",
            "vGPU facts need a GPU with a display pci_class (0x03xxxx) to carry them "
            "(without one, a node reads as no vGPU guest: {present: false})",
        )
    driver = (vgpu.host_driver_version, vgpu.host_driver_branch)
    if not vgpu.present and driver != (None, None):
        raise FactsError(
            source, "vgpu", "a host driver is reported only in a vGPU guest (present: true)"
        )
    if vgpu.host_driver_version is None and vgpu.host_driver_branch is not None:
        raise FactsError(
            source, "vgpu.host_driver_branch", "needs host_driver_version (one record holds both)"
        )
    lengths = {
        "host_driver_version": HOST_DRIVER_VERSION_LENGTH,
        "host_driver_branch": HOST_DRIVER_BRANCH_LENGTH,
    }
    for (name, length), value in zip(lengths.items(), driver, strict=True):
        if value is None:
            continue
        if not value.isascii() or not value.isprintable():
            raise FactsError(source, f"vgpu.{name}", f"{value!r} must be printable ASCII")
        if not 1 <= len(value) <= length:
            raise FactsError(
                source,
                f"vgpu.{name}",
                f"{value!r} must be 1 to {length} characters (the record's field)",
            )


def _check_text(value: str, buffer: int, source: str, path: str) -> None:
    if "\n" in value or "\r" in value or "\0" in value:
        raise FactsError(source, path, "must be one line of text")
    if len(value.encode("utf-8")) >= buffer:
        raise FactsError(source, path, f"{value!r} is longer than NVML's {buffer - 1}-byte limit")


def render_machine_file(facts: NodeFacts, faults: Faults | None) -> str:
    """The machine file text for ``facts`` with ``faults`` (None: nothing goes wrong;
    facts must be servable)."""
    lines = [MAGIC]
    if facts.driver_version is not None:
        lines.append(f"driver_version {facts.driver_version}")
    if facts.cuda_driver_version is not None:
        lines.append(f"cuda_driver_version {facts.cuda_driver_version}")
    for gpu in facts.gpus:
        lines.extend(_gpu_lines(gpu))
    for pair in facts.pci_pairs:
        lines.append(f"pair {pair.a} {pair.b} {PCI_LEVELS[pair.level]}")
    for entry in facts.nvlink_p2p:
        lines.append(f"nvlink_p2p {entry.a} {entry.b} {P2P_STATUSES[entry.status]}")
    if faults is not None:
        # Here, not at the top: a machine without faults never loads the fault model.
        from gfd.sim.faults import fault_records

        lines.extend(fault_records(faults))
    return "\n".join(lines) + "\n"


def _gpu_lines(gpu: Gpu) -> list[str]:
    lines = [
        f"gpu {gpu.index}",
        f"name {gpu.name}",
        f"uuid {gpu.uuid}",
        f"bus_id {gpu.bus_id}",
    ]
    if gpu.serial is not None:
        lines.append(f"serial {gpu.serial}")
    optional = {
        "pci_device_id": gpu.pci_device_id,
        "pci_class": gpu.pci_class,
        "memory_total_bytes": gpu.memory_total_bytes,
        "architecture": gpu.architecture,
        "brand": gpu.brand,
        "gpu_numa_id": gpu.gpu_numa_id,
        "nvlink_version": gpu.nvlink_version,
        "virtualization_mode": gpu.virtualization_mode,
    }
    lines.extend(f"{key} {value}" for key, value in optional.items() if value is not None)
    if gpu.compute_major is not None and gpu.compute_minor is not None:
        lines.append(f"compute_capability {gpu.compute_major} {gpu.compute_minor}")
    if gpu.cpu_affinity is not None:
        lines.append(f"cpu_affinity {gpu.cpu_affinity}")
    if gpu.mig_mode_current is not None and gpu.mig_mode_pending is not None:
        lines.append(f"mig_mode {int(gpu.mig_mode_current)} {int(gpu.mig_mode_pending)}")
    for link in gpu.nvlinks:
        bus = link.remote_bus_id if link.remote_bus_id is not None else "-"
        kind = NVLINK_REMOTE_TYPES[link.remote_type] if link.remote_type is not None else "-"
        lines.append(f"nvlink {link.index} {int(link.active)} {bus} {kind}")
    lines.extend(value_records(gpu))
    lines.extend(pcie_value_records(gpu))
    if gpu.fabric is not None:
        fabric = gpu.fabric
        health = "-" if fabric.health_mask is None else str(fabric.health_mask)
        lines.append(
            f"fabric {fabric.cluster_uuid.replace('-', '').lower()} {fabric.clique_id} "
            f"{FABRIC_STATES[fabric.state]} {fabric.status} {health}"
        )
    indices = gi_profile_indices(gpu)
    for mig in gpu.mig_devices:
        lines.extend(
            [
                f"mig {mig.index}",
                f"mig_uuid {mig.uuid}",
                f"mig_name {mig.name}",
                f"mig_memory_total_bytes {mig.memory_total_bytes}",
                f"mig_instance {mig.gpu_instance_id} {mig.compute_instance_id}",
                f"mig_gi_profile {mig.gi_profile_id} {indices[mig.gi_profile_id]} "
                f"{mig.gi_slice_count} {mig.gi_memory_mib}",
                f"mig_ci_profile {mig.ci_slice_count} {mig.multiprocessors}",
                f"mig_engines {mig.copy_engines} {mig.decoders} {mig.encoders} "
                f"{mig.jpeg_decoders} {mig.ofa_engines}",
                f"mig_media_extensions {int(mig.media_extensions)}",
            ]
        )
    return lines
