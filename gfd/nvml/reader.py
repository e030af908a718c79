"""The NVML reader: the only code in gfd that imports ``pynvml``.

One pass over NVML (and the few sysfs files NVML does not cover) builds a
:class:`gfd.facts.NodeFacts`. Every NVML call gfd makes is listed in :data:`NVML_CALLS`
with its role:

* *required*: the identity of a GPU (count, handle, name, UUID, PCI info) and, on a
  MIG-enabled GPU, its MIG devices; any error fails the read with a
  :class:`gfd.errors.NvmlError` carrying NVML's error name.
* *required, may be unsupported*: driver and CUDA versions, memory, compute
  capability. Every driver branch exports them; NOT_SUPPORTED makes the fact absent.
* *optional*: everything else. Not exported by this driver (FUNCTION_NOT_FOUND), not
  supported, or invalid for this device makes that one fact absent, never the read;
  where an older call gives the same fact, it is the fallback (fabric info v1 for
  ``...FabricInfoV``, GPU instance profile info v1 for ``...ProfileInfoV``). Each
  absence is reported to the caller (``on_absent``) with its cause; the agent logs
  it once per process at debug level.

NVML is always shut down, also on error. Where the NVML library comes from is a
parameter: ``library_path=None`` lets pynvml load the driver's ``libnvidia-ml.so.1``;
a path (the simulator) is loaded into pynvml's module state instead. pynvml keeps that
state per process, so the loading is serialised by a lock here.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import pynvml

from gfd.errors import NvmlError, NvmlGpuLost, NvmlNotReady
from gfd.facts import (
    FABRIC_STATES,
    GI_PROFILE_VARIANTS,
    NVLINK_REMOTE_TYPES,
    P2P_STATUSES,
    PCI_LEVELS,
    FabricInfo,
    Gpu,
    MigDevice,
    NodeFacts,
    NvLink,
    NvLinkP2P,
    PciPair,
    VgpuInfo,
    cpulist_from_ids,
)
from gfd.facts_limits import MACHINE_LIMITS, MachineLimits, limit_problem
from gfd.inputs import SYSFS_ATTRIBUTE_LIMIT, InputRejected, read_bounded
from gfd.nvml.vgpu import read_vgpu
from gfd.pci import PCI_DEVICES, read_hex, read_sysfs_int, sysfs_bus_id

DEFAULT_SYSFS_ROOT = Path("/sys")
DEFAULT_MACHINE_TYPE_FILE = Path("/sys/class/dmi/id/product_name")

#: Words of 64 CPUs asked of nvmlDeviceGetCpuAffinity: 4096 CPUs covers any machine shipped.
CPU_AFFINITY_WORDS = 64
#: NVML_FI_DEV_NVLINK_LINK_COUNT.
FIELD_NVLINK_LINK_COUNT = 91
#: Upper bound on links probed one by one when the link-count field is not supported.
MAX_PROBED_LINKS = 36
#: ``NVML_P2P_CAPS_INDEX_NVLINK``, written out: pynvml spells some P2P caps constants as
#: one-element tuples (``NVML_P2P_CAPS_INDEX_READ`` is ``(0,)``), which ctypes cannot pass.
P2P_CAPS_INDEX_NVLINK = 2
#: nvml.h's ``nvmlGpuFabricInfo_v3``; pynvml's default fabric struct is still v2.
FABRIC_INFO_V3 = 0x03000028

CallRole = Literal["required", "unsupported-absent", "optional"]


@dataclass(frozen=True)
class NvmlCall:
    """One NVML function the reader may call (``symbol`` as the library exports it)."""

    symbol: str
    role: CallRole
    fact: str
    #: What gives the fact when this call cannot: another call, or a sysfs file.
    fallback: str = ""


#: Every NVML function gfd's reader may call; ``docs/nvml.md`` is this table in prose
#: (with the first driver branch exporting each, from :mod:`gfd.nvml.branches`).
NVML_CALLS: tuple[NvmlCall, ...] = (
    NvmlCall("nvmlInitWithFlags", "required", "NVML start-up"),
    NvmlCall("nvmlShutdown", "required", "NVML shut-down"),
    NvmlCall("nvmlErrorString", "required", "error messages"),
    NvmlCall("nvmlSystemGetDriverVersion", "unsupported-absent", "driver_version"),
    NvmlCall("nvmlSystemGetCudaDriverVersion", "unsupported-absent", "cuda_driver_version"),
    NvmlCall("nvmlDeviceGetCount_v2", "required", "number of GPUs"),
    NvmlCall("nvmlDeviceGetHandleByIndex_v2", "required", "GPU handles"),
    NvmlCall("nvmlDeviceGetName", "required", "gpus[].name, mig_devices[].name"),
    NvmlCall("nvmlDeviceGetUUID", "required", "gpus[].uuid, mig_devices[].uuid"),
    NvmlCall("nvmlDeviceGetPciInfo_v3", "required", "gpus[].bus_id, pci_device_id"),
    NvmlCall("nvmlDeviceGetMemoryInfo", "unsupported-absent", "gpus[].memory_total_bytes"),
    NvmlCall(
        "nvmlDeviceGetCudaComputeCapability", "unsupported-absent", "gpus[].compute_major/minor"
    ),
    NvmlCall("nvmlDeviceGetArchitecture", "optional", "gpus[].architecture"),
    NvmlCall("nvmlDeviceGetBrand", "optional", "gpus[].brand"),
    NvmlCall(
        "nvmlDeviceGetNumaNodeId",
        "optional",
        "gpus[].gpu_numa_id (the GPU's own memory node on coherent platforms)",
        "none for gpu_numa_id; gpus[].numa_node (the PCI device's node) always comes from "
        "sysfs bus/pci/devices/<bdf>/numa_node",
    ),
    NvmlCall("nvmlDeviceGetCpuAffinity", "optional", "gpus[].cpu_affinity"),
    NvmlCall("nvmlDeviceGetMigMode", "optional", "gpus[].mig_mode_current/pending"),
    NvmlCall("nvmlDeviceGetMaxMigDeviceCount", "required", "MIG slots of a MIG-enabled GPU"),
    NvmlCall("nvmlDeviceGetMigDeviceHandleByIndex", "required", "MIG device handles"),
    NvmlCall("nvmlDeviceGetGpuInstanceId", "required", "mig_devices[].gpu_instance_id"),
    NvmlCall("nvmlDeviceGetComputeInstanceId", "required", "mig_devices[].compute_instance_id"),
    NvmlCall("nvmlDeviceGetAttributes_v2", "required", "mig_devices[] slices, engines"),
    NvmlCall("nvmlDeviceGetGpuInstanceById", "required", "the GPU instance of a MIG device"),
    NvmlCall("nvmlGpuInstanceGetInfo", "required", "mig_devices[].gi_profile_id"),
    NvmlCall(
        "nvmlDeviceGetGpuInstanceProfileInfoV",
        "required",
        "mig_devices[].gi_profile_index, gi_memory_mib",
        "nvmlDeviceGetGpuInstanceProfileInfo (v1 struct; branch 470)",
    ),
    NvmlCall(
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "required",
        "as ...ProfileInfoV, where that is not exported",
    ),
    NvmlCall(
        "nvmlDeviceGetFieldValues",
        "optional",
        "NVLink count (NVML_FI_DEV_NVLINK_LINK_COUNT)",
        "probing nvmlDeviceGetNvLinkState link by link",
    ),
    NvmlCall("nvmlDeviceGetNvLinkState", "optional", "gpus[].nvlinks[].active"),
    NvmlCall("nvmlDeviceGetNvLinkVersion", "optional", "gpus[].nvlink_version"),
    NvmlCall("nvmlDeviceGetNvLinkRemotePciInfo_v2", "optional", "gpus[].nvlinks[].remote_bus_id"),
    NvmlCall("nvmlDeviceGetNvLinkRemoteDeviceType", "optional", "gpus[].nvlinks[].remote_type"),
    NvmlCall("nvmlDeviceGetTopologyCommonAncestor", "optional", "pci_pairs[]"),
    NvmlCall(
        "nvmlDeviceGetP2PStatus",
        "optional",
        "nvlink_p2p[] (NVLink reachability between NVSwitch fabrics that share no switch: "
        "one pair per two fabrics, none on a one-fabric node)",
    ),
    NvmlCall(
        "nvmlDeviceGetGpuFabricInfoV",
        "optional",
        "gpus[].fabric",
        "nvmlDeviceGetGpuFabricInfo (v1 struct, no health mask; branches 525 and 535)",
    ),
    NvmlCall("nvmlDeviceGetGpuFabricInfo", "optional", "gpus[].fabric where ...InfoV is missing"),
)

#: NVML errors that make an optional fact absent: the driver's library does not export the
#: function, the device does not support it, or the call is not valid for this device.
ABSENT_CODES: tuple[int, ...] = (
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_INVALID_ARGUMENT,
)

_NOT_READY_CODES = {
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
}
_ERROR_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}
#: Errors of the first fabric call that read as absent; FUNCTION_NOT_FOUND and a struct
#: version mismatch have fallbacks instead.
_FABRIC_ABSENT = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)
_LEVEL_NAMES = {value: name for name, value in PCI_LEVELS.items()}
_REMOTE_TYPE_NAMES = {value: name for name, value in NVLINK_REMOTE_TYPES.items()}
_FABRIC_STATE_NAMES = {value: name for name, value in FABRIC_STATES.items()}
_P2P_STATUS_NAMES = {value: name for name, value in P2P_STATUSES.items()}

_library_lock = threading.Lock()
_loaded_library: str | None = None

T = TypeVar("T")


def error_name(code: int) -> str:
    """NVML's name for a return code (``NVML_ERROR_GPU_IS_LOST``)."""
    return _ERROR_NAMES.get(code, f"NVML_ERROR_{code}")


