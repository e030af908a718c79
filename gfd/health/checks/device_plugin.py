"""The ``device-plugin`` check: the Node's ``status.allocatable`` against what NVIDIA's
device plugin should advertise for the GPUs NVML sees (:func:`expected_resources`).

A resource missing means the plugin is not registered (``DevicePluginMissing``); fewer
devices than expected means devices it marked unhealthy (``AllocatableMismatch``).
Guards: a problem counts only once it has lasted the grace period (a plugin starting
after gfd, or restarting after a MIG or sharing change, is not reported); a resource
advertised under its shared twin's name (``nvidia.com/gpu`` against
``nvidia.com/gpu.shared``) means the plugin's sharing config differs from gfd's, which is
said in the log, not reported as lost GPUs; more than expected is never a problem of this
check. It needs the Node object, so it runs only with the node sink.

DRA nodes. Where NVIDIA's DRA driver (``gpu.nvidia.com``) publishes the GPUs as
ResourceSlices, the kubelet advertises no ``nvidia.com/gpu`` at all. When an expected
resource is missing, the check reads the node's ResourceSlices (:func:`published_devices`;
only then, and at most once every ``resource_slice_interval`` cycles or when the Node's
allocatable changes: a node whose plugin is registered never costs a read). When the
driver publishes slices for the node, the node is a DRA node: the missing resources are
no problem, and instead each GPU NVML sees must be published by its UUID, or each of its
MIG devices when MIG is on (:func:`dra_problems`), and not tainted by the driver; what
is not is ``AllocatableMismatch``, after the same grace period. A node with neither the
plugin's resources nor the driver's slices is reported as before (``DevicePluginMissing``).
What gfd relies on of the driver's slices is in docs/health.md ("DRA nodes").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from gfd.config.values import DEVICE_PLUGIN_CHECK
from gfd.errors import GfdError
from gfd.facts import NodeFacts
from gfd.health.check import (
    FAILING,
    OK,
    PENDING,
    UNKNOWN,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    gpu_name,
)
from gfd.pci import sysfs_bus_id

if TYPE_CHECKING:
    from gfd.config import Sharing

REASON_PLUGIN_MISSING = "DevicePluginMissing"
REASON_ALLOCATABLE = "AllocatableMismatch"

FULL_GPU_RESOURCE = "nvidia.com/gpu"
#: The device plugin's suffix for a shared resource under ``renameByDefault``.
SHARED_SUFFIX = ".shared"

#: NVIDIA's DRA driver for GPUs, as its ResourceSlices name it in ``spec.driver``.
DRA_DRIVER = "gpu.nvidia.com"
#: The driver's ``type`` attribute of a full GPU and of a MIG device.
DRA_GPU = "gpu"
DRA_MIG = "mig"
#: Device taint effects that keep a device from being allocated (or its pods running).
DRA_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def expected_resources(
    facts: NodeFacts, mig_strategy: str, sharing: Sharing | None
) -> dict[str, int]:
    """The extended resources NVIDIA's device plugin registers for ``facts``, and how many.

    As the plugin builds its device map: under ``none`` every GPU is ``nvidia.com/gpu``,
    MIG-enabled or not; under ``single`` and ``mixed`` a MIG-enabled GPU is replaced by
    its MIG devices, as ``nvidia.com/gpu`` (single) or ``nvidia.com/mig-<profile>``
    (mixed; only profiles whose compute instance spans its GPU instance are
    registered). A resource shared with ``replicas: N`` has N devices per device, under
    ``<name>.shared`` with ``renameByDefault`` (the plugin ignores a per-resource
    ``rename`` and ``devices``, and so does this).
    """
    from gfd.labels.mig import profile_name

    counts: dict[str, int] = {}

    def add(name: str, count: int = 1) -> None:
        counts[name] = counts.get(name, 0) + count

    for gpu in facts.gpus:
        if not gpu.mig_mode_current or mig_strategy == "none":
            add(FULL_GPU_RESOURCE)
            continue
        for mig in gpu.mig_devices:
            if mig_strategy == "single":
                add(FULL_GPU_RESOURCE)
            elif mig.ci_slice_count == mig.gi_slice_count:
                add(f"nvidia.com/mig-{profile_name(mig, gpu.memory_total_bytes)}")
    if sharing is None:
        return counts
    for shared in sharing.resources:
        if shared.replicas > 1 and shared.name in counts:
            devices = counts.pop(shared.name)
            name = shared.name + SHARED_SUFFIX if sharing.rename_by_default else shared.name
            add(name, devices * shared.replicas)
    return counts


def _twin(resource: str) -> str:
    """The name the device plugin would use for ``resource`` under the other rename setting."""
    if resource.endswith(SHARED_SUFFIX):
        return resource[: -len(SHARED_SUFFIX)]
    return resource + SHARED_SUFFIX


def _quantity(value: Any) -> int | None:
    """An extended resource's quantity (always whole: ``"8"``); None for anything else."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 12:
        return int(value)
    return None


