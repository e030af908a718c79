"""What NVIDIA's mock NVML answers for one of its YAML machine configs, as gfd facts.

The expectations of ``test_mock_nvml.py`` come from here, and here they come only from the
mock's config file and from what the mock's source code does with it: NVIDIA/k8s-test-infra at
commit ``3b2b865d91b1844baa9feeca2820d2fab65414c7`` (the commit the oracle was built from, see
``../shared/oracles/PROVENANCE.md``). Each rule names the file of that commit it was read from
(``engine/`` and ``bridge/`` are under ``pkg/gpu/mocknvml/``; the sysfs renderer is
``cmd/render-pci-sysfs`` with ``pkg/system/mockpcisysfs/{config,render}``). Nothing here is
computed by gfd's code: the facts model (``gfd/facts.py``) only fixes the *shape* of the answer
(field names, NVML's bus-id spelling, a cpulist string, a canonical UUID string).

Where a config uses a feature this model does not describe (explicit per-link NVLink lists, a
device without a UUID, ...), :class:`ModelGap` is raised: a new bundled config must extend the
model, never be judged by a guess.

The mock is run with every ``MOCK_*`` variable and ``NODE_NAME`` removed from its environment
except ``MOCK_NVML_CONFIG``, so none of its runtime overlays apply: no config overrides file
(``engine/config_override_store.go``), no topology overlay of the fabric identity
(``engine/config.go`` ``applyTopologyOverlay``), no fabric-manager coupling
(``engine/fabric_readiness.go``), no failure injection beyond what the config declares.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

#: ``engine/device.go`` ``MaxDevices``: the mock serves at most 8 GPUs.
MAX_DEVICES = 8
#: ``engine/topology.go`` ``nvLinkMaxLinks``: link indices the mock accepts (0..17).
NVLINK_MAX_LINKS = 18
#: ``engine/topology.go`` ``DefaultCoresPerNUMA``: CPUs per NUMA node when a root complex
#: names no ``cpu_affinity``.
DEFAULT_CORES_PER_NUMA = 64
#: ``engine/device.go`` ``invalidRemotePciBusID``: the remote PCI bus id of a link to an NVSwitch.
SWITCH_REMOTE_BUS_ID = "FFFFFFFF:FF:FF.0"
#: ``pkg/system/mockpcisysfs/render`` ``pciClass3DController``: the ``class`` of every device.
SYSFS_PCI_CLASS = 0x030200
#: ``render`` ``nvidiaVendorID``: the vendor written when ``device_id`` has none.
NVIDIA_VENDOR_ID = 0x10DE
#: ``engine/device.go`` ``initPciInfo``: the PCI device id of a device whose config has no
#: ``pci`` block (an A100).
DEFAULT_PCI_DEVICE_ID = 0x20B010DE

#: ``engine/device.go`` ``parseArchitecture`` onto go-nvml's ``DEVICE_ARCH_*`` values.
ARCHITECTURES = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "ada_lovelace": 8,
    "hopper": 9,
    "blackwell": 10,
}
ARCHITECTURE_UNKNOWN = 0xFFFFFFFF
#: ``engine/device.go`` ``parseVirtualizationMode`` onto go-nvml's ``GPU_VIRTUALIZATION_MODE_*``;
#: any other text is NONE.
VIRTUALIZATION_MODES = {"none": 0, "passthrough": 1, "vgpu": 2}
#: ``engine/device.go`` ``parseBrand`` onto go-nvml's ``BRAND_*`` values; anything else is
#: ``BRAND_UNKNOWN`` (0).
BRANDS = {"nvidia": 14, "tesla": 2, "quadro": 1, "geforce": 5, "titan": 6, "nvidia_rtx": 13}
#: ``engine/device.go`` ``parseTopologyLevel``; anything else is SINGLE.
TOPOLOGY_LEVELS = {
    "internal": "internal",
    "single": "single",
    "multiple": "multiple",
    "hostbridge": "hostbridge",
    "node": "node",
    "system": "system",
}
#: ``engine/fabric.go`` ``parseFabricState``; "" and unknown words are COMPLETED. ``auto`` follows
#: the fake fabric manager's readiness marker, and without ``MOCK_FABRICMANAGER_STATE_DIR``
#: (never set here) it is COMPLETED too (``engine/fabric_readiness.go``).
FABRIC_STATES = {
    "": "completed",
    "auto": "completed",
    "completed": "completed",
    "not_started": "not-started",
    "notstarted": "not-started",
    "in_progress": "in-progress",
    "inprogress": "in-progress",
    "not_supported": "not-supported",
    "notsupported": "not-supported",
}
#: ``engine/fabric_health.go`` ``fabricIncorrectConfigValues``; unknown or empty is "none" (1).
FABRIC_INCORRECT_CONFIG = {
    "not_supported": 0,
    "none": 1,
    "incorrect_sysguid": 2,
    "incorrect_chassis_sn": 3,
    "no_partition": 4,
    "insufficient_nvlinks": 5,
    "incompatible_gpu_fw": 6,
    "invalid_location": 7,
    "gpu_state_invalid": 8,
}
#: ``engine/topology.go`` ``nvlinkStateActive``: a link state that counts as up ("" too).
ACTIVE_LINK_STATES = frozenset({"", "active", "up", "enabled"})


class ModelGap(AssertionError):
    """The config uses a feature of the mock that this model does not describe yet."""


def _bus_id_parts(bus_id: str) -> tuple[int, int, int, int]:
    """``engine/device.go`` ``ParsePCIBusID``: ``DDDD:BB:DD.F`` (or ``BB:DD.F``), hex fields."""
    match = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)", bus_id)
    if match:
        domain, bus, device, function = (int(part, 16) for part in match.groups())
        return domain, bus, device, function
    match = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)", bus_id)
    if match:
        bus, device, function = (int(part, 16) for part in match.groups())
        return 0, bus, device, function
    raise ModelGap(f"bus id {bus_id!r}: the mock reports an unparseable bus id verbatim")


def nvml_bus_id(bus_id: str) -> str:
    """The ``busId`` the mock puts in ``nvmlPciInfo_t`` (``formatPCIBusID``: ``%08X:%02X:%02X.%X``)."""
    domain, bus, device, function = _bus_id_parts(bus_id)
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"


def sysfs_bus_id(bus_id: str) -> str:
    """The directory name under ``bus/pci/devices`` for a bus id (4-digit domain, lower case)."""
    domain, bus, device, function = _bus_id_parts(bus_id)
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def cpulist(cpus: list[int]) -> str:
    """A Linux cpulist (``0-63,128``) of CPU ids: the shape ``Gpu.cpu_affinity`` has."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def _cpu_range(text: str) -> list[int]:
    """``engine/topology.go`` ``parseCPURange``: ranges and single ids; malformed parts are skipped."""
    cpus: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                start, end = int(lo.strip()), int(hi.strip())
                if end >= start:
                    cpus.extend(range(start, end + 1))
            else:
                cpus.append(int(part))
        except ValueError:
            continue
    return cpus