def _as_gfd_error(call: str, exc: pynvml.NVMLError) -> NvmlError:
    code = int(exc.value)
    name = error_name(code)
    if code in _NOT_READY_CODES:
        return NvmlNotReady(call, code, name)
    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
        return NvmlGpuLost(call, code, name)
    return NvmlError(call, code, name)


def _select_library(library_path: str | Path | None) -> None:
    """Point pynvml at ``library_path`` (or back at the driver's library)."""
    global _loaded_library
    wanted = str(library_path) if library_path is not None else None
    if wanted == _loaded_library and (wanted is None or pynvml.nvmlLib is not None):
        return
    # pynvml caches symbols by name; a different library must not inherit them.
    pynvml._nvmlGetFunctionPointer_cache.clear()
    if wanted is None:
        pynvml.nvmlLib = None
    else:
        try:
            pynvml.nvmlLib = ctypes.CDLL(wanted)
        except OSError as exc:
            raise NvmlNotReady(
                "load",
                pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                "NVML_ERROR_LIBRARY_NOT_FOUND",
                str(exc),
            ) from exc
    _loaded_library = wanted


class _Session:
    """Calls into an initialised NVML, turning errors into gfd's and counting calls.

    ``absences`` collects, per call, the cause that made an optional fact absent.
    """

    def __init__(self, limits: MachineLimits = MACHINE_LIMITS) -> None:
        self.calls = 0
        self.absences: dict[str, str] = {}
        self.limits = limits

    def required(self, call: str, fn: Callable[..., T], *args: Any) -> T:
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise _as_gfd_error(call, exc) from exc

    def unsupported_absent(self, call: str, fn: Callable[..., T], *args: Any) -> T | None:
        """A call every driver exports: only NOT_SUPPORTED reads as absent."""
        return self.absent_on(call, (pynvml.NVML_ERROR_NOT_SUPPORTED,), fn, *args)

    def optional(self, call: str, fn: Callable[..., T], *args: Any) -> T | None:
        """Not exported, not supported or not valid for this device reads as absent."""
        return self.absent_on(call, ABSENT_CODES, fn, *args)

    def absent_on(
        self, call: str, codes: tuple[int, ...], fn: Callable[..., T], *args: Any
    ) -> T | None:
        """Like :meth:`required`, but the NVML errors in ``codes`` read as absent."""
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if exc.value in codes:
                self.absences.setdefault(call, error_name(int(exc.value)))
                return None
            raise _as_gfd_error(call, exc) from exc