# --------------------------------------------------------------------------- #
# NVIDIA's DRA driver


@dataclass(frozen=True)
class PublishedDevice:
    """A device of the DRA driver's ResourceSlices, as far as the check needs it."""

    name: str
    #: The ``type`` attribute: :data:`DRA_GPU`, :data:`DRA_MIG`, or another kind of device.
    kind: str
    #: The ``uuid`` attribute (``GPU-...``, ``MIG-...``); None for a MIG device the driver
    #: creates on demand (dynamic MIG), which has none until it is allocated.
    uuid: str | None
    #: A MIG device's ``parentUUID`` attribute.
    parent_uuid: str | None
    #: Its taints that keep it from being used (``key=value:effect``).
    taints: tuple[str, ...] = ()


def _string_attribute(device: Mapping[str, Any], name: str) -> str | None:
    attributes = device.get("attributes")
    value = attributes.get(name) if isinstance(attributes, Mapping) else None
    text = value.get("string") if isinstance(value, Mapping) else None
    return text if isinstance(text, str) and text else None


def _blocking_taints(device: Mapping[str, Any]) -> tuple[str, ...]:
    taints = device.get("taints")
    found = []
    for taint in taints if isinstance(taints, list) else ():
        if isinstance(taint, Mapping) and taint.get("effect") in DRA_BLOCKING_EFFECTS:
            value = taint.get("value")
            shown = f"{taint.get('key')}={value}" if value else f"{taint.get('key')}"
            found.append(f"{shown}:{taint.get('effect')}")
    return tuple(found)


def published_devices(slices: Iterable[Mapping[str, Any]]) -> tuple[PublishedDevice, ...] | None:
    """The devices :data:`DRA_DRIVER` publishes in ``slices`` (the node's), or None when no
    slice is the driver's: the node has no DRA driver for NVIDIA GPUs.

    A pool the driver is rewriting has slices of two generations for a moment: only the
    newest generation of each pool counts, as for the scheduler.
    """
    mine = [
        spec
        for item in slices
        if isinstance(spec := item.get("spec"), Mapping) and spec.get("driver") == DRA_DRIVER
    ]
    if not mine:
        return None

    def pool_of(spec: Mapping[str, Any]) -> tuple[str, int]:
        pool = spec.get("pool")
        pool = pool if isinstance(pool, Mapping) else {}
        generation = pool.get("generation")
        return str(pool.get("name", "")), generation if isinstance(generation, int) else 0

    newest: dict[str, int] = {}
    for spec in mine:
        name, generation = pool_of(spec)
        newest[name] = max(generation, newest.get(name, generation))
    devices = []
    for spec in mine:
        name, generation = pool_of(spec)
        if generation != newest[name]:
            continue
        listed = spec.get("devices")
        for device in listed if isinstance(listed, list) else ():
            if not isinstance(device, Mapping):
                continue
            devices.append(
                PublishedDevice(
                    name=str(device.get("name", "")),
                    kind=_string_attribute(device, "type") or "",
                    uuid=_string_attribute(device, "uuid"),
                    parent_uuid=_string_attribute(device, "parentUUID"),
                    taints=_blocking_taints(device),
                )
            )
    return tuple(devices)