def _canonical_uuid(text: str) -> str:
    """``engine/fabric.go`` ``parseClusterUUID`` (hex digits only, cut or zero-padded to 32),
    written as the canonical UUID string of ``FabricInfo.cluster_uuid``."""
    digits = "".join(c for c in text if c in "0123456789abcdefABCDEF")[:32].ljust(32, "0").lower()
    return f"{digits[0:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


def _fabric_health_mask(fabric: Mapping[str, Any]) -> int:
    """``engine/fabric_health.go`` ``resolveFabricHealthMask``: a raw ``health_mask`` wins;
    otherwise each condition of ``health`` in its slot (2 bits each at 0, 2, 4, 6: TRUE 1 when
    faulted, FALSE 2 when not; 4 bits at 8: the incorrect-configuration value)."""
    if fabric.get("health_mask") is not None:
        return int(fabric["health_mask"])
    health = fabric.get("health") or {}
    mask = 0
    for shift, key in (
        (0, "degraded_bandwidth"),
        (2, "route_recovery"),
        (4, "route_unhealthy"),
        (6, "access_timeout_recovery"),
    ):
        mask |= (1 if health.get(key) else 2) << shift
    incorrect = str(health.get("incorrect_configuration") or "").strip().lower()
    mask |= FABRIC_INCORRECT_CONFIG.get(incorrect, 1) << 8
    return mask