def read_facts(
    *,
    library_path: str | Path | None = None,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    machine_type_file: Path = DEFAULT_MACHINE_TYPE_FILE,
    on_absent: Callable[[str, str], None] | None = None,
    limits: MachineLimits = MACHINE_LIMITS,
) -> NodeFacts:
    """Read every fact gfd uses from NVML and sysfs in one pass, on an NVML session of its own.

    ``on_absent(call, cause)`` hears of each optional call whose fact is absent and why
    (``NVML_ERROR_FUNCTION_NOT_FOUND``...), once per call per read. A machine reporting more
    than ``limits`` is refused (:class:`gfd.errors.NvmlBeyondLimits`) before it is read.
    """
    reader = NvmlReader(
        library_path=library_path,
        sysfs_root=sysfs_root,
        machine_type_file=machine_type_file,
        on_absent=on_absent,
        limits=limits,
    )
    try:
        return reader.read()
    finally:
        reader.close()


#: The reader whose NVML session is open (pynvml's state is per process: one at a time).
_session_owner: NvmlReader | None = None


class NvmlReader:
    """Reads the facts cycle after cycle on one NVML session, re-reading only what can change.

    A periodic agent asks the same questions every cycle, and most answers cannot change
    while NVML stays initialised and a GPU keeps its UUID: its name, PCI identity, memory,
    compute capability, CPU affinity, NUMA node, link count, the PCIe ancestors of each
    pair, the sysfs vGPU facts. Those are read once per session (:class:`_ReadCache`).
    Every read still asks, each time: the driver and CUDA versions, the device count, each
    GPU's name and UUID (its identity), its MIG mode and MIG devices (by slot: handle,
    name, UUID), each NVLink's state, and the fabric state, so a driver, device-count,
    MIG or link change is seen by the next read. A GPU whose UUID changed is read anew,
    and so is everything after any NVML error: the session is shut down and the next read
    starts a fresh one with nothing remembered. Every ``FULL_READ_EVERY`` reads the cache
    is dropped anyway, so a fact that changed behind a stable UUID lasts at most that long.

    The first read of a session makes exactly the calls :func:`read_facts` makes, in the
    same order. :meth:`close` shuts NVML down (the agent calls it on stop and reload);
    another reader, or :func:`read_facts`, taking the library closes this one's session.
    """

    #: Reads between two whole re-reads of a session (at the default 60 s: about an hour).
    FULL_READ_EVERY = 64

    def __init__(
        self,
        *,
        library_path: str | Path | None = None,
        sysfs_root: Path = DEFAULT_SYSFS_ROOT,
        machine_type_file: Path = DEFAULT_MACHINE_TYPE_FILE,
        on_absent: Callable[[str, str], None] | None = None,
        limits: MachineLimits = MACHINE_LIMITS,
    ) -> None:
        self.library_path = library_path
        self.sysfs_root = sysfs_root
        self.machine_type_file = machine_type_file
        self.on_absent = on_absent
        self.limits = limits
        self._cache = _ReadCache()
        self._reads_in_session = 0
        #: NVML calls made by the last read (tests and benchmarks compare them).
        self.last_calls = 0

    def read(self) -> NodeFacts:
        global _session_owner
        with _library_lock:
            if _session_owner is not self or self._reads_in_session >= self.FULL_READ_EVERY:
                if _session_owner is not None:
                    _session_owner._shut_down()
                _select_library(self.library_path)
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as exc:
                    raise _as_gfd_error("nvmlInit", exc) from exc
                _session_owner = self
                self._cache = _ReadCache()
                self._reads_in_session = 0
            session = _Session(self.limits)
            try:
                facts = _read_all(session, self.sysfs_root, self.machine_type_file, self._cache)
            except BaseException:
                # After any error nothing read in this session is trusted.
                self._shut_down()
                raise
            finally:
                self.last_calls = session.calls
            self._reads_in_session += 1
        if self.on_absent is not None:
            for call, cause in session.absences.items():
                self.on_absent(call, cause)
        return facts

    def close(self) -> None:
        """Shut this reader's NVML session down, if it has one open."""
        with _library_lock:
            self._shut_down()

    def _shut_down(self) -> None:
        global _session_owner
        if _session_owner is not self:
            return
        _session_owner = None
        self._cache = _ReadCache()
        # A failed shutdown cannot be acted on; the read result (or error) stands.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