def dra_expectation(facts: NodeFacts) -> tuple[str, ...]:
    """The UUIDs the DRA driver should publish for ``facts``: every GPU without MIG, the
    MIG devices of every GPU with MIG on (a MIG-enabled GPU without MIG devices offers
    nothing to publish)."""
    expected: list[str] = []
    for gpu in facts.gpus:
        if gpu.mig_mode_current:
            expected += [mig.uuid for mig in gpu.mig_devices]
        else:
            expected.append(gpu.uuid)
    return tuple(sorted(expected))


def dra_problems(facts: NodeFacts, devices: Sequence[PublishedDevice]) -> list[Problem]:
    """What the DRA driver's ``devices`` lack against the GPUs NVML sees, or taint.

    A GPU without MIG must be published by its UUID; a GPU with MIG on by the UUID of each
    of its MIG devices, unless the driver makes its MIG devices on demand (dynamic MIG:
    devices of type ``mig`` naming it as parent, without a UUID of their own) or
    publishes the GPU itself. A published device with a NoSchedule or NoExecute taint
    (the driver's health monitoring) cannot be used: a problem too.
    """
    by_uuid = {device.uuid: device for device in devices if device.uuid is not None}
    on_demand = {
        device.parent_uuid
        for device in devices
        if device.kind == DRA_MIG and device.uuid is None and device.parent_uuid is not None
    }
    missing: list[str] = []
    tainted: list[str] = []
    wanted = 0

    def want(uuid: str, described: str) -> None:
        nonlocal wanted
        wanted += 1
        device = by_uuid.get(uuid)
        if device is None:
            missing.append(described)
        elif device.taints:
            tainted.append(f"{described} ({', '.join(device.taints)})")

    for gpu in facts.gpus:
        name = gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))
        if not gpu.mig_mode_current:
            want(gpu.uuid, name)
        elif gpu.uuid in on_demand:
            wanted += 1
        elif gpu.uuid in by_uuid:
            want(gpu.uuid, name)
        else:
            for mig in gpu.mig_devices:
                want(mig.uuid, f"MIG device {mig.uuid} of {name}")
    problems = []
    if missing:
        problems.append(
            Problem(
                DEVICE_PLUGIN_CHECK,
                REASON_ALLOCATABLE,
                f"the DRA driver {DRA_DRIVER} publishes {wanted - len(missing)} of {wanted} "
                f"devices in the node's ResourceSlices; missing: {', '.join(missing)}",
            )
        )
    if tainted:
        problems.append(
            Problem(
                DEVICE_PLUGIN_CHECK,
                REASON_ALLOCATABLE,
                f"the DRA driver {DRA_DRIVER} taints {', '.join(tainted)}",
            )
        )
    return problems


