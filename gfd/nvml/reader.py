"""The NVML reader: one pass over NVML (and the few sysfs files NVML does not cover).

This module owns the entry points, :class:`NvmlReader` (one NVML session kept across
reads) and :func:`read_facts` (a session of its own), and the order of a read: driver
and CUDA versions, the GPUs (:mod:`gfd.nvml.device`), the pairs of GPUs
(:mod:`gfd.nvml.pairs`), vGPU (:mod:`gfd.nvml.vgpu`), the machine type. The modules of
:mod:`gfd.nvml` are the only code in gfd that imports ``pynvml``. Every NVML call gfd
makes is listed in :data:`NVML_CALLS` with its role (the rules of each role are
:mod:`gfd.nvml.calls`):

* *required*: the identity of a GPU (count, handle, name, UUID, PCI info) and, on a
  MIG-enabled GPU, its MIG devices; any error fails the read with a
  :class:`gfd.base.errors.NvmlError` carrying NVML's error name.
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
a path (the simulator) is loaded into pynvml's module state instead (:mod:`gfd.nvml.library`).
pynvml keeps that state per process: one reader's session is open at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pynvml

from gfd.base.frozen import frozen_dataclass
from gfd.base.inputs import SYSFS_ATTRIBUTE_LIMIT, InputRejected, read_bounded
from gfd.config.host import NODE_PATHS
from gfd.facts import NodeFacts
from gfd.facts.limits import MACHINE_LIMITS, MachineLimits
from gfd.nvml.cache import ReadCache
from gfd.nvml.calls import NvmlBeyondLimits as NvmlBeyondLimits
from gfd.nvml.calls import NvmlCaller, as_gfd_error, on_gpu, text, within_limit
from gfd.nvml.device import read_gpu
from gfd.nvml.library import library_lock, select_library
from gfd.nvml.pairs import read_nvlink_p2p, read_pairs, switch_fabrics
from gfd.nvml.vgpu import read_vgpu

DEFAULT_SYSFS_ROOT = Path(NODE_PATHS.sysfs_root)
DEFAULT_MACHINE_TYPE_FILE = Path(NODE_PATHS.machine_type_file)

CallRole = Literal["required", "unsupported-absent", "optional"]


@frozen_dataclass
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
    NvmlCall(
        "nvmlDeviceGetVirtualizationMode",
        "optional",
        "gpus[].virtualization_mode (vgpu.present where config space is unreadable)",
    ),
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
    NvmlCall(
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "optional",
        "gpus[].pcie.max_generation (asked once per session: fixed by the GPU and its slot)",
    ),
    NvmlCall(
        "nvmlDeviceGetMaxPcieLinkWidth",
        "optional",
        "gpus[].pcie.max_width (asked once per session)",
    ),
    NvmlCall(
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        "optional",
        "gpus[].pcie.gpu_max_generation (asked once per session)",
        "none: what the link could reach is then max_generation alone (branch 470)",
    ),
    NvmlCall("nvmlDeviceGetCurrPcieLinkGeneration", "optional", "gpus[].pcie.current_generation"),
    NvmlCall("nvmlDeviceGetCurrPcieLinkWidth", "optional", "gpus[].pcie.current_width"),
    NvmlCall("nvmlDeviceGetPcieReplayCounter", "optional", "gpus[].pcie.replay_counter"),
    NvmlCall(
        "nvmlDeviceGetUtilizationRates",
        "optional",
        "gpus[].pcie.gpu_utilization (asked only while the current generation is below reach)",
    ),
    NvmlCall(
        "nvmlDeviceGetEccMode",
        "optional",
        "gpus[].memory_health.ecc_enabled (asked once per session: it changes only with a reset)",
    ),
    NvmlCall(
        "nvmlDeviceGetTotalEccErrors",
        "optional",
        "gpus[].memory_health.volatile_uncorrected_ecc (asked with ECC on)",
    ),
    NvmlCall("nvmlDeviceGetRemappedRows", "optional", "gpus[].memory_health.remapped_rows"),
    NvmlCall(
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "optional",
        "gpus[].memory_health.retired_pages.pending (asked where remapped rows are not supported)",
    ),
    NvmlCall(
        "nvmlDeviceGetRetiredPages",
        "optional",
        "gpus[].memory_health.retired_pages.single_bit, double_bit (one call per cause)",
    ),
    # The Xid watcher's calls (gfd.nvml.xid_events, on its own thread and NVML reference):
    # a failure makes the xid check unable to decide, never fails a read.
    NvmlCall("nvmlEventSetCreate", "optional", "critical Xid events: the watcher's event set"),
    NvmlCall(
        "nvmlDeviceRegisterEvents",
        "optional",
        "critical Xid events of one GPU (a GPU that cannot be registered is not watched)",
    ),
    NvmlCall("nvmlEventSetWait_v2", "optional", "critical Xid events, waited for 500 ms at a time"),
    NvmlCall("nvmlEventSetFree", "optional", "the watcher's event set, freed when it closes"),
)


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
    than ``limits`` is refused (:class:`NvmlBeyondLimits`) before it is read.
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
    pair, the sysfs vGPU facts. Those are read once per session
    (:class:`~gfd.nvml.cache.ReadCache`). Every read still asks, each time: the driver and CUDA versions, the device count, each
    GPU's name and UUID (its identity), its MIG mode and MIG devices (by slot: handle,
    name, UUID), each NVLink's state, and the fabric state, so a driver, device-count,
    MIG or link change is seen by the next read. A GPU whose UUID changed is read anew,
    and so is everything after any NVML error: the session is shut down and the next read
    starts a fresh one with nothing remembered. Every ``FULL_READ_EVERY`` reads the cache
    is dropped anyway, so a fact that changed behind a stable UUID lasts at most that long.

    The first read of a session makes exactly the calls :func:`read_facts` makes, in the
    same order (after what ``on_session_start`` asks, right after the session's nvmlInit). :meth:`close` shuts NVML down (the agent calls it on stop and reload);
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
        on_session_start: Callable[[], None] | None = None,
    ) -> None:
        self.library_path = library_path
        self.sysfs_root = sysfs_root
        self.machine_type_file = machine_type_file
        self.on_absent = on_absent
        self.limits = limits
        #: Called once a session's nvmlInit succeeded, before the read asks any GPU, with
        #: :data:`~gfd.nvml.library.library_lock` held (it must not take it): the Xid
        #: watcher registers there, so that an Xid during the read reaches it.
        self.on_session_start = on_session_start
        self._cache = ReadCache()
        self._reads_in_session = 0
        #: NVML calls made by the last read (tests and benchmarks compare them).
        self.last_calls = 0

    def read(self) -> NodeFacts:
        global _session_owner
        with library_lock:
            if _session_owner is not self or self._reads_in_session >= self.FULL_READ_EVERY:
                if _session_owner is not None:
                    _session_owner._shut_down()
                select_library(self.library_path)
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as exc:
                    raise as_gfd_error("nvmlInit", exc) from exc
                _session_owner = self
                self._cache = ReadCache()
                self._reads_in_session = 0
                if self.on_session_start is not None:
                    self.on_session_start()
            caller = NvmlCaller(self.limits)
            try:
                facts = _read_all(caller, self.sysfs_root, self.machine_type_file, self._cache)
            except BaseException:
                # After any error nothing read in this session is trusted.
                self._shut_down()
                raise
            finally:
                self.last_calls = caller.calls
            self._reads_in_session += 1
        if self.on_absent is not None:
            for call, cause in caller.absences.items():
                self.on_absent(call, cause)
        return facts

    def close(self) -> None:
        """Shut this reader's NVML session down, if it has one open."""
        with library_lock:
            self._shut_down()

    def _shut_down(self) -> None:
        global _session_owner
        if _session_owner is not self:
            return
        _session_owner = None
        self._cache = ReadCache()
        # A failed shutdown cannot be acted on; the read result (or error) stands.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


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
    nv: NvmlCaller, sysfs_root: Path, machine_type_file: Path, cache: ReadCache
) -> NodeFacts:
    driver = nv.unsupported_absent("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    cuda = nv.unsupported_absent(
        "nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion
    )
    count = nv.required("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
    # Before anything that grows with it (one call per pair of GPUs, among others).
    within_limit("nvmlDeviceGetCount", None, int(count), nv.limits.gpus, "GPUs")
    handles = [
        on_gpu(i, nv.required, "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, i)
        for i in range(count)
    ]
    gpus = tuple(on_gpu(i, read_gpu, nv, i, h, sysfs_root, cache) for i, h in enumerate(handles))
    if len(cache.gpus) > len(gpus):
        present = {gpu.uuid for gpu in gpus}
        cache.gpus = {uuid: known for uuid, known in cache.gpus.items() if uuid in present}
    buses = tuple(gpu.bus_id for gpu in gpus)
    if cache.pairs_of != buses:
        cache.pairs = read_pairs(nv, handles)
        cache.pairs_of = buses
    fabrics = (buses, tuple(switch_fabrics(gpus)))
    if cache.p2p_of != fabrics:
        cache.p2p = read_nvlink_p2p(nv, handles, gpus)
        cache.p2p_of = fabrics
    if cache.vgpu_of != buses:
        cache.vgpu = read_vgpu(sysfs_root)
        cache.vgpu_of = buses
    return NodeFacts(
        driver_version=text(driver) if driver is not None else None,
        cuda_driver_version=int(cuda) if cuda is not None else None,
        machine_type=_read_machine_type(machine_type_file),
        gpus=gpus,
        pci_pairs=cache.pairs,
        nvlink_p2p=cache.p2p,
        vgpu=cache.vgpu,
    )


def _read_machine_type(path: Path) -> str | None:
    try:
        return read_bounded(path, SYSFS_ATTRIBUTE_LIMIT).decode("utf-8", "replace").strip()
    except (OSError, InputRejected):
        return None