class _Unread:
    """A cached fact not asked yet (distinct from None, which is "absent")."""


_UNREAD: Any = _Unread()


@dataclass
class _GpuStatic:
    """The facts of one GPU (by UUID) that cannot change while an NVML session lasts."""

    name: str
    bus_id: str
    pci_device_id: int | None
    pci_class: int | None
    memory_total_bytes: int | None
    compute_major: int | None
    compute_minor: int | None
    architecture: int | None
    brand: int | None
    numa_node: int | None
    gpu_numa_id: int | None
    cpu_affinity: str | None
    link_count: Any = _UNREAD
    nvlink_version: Any = _UNREAD
    mig_slots: Any = _UNREAD
    #: GPU instance profiles of a MIG-enabled GPU (see _gpu_instance_profiles).
    profiles: Any = _UNREAD
    #: (remote bus id, remote type) of each link while it stays active.
    remotes: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    #: MIG devices by (slot, UUID): a MIG device keeps its facts while it exists.
    migs: dict[tuple[int, str], MigDevice] = field(default_factory=dict)


@dataclass
class _ReadCache:
    """What one NVML session has read that cannot change while it lasts."""

    gpus: dict[str, _GpuStatic] = field(default_factory=dict)
    #: The bus ids of the GPUs (in index order) the pairs and vGPU facts below belong to.
    pairs_of: tuple[str, ...] | None = None
    pairs: tuple[PciPair, ...] = ()
    p2p_of: tuple[tuple[str, ...], tuple[int, ...]] | None = None
    p2p: tuple[NvLinkP2P, ...] = ()
    vgpu_of: tuple[str, ...] | None = None
    vgpu: VgpuInfo | None = None


def read_facts_without_nvml(
    *,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    machine_type_file: Path = DEFAULT_MACHINE_TYPE_FILE,
) -> NodeFacts:
    """The facts of a node whose NVML cannot start: no GPUs, and what sysfs still tells.

    This is what ``--fail-on-init-error=false`` labels while the driver is not loaded, as
    the reference does (it labels such a node ``vgpu.present`` only).
    """
    return NodeFacts(machine_type=_read_machine_type(machine_type_file), vgpu=read_vgpu(sysfs_root))