def _device_config(config: Mapping[str, Any], index: int) -> dict[str, Any]:
    """``engine/config.go`` ``GetDeviceConfig``: the defaults with the device's override merged.

    ``mergeDeviceOverride`` merges only some fields; of those gfd reads, name, serial, brand,
    architecture, ``pci`` (bus id, device id, field by field), ``memory`` and ``fabric`` (whole
    blocks). ``compute_capability`` and ``mig`` of an override are ignored: the defaults hold.
    """
    merged = dict(config.get("device_defaults") or {})
    override = next((d for d in config.get("devices") or [] if d.get("index") == index), None)
    if override is None:
        return merged
    for key in ("name", "serial", "brand", "architecture"):
        if override.get(key):
            merged[key] = override[key]
    if override.get("pci") is not None:
        pci = dict(merged.get("pci") or {})
        for key in ("bus_id", "device_id", "subsystem_id"):
            if override["pci"].get(key):
                pci[key] = override["pci"][key]
        merged["pci"] = pci
    for key in ("memory", "fabric"):
        if override.get(key) is not None:
            merged[key] = override[key]
    return merged


def _override(config: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    return next((d for d in config.get("devices") or [] if d.get("index") == index), {})


def device_count(config: Mapping[str, Any]) -> int:
    """``engine/config.go`` ``applyYAMLConfig``: ``system.num_devices`` when positive, else the
    number of ``devices`` entries (8 when there are none), at most :data:`MAX_DEVICES`."""
    count = len(config.get("devices") or []) or 8
    if int((config.get("system") or {}).get("num_devices") or 0) > 0:
        count = int(config["system"]["num_devices"])
    return min(count, MAX_DEVICES)


def visible_devices(count: int, exists: Callable[[str], bool] = os.path.exists) -> list[int]:
    """``engine/engine.go`` ``detectVisibleDevices``: when some but not all ``/dev/nvidia<N>``
    nodes exist (a container given some GPUs), NVML shows only those; when all or none exist
    (a CI machine), it shows every device. Index ``i`` of the answer is NVML's GPU ``i``."""
    present = [i for i in range(count) if exists(f"/dev/nvidia{i}")]
    if not present or len(present) == count:
        return list(range(count))
    return present


def _root_complexes(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((config.get("pcie_topology") or {}).get("root_complexes") or [])


def _sysfs_topology(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``mockpcisysfs/config`` ``EffectiveTopology``: the declared root complexes, or one root
    ``pci0000:00`` on NUMA node 0 holding every device that has a bus id."""
    declared = _root_complexes(config)
    if declared:
        return declared
    devices = [
        d["pci"]["bus_id"]
        for d in config.get("devices") or []
        if (d.get("pci") or {}).get("bus_id")
    ]
    return [{"id": "pci0000:00", "numa_node": 0, "devices": devices}] if devices else []


def _links(config: Mapping[str, Any], count: int) -> list[list[dict[str, Any]]]:
    """``engine/topology.go`` ``resolveLinks``: the NVLinks of each device.

    The bundled configs declare NVSwitches and ``links_per_gpu`` and no per-device link list;
    the mock then gives every device ``min(links_per_gpu, 18)`` links, link ``k`` to switch
    ``k mod switches`` (declaration order), in the state ``nvlink.defaults.state`` (none: up).
    """
    nvlink = config.get("nvlink") or {}
    per_device: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    if nvlink.get("device_links") or nvlink.get("links"):
        raise ModelGap(
            "explicit NVLink lists (nvlink.device_links / nvlink.links) are not modelled"
        )
    switches = [
        str(s.get("bdf") or "").strip().lower()
        for s in nvlink.get("switches") or []
        if str(s.get("bdf") or "").strip()
    ]
    per_gpu = int(nvlink.get("links_per_gpu") or 0)
    if not switches or per_gpu <= 0:
        return per_device
    state = str((nvlink.get("defaults") or {}).get("state") or "").strip().lower()
    for device in range(count):
        per_device[device] = [
            {"link": k, "active": state in ACTIVE_LINK_STATES, "remote": "switch"}
            for k in range(min(per_gpu, NVLINK_MAX_LINKS))
        ]
    return per_device


def _memory_health(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``engine/device.go``, without failure injection: ``GetEccMode`` answers the ``ecc``
    block's ``mode_current`` (``enabled``, else disabled); ``GetRemappedRows`` answers the
    ``remapped_rows`` block (zeros without one) on every GPU, so gfd never asks for retired
    pages; ``GetTotalEccErrors`` answers 0, and gfd asks it only with ECC on."""
    enabled = (cfg.get("ecc") or {}).get("mode_current") == "enabled"
    rows = cfg.get("remapped_rows") or {}
    return {
        "ecc_enabled": enabled,
        "remapped_rows": {
            "correctable": int(rows.get("correctable") or 0),
            "uncorrectable": int(rows.get("uncorrectable") or 0),
            "pending": bool(rows.get("pending")),
            "failure": bool(rows.get("failure_occurred")),
        },
        "retired_pages": None,
        "volatile_uncorrected_ecc": 0 if enabled else None,
    }


def _pcie(cfg: Mapping[str, Any], hidden_exports: frozenset[str]) -> dict[str, Any]:
    """``engine/device.go``: ``GetCurrPcieLinkGeneration``/``Width`` and
    ``GetMaxPcieLinkGeneration``/``Width`` answer the ``pcie`` block's ``current_link_*`` and
    ``max_link_*`` (NOT_SUPPORTED for 0 or no block); ``GetGpuMaxPcieLinkGeneration`` answers
    ``max_link_gen`` too (the mock has no host-side limit); ``GetPcieReplayCounter`` answers 0
    whatever the config says. gfd asks utilisation only below the reachable generation."""
    pcie = cfg.get("pcie") or {}

    def level(key: str) -> int | None:
        return int(pcie.get(key) or 0) or None

    link = {
        "current_generation": level("current_link_gen"),
        "current_width": level("current_link_width"),
        "max_generation": level("max_link_gen"),
        "max_width": level("max_link_width"),
        "gpu_max_generation": None
        if "nvmlDeviceGetGpuMaxPcieLinkGeneration" in hidden_exports
        else level("max_link_gen"),
        "replay_counter": 0,
        "gpu_utilization": None,
    }
    current, reachable = link["current_generation"], link["max_generation"]
    if current is not None and reachable is not None and current < reachable:
        raise ModelGap("a link below its maximum generation (gfd then asks utilisation)")
    return link


def expected_facts(
    config: Mapping[str, Any],
    hidden_exports: frozenset[str] = frozenset(),
    exists: Callable[[str], bool] = os.path.exists,
) -> dict[str, Any]:
    """The facts gfd must read from the mock serving ``config`` (parsed YAML), on the sysfs tree
    ``render-pci-sysfs`` writes for it: the serialised form of ``gfd.facts.NodeFacts`` without
    ``machine_type`` (a harness file, not the mock) and ``schema_version``.

    ``hidden_exports`` are NVML functions removed from the library's exports (an older driver's
    export set): what only they answer is absent. Fabric info then comes from the v1 call
    ``nvmlDeviceGetGpuFabricInfo`` when that one is exported (``bridge/fabric.go``: the same
    clique, state and status, and the v1 struct has no health mask).
    """
    system = config.get("system") or {}
    count = device_count(config)
    visible = visible_devices(count, exists)

    # NVML side of the PCIe topology (engine/topology.go resolveAffinity): by lower-cased bus id.
    roots = _root_complexes(config)
    has_pcie = bool(roots)
    cores = int((config.get("pcie_topology") or {}).get("cores_per_numa") or 0)
    cores = cores if cores > 0 else DEFAULT_CORES_PER_NUMA
    numa_of: dict[str, int] = {}
    root_of: dict[str, str] = {}
    cpus_of: dict[str, list[int]] = {}
    for rc in roots:
        node = int(rc.get("numa_node") or 0)
        if rc.get("cpu_affinity"):
            cpus = _cpu_range(str(rc["cpu_affinity"]))
        else:
            cpus = list(range(node * cores, node * cores + cores))
        for bdf in rc.get("devices") or []:
            numa_of[bdf.lower()] = node
            root_of[bdf.lower()] = str(rc.get("id") or "")
            cpus_of[bdf.lower()] = cpus

    # sysfs side (render/render.go): numa_node, class, vendor of each rendered device.
    sysfs_numa: dict[str, int] = {}
    for rc in _sysfs_topology(config):
        for bdf in rc.get("devices") or []:
            sysfs_numa[sysfs_bus_id(bdf)] = int(rc.get("numa_node") or 0)

    links = _links(config, count)
    fabric_call = next(
        (
            call
            for call in ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo")
            if call not in hidden_exports
        ),
        None,
    )
    nvlink_version = int((config.get("nvlink") or {}).get("version") or 0)

    def bdf_key(index: int) -> str:
        # engine/topology.go BuildNodeFabric joins devices to the topology by lower-cased bus id.
        return str((_override(config, index).get("pci") or {}).get("bus_id") or "").lower()

    gpus: list[dict[str, Any]] = []
    for nvml_index, device in enumerate(visible):
        cfg = _device_config(config, device)
        override = _override(config, device)
        for key in ("name", "brand", "architecture", "compute_capability", "memory"):
            if not cfg.get(key):
                raise ModelGap(
                    f"device {device} has no {key}: the dgxa100 base value is not modelled"
                )
        uuid = override.get("uuid")
        bus_id = (override.get("pci") or {}).get("bus_id")
        if not uuid or not bus_id:
            raise ModelGap(f"device {device}: generated UUIDs and bus ids are not modelled")
        pci = cfg.get("pci")
        pci_device_id = int(pci.get("device_id") or 0) if pci is not None else DEFAULT_PCI_DEVICE_ID
        key = bdf_key(device)
        mig = cfg.get("mig") or {}
        fabric = cfg.get("fabric")
        # engine/topology.go computeNVCounts / nvlink_fields.go: LINK_COUNT is the number of
        # active links; the bundled configs' links are 0..N-1, all up or all down.
        active = [link for link in links[device] if link["active"]]
        if [link["link"] for link in active] != list(range(len(active))):
            raise ModelGap(f"device {device}: active links are not 0..N-1")
        nvlinks = [
            {
                "index": link["link"],
                "active": True,
                "remote_bus_id": SWITCH_REMOTE_BUS_ID,
                "remote_type": "switch",
            }
            for link in active
        ]
        gpus.append(
            {
                "index": nvml_index,
                "name": cfg["name"],
                "uuid": uuid,
                # device.go GetSerial: the config's serial; empty or absent is NOT_SUPPORTED.
                "serial": str(cfg.get("serial") or "").strip() or None,
                "bus_id": nvml_bus_id(bus_id),
                "pci_device_id": pci_device_id or None,
                "pci_class": SYSFS_PCI_CLASS if sysfs_bus_id(bus_id) in sysfs_numa else None,
                "memory_total_bytes": int(cfg["memory"]["total_bytes"]),
                "compute_major": int(cfg["compute_capability"]["major"]),
                "compute_minor": int(cfg["compute_capability"]["minor"]),
                "architecture": ARCHITECTURES.get(cfg["architecture"], ARCHITECTURE_UNKNOWN),
                "brand": BRANDS.get(cfg["brand"], 0),
                # sysfs numa_node as render-pci-sysfs wrote it (-1 or missing reads as absent).
                "numa_node": sysfs_numa.get(sysfs_bus_id(bus_id)),
                # device.go GetNumaNodeId: the NUMA node of the device's root complex;
                # NOT_SUPPORTED without pcie_topology or for a device outside it.
                "gpu_numa_id": numa_of.get(key)
                if has_pcie and "nvmlDeviceGetNumaNodeId" not in hidden_exports
                else None,
                # device.go GetCpuAffinity: the root complex's CPUs; NOT_SUPPORTED without
                # pcie_topology; an empty mask for a device outside it.
                "cpu_affinity": cpulist(cpus_of.get(key, [])) if has_pcie else None,
                # device.go GetMigMode: "enabled" is 1, anything else (or no mig block) 0.
                "mig_mode_current": mig.get("mode_current") == "enabled",
                "mig_mode_pending": mig.get("mode_pending") == "enabled",
                # device.go GetMigDeviceHandleByIndex is NOT_FOUND for every index.
                "mig_devices": [],
                # device.go GetNvLinkVersion: the config's nvlink.version, as is.
                "nvlink_version": nvlink_version if nvlinks else None,
                "nvlinks": nvlinks,
                # fabric.go GetMockFabricInfoV: NOT_SUPPORTED without a fabric block; the
                # status inside the struct is always SUCCESS.
                "fabric": None
                if fabric is None or not fabric_call
                else {
                    "cluster_uuid": _canonical_uuid(str(fabric.get("cluster_uuid") or "")),
                    "clique_id": int(fabric.get("clique_id") or 0),
                    "state": FABRIC_STATES.get(
                        str(fabric.get("state") or "").strip().lower(), "completed"
                    ),
                    "status": 0,
                    "health_mask": _fabric_health_mask(fabric)
                    if fabric_call == "nvmlDeviceGetGpuFabricInfoV"
                    else None,
                },
                "pcie": _pcie(cfg, hidden_exports),
                "memory_health": _memory_health(cfg),
                # device.go GetVirtualizationMode: SUCCESS for every device, the defaults'
                # virtualization.mode (mergeDeviceOverride takes none from a device), NONE
                # without the block ("real hardware always knows", says its comment).
                "virtualization_mode": VIRTUALIZATION_MODES.get(
                    str((cfg.get("virtualization") or {}).get("mode")), 0
                ),
            }
        )

    pairs: list[dict[str, Any]] = []
    for a in range(len(visible)):
        for b in range(a + 1, len(visible)):
            ka, kb = bdf_key(visible[a]), bdf_key(visible[b])
            if has_pcie:
                # topology.go computePCIeLevels: NUMA nodes differ -> SYSTEM; same root
                # complex -> SINGLE; otherwise HOSTBRIDGE. Devices outside every root complex
                # are on NUMA "-1" with no root.
                na, nb = numa_of.get(ka, -1), numa_of.get(kb, -1)
                ra, rb = root_of.get(ka, ""), root_of.get(kb, "")
                if na != nb:
                    level = "system"
                elif ra and ra == rb:
                    level = "single"
                else:
                    level = "hostbridge"
            else:
                # device.go GetTopologyCommonAncestor: the asking device's topology.default_level.
                default = (_device_config(config, visible[a]).get("topology") or {}).get(
                    "default_level", ""
                )
                level = TOPOLOGY_LEVELS.get(default, "single")
            pairs.append({"a": a, "b": b, "level": level})

    # gfd/facts/pci.py reads the NVIDIA (vendor 0x10de) display functions' config space; the
    # renderer writes 256 bytes with a zero status register, so no capability list and no vGPU.
    vendors = []
    for rc in _sysfs_topology(config):
        for bdf in rc.get("devices") or []:
            index = next(
                (
                    d.get("index")
                    for d in config.get("devices") or []
                    if str((d.get("pci") or {}).get("bus_id") or "").lower() == bdf.lower()
                ),
                None,
            )
            pci = (_device_config(config, index).get("pci") or {}) if index is not None else {}
            vendors.append(int(pci.get("device_id") or 0) & 0xFFFF or NVIDIA_VENDOR_ID)
    vgpu = (
        {"present": False, "host_driver_version": None, "host_driver_branch": None}
        if NVIDIA_VENDOR_ID in vendors
        else None
    )

    cuda_major = int(system.get("cuda_version_major") or 0)
    if cuda_major <= 0:
        raise ModelGap(
            "no system.cuda_version_major: the dgxa100 base CUDA version is not modelled"
        )
    return {
        # engine/engine.go applySystemConfig: the config's driver version; CUDA as
        # major*1000 + minor*10.
        "driver_version": str(system["driver_version"]),
        "cuda_driver_version": cuda_major * 1000 + int(system.get("cuda_version_minor") or 0) * 10,
        "gpus": gpus,
        "pci_pairs": pairs,
        # Every GPU sits on one switch fabric (links spread k mod switches): no pair to ask.
        "nvlink_p2p": [],
        "vgpu": vgpu,
    }