class DevicePluginCheck:
    """Holds what the kubelet advertises against :func:`expected_resources`, with a grace period."""

    name: ClassVar[str] = DEVICE_PLUGIN_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_PLUGIN_MISSING, REASON_ALLOCATABLE)
    needs_node: ClassVar[bool] = True

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        self.mig_strategy = setup.mig_strategy
        self.sharing = setup.sharing
        self.grace_period = setup.grace_period
        self._clock = setup.clock
        self._log = setup.log
        self._list_slices: Callable[[], Sequence[Mapping[str, Any]]] | None = setup.resource_slices
        self.resource_slice_interval = max(1, setup.resource_slice_interval)
        #: When the current problem was first seen, and for what expectation.
        self._onset: tuple[float, tuple[Any, ...]] | None = None
        #: The DRA driver's devices as last read (None: no slice of it), the allocatable
        #: they were read beside, and the cycles since.
        self._published: tuple[PublishedDevice, ...] | None = None
        self._listed_beside: Mapping[str, Any] | None = None
        self._cycles_since_listed = 0
        #: The warnings already given (once each per process).
        self._warned: set[str] = set()
        #: The last facts and what they expect (recomputed only when the facts change).
        self._expected: tuple[NodeFacts, dict[str, int]] | None = None
        if isinstance(previous, DevicePluginCheck):
            # A reload neither restarts a grace period that is running nor repeats a warning,
            # nor reads the ResourceSlices again before their time.
            self._onset = previous._onset
            self._warned = set(previous._warned)
            self._published = previous._published
            self._listed_beside = previous._listed_beside
            self._cycles_since_listed = previous._cycles_since_listed

    def observe(self, seen: Observation) -> CheckResult:
        facts, node = seen.facts, seen.node
        if facts is None or node is None:
            return CheckResult(DEVICE_PLUGIN_CHECK, UNKNOWN)
        cached = self._expected
        if cached is None or cached[0] != facts:
            # Equal facts (mostly the same objects, from the reader's session) expect alike.
            cached = self._expected = (
                facts,
                expected_resources(facts, self.mig_strategy, self.sharing),
            )
        expected = cached[1]
        status = node.get("status")
        allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
        if not isinstance(allocatable, Mapping):
            allocatable = {}
        problems = []
        for resource, count in sorted(expected.items()):
            have = _quantity(allocatable.get(resource))
            if resource not in allocatable:
                twin = _twin(resource)
                if twin in allocatable:
                    self._warn_once(
                        f"twin:{resource}",
                        "device plugin sharing config differs from gfd's",
                        expected=resource,
                        advertised=twin,
                        reason="give gfd the device plugin's sharing config; "
                        "this resource is not checked meanwhile",
                    )
                    continue
                problems.append(
                    Problem(
                        DEVICE_PLUGIN_CHECK,
                        REASON_PLUGIN_MISSING,
                        f"the kubelet does not advertise {resource} (expected {count}): "
                        "the device plugin is not registered",
                    )
                )
            elif have is None:
                self._warn_once(
                    f"quantity:{resource}",
                    "node allocatable not a whole number",
                    resource=resource,
                    value=str(allocatable.get(resource))[:64],
                )
            elif have < count:
                problems.append(
                    Problem(
                        DEVICE_PLUGIN_CHECK,
                        REASON_ALLOCATABLE,
                        f"the kubelet advertises {have} {resource}, expected {count}: "
                        "the device plugin marked devices unhealthy",
                    )
                )
        expectation: tuple[Any, ...] = tuple(sorted(expected.items()))
        if any(p.reason == REASON_PLUGIN_MISSING for p in problems):
            published = self._dra_devices(allocatable)
            if published is not None:
                # A DRA node: the driver, not the plugin, offers the GPUs.
                problems = [p for p in problems if p.reason != REASON_PLUGIN_MISSING]
                problems += dra_problems(facts, published)
                expectation = (DRA_DRIVER, *dra_expectation(facts))
        if not problems:
            self._onset = None
            return CheckResult(DEVICE_PLUGIN_CHECK, OK)
        now = self._clock()
        if self._onset is None or self._onset[1] != expectation:
            # A new problem, or a new expectation (MIG or sharing changed, a GPU came or
            # went): the plugin gets the whole grace period to catch up.
            self._onset = (now, expectation)
        state = FAILING if now - self._onset[0] >= self.grace_period else PENDING
        return CheckResult(DEVICE_PLUGIN_CHECK, state, tuple(problems))

    def _dra_devices(self, allocatable: Mapping[str, Any]) -> tuple[PublishedDevice, ...] | None:
        """The DRA driver's devices on this node (None: it publishes none), read again
        only every :attr:`resource_slice_interval` cycles or when the allocatable changed."""
        if self._list_slices is None:
            return None
        self._cycles_since_listed += 1
        due = (
            self._listed_beside is None
            or self._cycles_since_listed >= self.resource_slice_interval
            or allocatable != self._listed_beside
        )
        if not due:
            return self._published
        self._cycles_since_listed = 0
        self._listed_beside = dict(allocatable)
        try:
            self._published = published_devices(self._list_slices())
        except GfdError as exc:
            # Without the slices the node is judged as before: by the plugin's resources.
            self._published = None
            self._warn_once(
                f"slices:{exc}",
                "ResourceSlices not read",
                reason=str(exc),
                consequence=f"a node whose GPUs {DRA_DRIVER} publishes is judged by the "
                "device plugin's resources meanwhile",
            )
        return self._published

    def _warn_once(self, key: str, event: str, **fields: Any) -> None:
        if key in self._warned or self._log is None:
            return
        self._warned.add(key)
        self._log.warning(event, **fields)