def _read_all(
    nv: _Session, sysfs_root: Path, machine_type_file: Path, cache: _ReadCache
) -> NodeFacts:
    driver = nv.unsupported_absent("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    cuda = nv.unsupported_absent(
        "nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion
    )
    count = nv.required("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
    # Before anything that grows with it (one call per pair of GPUs, among others).
    _within_limit("nvmlDeviceGetCount", None, int(count), nv.limits.gpus, "GPUs")
    handles = [
        _on_gpu(i, nv.required, "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, i)
        for i in range(count)
    ]
    gpus = tuple(_on_gpu(i, _read_gpu, nv, i, h, sysfs_root, cache) for i, h in enumerate(handles))
    if len(cache.gpus) > len(gpus):
        present = {gpu.uuid for gpu in gpus}
        cache.gpus = {uuid: known for uuid, known in cache.gpus.items() if uuid in present}
    buses = tuple(gpu.bus_id for gpu in gpus)
    if cache.pairs_of != buses:
        cache.pairs = _read_pairs(nv, handles)
        cache.pairs_of = buses
    fabrics = (buses, tuple(_switch_fabrics(gpus)))
    if cache.p2p_of != fabrics:
        cache.p2p = _read_nvlink_p2p(nv, handles, gpus)
        cache.p2p_of = fabrics
    if cache.vgpu_of != buses:
        cache.vgpu = read_vgpu(sysfs_root)
        cache.vgpu_of = buses
    return NodeFacts(
        driver_version=_text(driver) if driver is not None else None,
        cuda_driver_version=int(cuda) if cuda is not None else None,
        machine_type=_read_machine_type(machine_type_file),
        gpus=gpus,
        pci_pairs=cache.pairs,
        nvlink_p2p=cache.p2p,
        vgpu=cache.vgpu,
    )


def _read_pairs(nv: _Session, handles: list[Any]) -> tuple[PciPair, ...]:
    """The PCIe common ancestor of each pair of GPUs a < b."""
    pairs: list[PciPair] = []
    count = len(handles)
    for a in range(count):
        for b in range(a + 1, count):
            level = nv.optional(
                "nvmlDeviceGetTopologyCommonAncestor",
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                handles[a],
                handles[b],
            )
            if level is None:
                continue
            if level not in _LEVEL_NAMES:
                raise NvmlError(
                    "nvmlDeviceGetTopologyCommonAncestor",
                    pynvml.NVML_ERROR_UNKNOWN,
                    "NVML_ERROR_UNKNOWN",
                    f"GPUs {a} and {b}: level {level} is not a known nvmlGpuTopologyLevel_t",
                )
            pairs.append(PciPair(a=a, b=b, level=_LEVEL_NAMES[level]))  # type: ignore[arg-type]
    return tuple(pairs)


def _switch_fabrics(gpus: tuple[Gpu, ...]) -> list[int]:
    """The lowest GPU of each group of GPUs that share an NVSwitch, ascending.

    A switch link is an active link of remote type ``switch``, or of unreported type
    whose bus id is no GPU of the node (as :mod:`gfd.topology.compact` reads it).
    """
    gpu_buses = {gpu.bus_id.upper() for gpu in gpus}
    parent = list(range(len(gpus)))

    def find(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    first_at_switch: dict[str, int] = {}
    attached: list[int] = []
    for gpu in gpus:
        for link in gpu.nvlinks:
            bus = link.remote_bus_id.upper() if link.remote_bus_id is not None else None
            is_switch = link.remote_type == "switch" or (
                link.remote_type is None and bus is not None and bus not in gpu_buses
            )
            if not link.active or not is_switch:
                continue
            if not attached or attached[-1] != gpu.index:
                attached.append(gpu.index)
            first = find(first_at_switch.setdefault(bus or "", gpu.index))
            own = find(gpu.index)
            parent[max(first, own)] = min(first, own)
    return [gpu for gpu in attached if find(gpu) == gpu]


def _read_nvlink_p2p(
    nv: _Session, handles: list[Any], gpus: tuple[Gpu, ...]
) -> tuple[NvLinkP2P, ...]:
    """NVLink P2P status where it can change the topology: between NVSwitch fabrics.

    GPUs that share a switch reach each other over NVLink by construction; GPUs on
    fabrics that share no switch do only when switch-to-switch trunks join them
    (DGX-2/HGX-2), which no link query shows. One pair per two fabrics is asked (their
    lowest GPUs), none where the two are already known to be joined: a normal DGX/HGX
    node (one fabric) makes no call, a two-board DGX-2 one.
    """
    fabrics = _switch_fabrics(gpus)
    group = list(range(len(fabrics)))
    entries: list[NvLinkP2P] = []
    for j in range(1, len(fabrics)):
        refused: set[int] = set()
        for i in range(j):
            if group[i] == group[j] or group[i] in refused:
                continue
            a, b = fabrics[i], fabrics[j]
            status = nv.optional(
                "nvmlDeviceGetP2PStatus",
                pynvml.nvmlDeviceGetP2PStatus,
                handles[a],
                handles[b],
                P2P_CAPS_INDEX_NVLINK,
            )
            if status is None:
                if nv.absences.get("nvmlDeviceGetP2PStatus") == "NVML_ERROR_FUNCTION_NOT_FOUND":
                    return tuple(entries)
                continue
            name = _P2P_STATUS_NAMES.get(int(status), "unknown")
            entries.append(NvLinkP2P(a=a, b=b, status=name))  # type: ignore[arg-type]
            if name != "ok":
                refused.add(group[i])
                continue
            joined, merged = min(group[i], group[j]), max(group[i], group[j])
            group = [joined if g == merged else g for g in group]
    return tuple(entries)


class NvmlBeyondLimits(NvmlError):
    """NVML reported more of something than any real node has (:mod:`gfd.facts_limits`).

    Nothing that grows with the count is asked: the read fails at once, as on any NVML
    error, and the agent keeps the last labels.
    """

    def __init__(self, call: str, gpu: int | None, problem: str) -> None:
        super().__init__(call, pynvml.NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", problem)
        of = f" of GPU {gpu}" if gpu is not None else ""
        # NVML itself did not fail: the message says what it answered.
        self.args = (f"NVML {call}{of} reported {problem}",)


def _within_limit(call: str, gpu: int | None, count: int, limit: int, what: str) -> int:
    """``count`` as NVML reported it, refused when no real node has that many."""
    if count > limit:
        raise NvmlBeyondLimits(call, gpu, limit_problem(count, limit, what))
    return count


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _on_gpu(index: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a read of GPU ``index``: a GPU lost during it is named by that index."""
    try:
        return fn(*args)
    except NvmlGpuLost as exc:
        if exc.gpu_index is None:
            exc.gpu_index = index
        raise


def _read_gpu(nv: _Session, index: int, handle: Any, sysfs_root: Path, cache: _ReadCache) -> Gpu:
    name = _text(nv.required("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
    uuid = _text(nv.required("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
    static = cache.gpus.get(uuid)
    if static is None or static.name != name:
        static = _read_gpu_static(nv, handle, name, sysfs_root)
        cache.gpus[uuid] = static
    mig = nv.optional("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
    links = _read_nvlinks(nv, index, handle, static)
    if links and static.nvlink_version is _UNREAD:
        version = nv.optional(
            "nvmlDeviceGetNvLinkVersion", pynvml.nvmlDeviceGetNvLinkVersion, handle, 0
        )
        static.nvlink_version = int(version) if version is not None else None
    return Gpu(
        index=index,
        name=name,
        uuid=uuid,
        bus_id=static.bus_id,
        pci_device_id=static.pci_device_id,
        pci_class=static.pci_class,
        memory_total_bytes=static.memory_total_bytes,
        compute_major=static.compute_major,
        compute_minor=static.compute_minor,
        architecture=static.architecture,
        brand=static.brand,
        numa_node=static.numa_node,
        gpu_numa_id=static.gpu_numa_id,
        cpu_affinity=static.cpu_affinity,
        mig_mode_current=bool(mig[0]) if mig is not None else None,
        mig_mode_pending=bool(mig[1]) if mig is not None else None,
        mig_devices=_mig_devices_if_enabled(nv, index, handle, static, mig),
        nvlink_version=static.nvlink_version if links else None,
        nvlinks=links,
        fabric=_read_fabric(nv, handle),
    )


def _mig_devices_if_enabled(
    nv: _Session, index: int, handle: Any, static: _GpuStatic, mig: Any
) -> tuple[MigDevice, ...]:
    if mig is not None and mig[0]:
        return _read_mig_devices(nv, index, handle, static)
    static.migs.clear()
    return ()


def _read_gpu_static(nv: _Session, handle: Any, name: str, sysfs_root: Path) -> _GpuStatic:
    """The facts of a GPU that last as long as its NVML session and UUID."""
    pci = nv.required("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo_v3, handle)
    bus_id = _text(pci.busId).upper()
    memory = nv.unsupported_absent(
        "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle
    )
    compute = nv.unsupported_absent(
        "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle
    )
    architecture = nv.optional(
        "nvmlDeviceGetArchitecture", pynvml.nvmlDeviceGetArchitecture, handle
    )
    brand = nv.optional("nvmlDeviceGetBrand", pynvml.nvmlDeviceGetBrand, handle)
    gpu_numa = nv.optional("nvmlDeviceGetNumaNodeId", pynvml.nvmlDeviceGetNumaNodeId, handle)
    affinity = nv.optional(
        "nvmlDeviceGetCpuAffinity", pynvml.nvmlDeviceGetCpuAffinity, handle, CPU_AFFINITY_WORDS
    )
    sysfs_dir = sysfs_root / PCI_DEVICES / sysfs_bus_id(bus_id)
    return _GpuStatic(
        name=name,
        bus_id=bus_id,
        # 0 is no real device id: NVML leaves it zero when it cannot tell.
        pci_device_id=int(pci.pciDeviceId) or None,
        pci_class=read_hex(sysfs_dir / "class"),
        memory_total_bytes=int(memory.total) if memory is not None else None,
        compute_major=int(compute[0]) if compute is not None else None,
        compute_minor=int(compute[1]) if compute is not None else None,
        architecture=int(architecture) if architecture is not None else None,
        brand=int(brand) if brand is not None else None,
        numa_node=_read_numa_node(sysfs_dir / "numa_node"),
        gpu_numa_id=int(gpu_numa) if gpu_numa is not None else None,
        cpu_affinity=_affinity_to_cpulist(affinity) if affinity is not None else None,
    )


def _read_nvlinks(nv: _Session, index: int, handle: Any, static: _GpuStatic) -> tuple[NvLink, ...]:
    if static.link_count is _UNREAD:
        static.link_count = _within_limit(
            "nvmlDeviceGetFieldValues",
            index,
            _nvlink_count(nv, handle),
            nv.limits.nvlinks,
            "NVLinks",
        )
    links: list[NvLink] = []
    for link in range(static.link_count):
        state = nv.optional(
            "nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, handle, link
        )
        if state is None:
            static.remotes.pop(link, None)
            continue
        active = bool(state)
        remote_bus = remote_type = None
        if not active:
            # What a link reaches is asked again when it comes back: it may be recabled.
            static.remotes.pop(link, None)
        elif link in static.remotes:
            remote_bus, remote_type = static.remotes[link]
        else:
            remote = nv.optional(
                "nvmlDeviceGetNvLinkRemotePciInfo",
                pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                handle,
                link,
            )
            kind = nv.optional(
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                pynvml.nvmlDeviceGetNvLinkRemoteDeviceType,
                handle,
                link,
            )
            remote_bus = _text(remote.busId).upper() if remote is not None else None
            remote_type = _REMOTE_TYPE_NAMES.get(int(kind), "unknown") if kind is not None else None
            static.remotes[link] = (remote_bus, remote_type)
        links.append(
            NvLink(index=link, active=active, remote_bus_id=remote_bus, remote_type=remote_type)  # type: ignore[arg-type]
        )
    return tuple(links)


def _nvlink_count(nv: _Session, handle: Any) -> int:
    """Links of a GPU: the link-count field, else probing until NVML says the index is past the end."""
    values = nv.optional(
        "nvmlDeviceGetFieldValues",
        pynvml.nvmlDeviceGetFieldValues,
        handle,
        [FIELD_NVLINK_LINK_COUNT],
    )
    if values is not None and values[0].nvmlReturn == pynvml.NVML_SUCCESS:
        return int(values[0].value.uiVal)
    count = 0
    for link in range(MAX_PROBED_LINKS):
        nv.calls += 1
        try:
            pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            if exc.value in ABSENT_CODES:
                break
            raise _as_gfd_error("nvmlDeviceGetNvLinkState", exc) from exc
        count = link + 1
    return count


def _read_mig_devices(
    nv: _Session, gpu: int, handle: Any, static: _GpuStatic
) -> tuple[MigDevice, ...]:
    """The MIG devices of a MIG-enabled GPU, by MIG index; empty slots are skipped.

    Each slot's handle, name and UUID are asked every read, so a MIG device created,
    destroyed or re-created (a new UUID) is seen at once; the rest of a MIG device's
    facts are kept per (slot, UUID) for the session.
    """
    if static.mig_slots is _UNREAD:
        slots = nv.required(
            "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
        )
        static.mig_slots = _within_limit(
            "nvmlDeviceGetMaxMigDeviceCount",
            gpu,
            int(slots),
            nv.limits.mig_devices,
            "MIG devices",
        )
    devices: list[MigDevice] = []
    for index in range(static.mig_slots):
        mig = nv.absent_on(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            (pynvml.NVML_ERROR_NOT_FOUND,),
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
            handle,
            index,
        )
        if mig is None:
            continue
        if static.profiles is _UNREAD:
            static.profiles = _gpu_instance_profiles(nv, handle)
        name = _text(nv.required("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, mig))
        uuid = _text(nv.required("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, mig))
        known = static.migs.get((index, uuid))
        if known is None or known.name != name:
            known = _read_mig_device(nv, handle, index, mig, name, uuid, static.profiles)
        devices.append(known)
    # Only what exists now is kept: MIG devices that come and go do not pile up.
    static.migs = {(device.index, device.uuid): device for device in devices}
    return tuple(devices)


#: The GPU instance profile call of each struct version pynvml can ask for.
_PROFILE_INFO_CALLS = {
    2: "nvmlDeviceGetGpuInstanceProfileInfoV",
    1: "nvmlDeviceGetGpuInstanceProfileInfo",
}


def _gpu_instance_profiles(nv: _Session, handle: Any) -> dict[int, tuple[int, Any]]:
    """GPU instance profile id → (``NVML_GPU_INSTANCE_PROFILE_*`` index, profile info).

    Through ``nvmlDeviceGetGpuInstanceProfileInfoV`` (v2 struct), or the v1 call where the
    driver's library does not export it (branch 470): both carry the id and memory size.
    """
    version = 2
    profiles: dict[int, tuple[int, Any]] = {}
    for profile_index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        while True:
            try:
                # pynvml builds the versioned struct and passes it by reference itself.
                info = nv.absent_on(
                    _PROFILE_INFO_CALLS[version],
                    (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT),
                    pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                    handle,
                    profile_index,
                    version,
                )
                break
            except NvmlError as exc:
                if exc.code != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND or version == 1:
                    raise
                nv.absences.setdefault(_PROFILE_INFO_CALLS[version], exc.name)
                version = 1
        if info is not None:
            profiles.setdefault(int(info.id), (profile_index, info))
    return profiles


def _read_mig_device(
    nv: _Session,
    parent: Any,
    index: int,
    mig: Any,
    name: str,
    uuid: str,
    profiles: dict[int, tuple[int, Any]],
) -> MigDevice:
    memory = nv.required("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, mig)
    gi_id = int(nv.required("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig))
    ci_id = int(
        nv.required("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig)
    )
    attributes = nv.required("nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes_v2, mig)
    instance = nv.required(
        "nvmlDeviceGetGpuInstanceById", pynvml.nvmlDeviceGetGpuInstanceById, parent, gi_id
    )
    instance_info = nv.required("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, instance)
    profile_id = int(instance_info.profileId)
    if profile_id not in profiles:
        raise NvmlError(
            "nvmlDeviceGetGpuInstanceProfileInfoV",
            pynvml.NVML_ERROR_NOT_FOUND,
            "NVML_ERROR_NOT_FOUND",
            f"MIG device {index} ({uuid}) uses GPU instance profile {profile_id}, "
            "which no profile index of its GPU reports",
        )
    profile_index, profile = profiles[profile_id]
    return MigDevice(
        index=index,
        uuid=uuid,
        name=name,
        memory_total_bytes=int(memory.total),
        gpu_instance_id=gi_id,
        compute_instance_id=ci_id,
        gi_profile_id=profile_id,
        gi_slice_count=int(attributes.gpuInstanceSliceCount),
        gi_memory_mib=int(profile.memorySizeMB),
        ci_slice_count=int(attributes.computeInstanceSliceCount),
        multiprocessors=int(attributes.multiprocessorCount),
        copy_engines=int(attributes.sharedCopyEngineCount),
        decoders=int(attributes.sharedDecoderCount),
        encoders=int(attributes.sharedEncoderCount),
        jpeg_decoders=int(attributes.sharedJpegCount),
        ofa_engines=int(attributes.sharedOfaCount),
        media_extensions=GI_PROFILE_VARIANTS.get(profile_index) == "+me",
        gi_profile_index=profile_index,
    )


def _read_fabric(nv: _Session, handle: Any) -> FabricInfo | None:
    """Fabric info: ``...FabricInfoV`` with the v3 struct (current drivers), v2 when the
    driver refuses v3, and the v1 call ``...FabricInfo`` where ``...InfoV`` is not
    exported (branches 525 and 535); absent on branch 470, which has neither."""
    info: Any = pynvml.c_nvmlGpuFabricInfo_v3_t()
    info.version = FABRIC_INFO_V3
    # pynvml hands the argument straight to C: it must be a pointer.
    call, fn = "nvmlDeviceGetGpuFabricInfoV", pynvml.nvmlDeviceGetGpuFabricInfoV
    try:
        done = nv.absent_on(call, _FABRIC_ABSENT, fn, handle, ctypes.byref(info))
    except NvmlError as exc:
        if exc.code == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
            info = pynvml.c_nvmlGpuFabricInfoV_t()
        elif exc.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            nv.absences.setdefault(call, exc.name)
            info = pynvml.c_nvmlGpuFabricInfo_t()
            call, fn = "nvmlDeviceGetGpuFabricInfo", pynvml.nvmlDeviceGetGpuFabricInfo
        else:
            raise
        done = nv.optional(call, fn, handle, ctypes.byref(info))
    if done is None:
        return None
    raw = bytes(info.clusterUuid)
    hexed = raw.hex()
    uuid = f"{hexed[0:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"
    # The v1 struct has no health mask.
    health_mask = getattr(info, "healthMask", None)
    return FabricInfo(
        cluster_uuid=uuid,
        clique_id=int(info.cliqueId),
        state=_FABRIC_STATE_NAMES.get(int(info.state), "not-supported"),  # type: ignore[arg-type]
        status=int(info.status),
        health_mask=int(health_mask) if health_mask is not None else None,
    )


def _affinity_to_cpulist(words: Any) -> str:
    # Only the set bits: testing all 64 x CPU_AFFINITY_WORDS bits of every GPU took
    # about half of a steady-state cycle's CPU time.
    cpus: list[int] = []
    for word_index, word in enumerate(words):
        value = int(word)
        while value:
            lowest = value & -value
            cpus.append(word_index * 64 + lowest.bit_length() - 1)
            value ^= lowest
    return cpulist_from_ids(cpus)


def _read_numa_node(path: Path) -> int | None:
    node = read_sysfs_int(path, base=10)
    return None if node is None or node < 0 else node


def _read_machine_type(path: Path) -> str | None:
    try:
        return read_bounded(path, SYSFS_ATTRIBUTE_LIMIT).decode("utf-8", "replace").strip()
    except (OSError, InputRejected):
        return None
