"""Who hands out this node's GPUs: NVIDIA's device plugin, or NVIDIA's DRA driver.

This module owns the one decision gfd makes about it, and what the decision reads:

* what the device plugin advertises for the GPUs NVML sees (:func:`expected_resources`),
  and how the Node's ``status.allocatable`` shows it (:func:`plugin_view`: each expected
  resource under its own name, under its shared twin's, or not at all);
* the devices NVIDIA's DRA driver (``gpu.nvidia.com``) publishes in the node's
  ResourceSlices (:func:`published_devices`), and how often they are read
  (:class:`DraNodeWatch`: only while an expected plugin resource is missing, at most once
  every ``interval`` cycles or when the allocatable changes);
* the verdict (:attr:`GpuPublishers.dra_node`): a **DRA node** is one where an expected
  plugin resource is missing under both its names and the driver publishes slices for the
  node.

Two users ask it each cycle: the ``device-plugin`` health check
(:mod:`gfd.health.checks.device_plugin`, which then judges the driver's devices against
the GPUs NVML sees) and ``--label-mode auto`` (:mod:`gfd.app.label_mode`, which labels a
DRA node with the hardware label set). The assembly gives both one :class:`DraNodeWatch`
per configuration, and the watch answers a second question about the same read of the
Node as it answered the first, so a cycle costs at most one ResourceSlice list whoever
asks. The list itself is :class:`gfd.health.resource_slices.ResourceSliceReader`'s, handed
in as a callable: this module imports no API client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from gfd.base.errors import GfdError
from gfd.base.frozen import frozen_dataclass

if TYPE_CHECKING:
    from gfd.config import Sharing
    from gfd.facts import NodeFacts

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

#: Cycles between two reads of the ResourceSlices (``--health-resource-slice-interval``).
DEFAULT_SLICE_INTERVAL = 5


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


def shared_twin(resource: str) -> str:
    """The name the device plugin would use for ``resource`` under the other rename setting."""
    if resource.endswith(SHARED_SUFFIX):
        return resource[: -len(SHARED_SUFFIX)]
    return resource + SHARED_SUFFIX


def allocatable_of(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Node's ``status.allocatable`` (empty when the object has none)."""
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    return allocatable if isinstance(allocatable, Mapping) else {}


@frozen_dataclass
class PluginView:
    """How the Node's allocatable shows the resources the device plugin should advertise."""

    #: What the plugin would advertise (:func:`expected_resources`).
    expected: Mapping[str, int]
    #: The expected resources advertised under neither their own nor their twin's name.
    missing: tuple[str, ...] = ()
    #: The expected resources advertised only under their shared twin's name: the
    #: plugin's sharing config differs from gfd's (resource -> the name advertised).
    twins: Mapping[str, str] = field(default_factory=dict)


def plugin_view(expected: Mapping[str, int], allocatable: Mapping[str, Any]) -> PluginView:
    """Which of ``expected`` the ``allocatable`` lacks, and which it has under the twin name."""
    missing: list[str] = []
    twins: dict[str, str] = {}
    for resource in sorted(expected):
        if resource in allocatable:
            continue
        twin = shared_twin(resource)
        if twin in allocatable:
            twins[resource] = twin
        else:
            missing.append(resource)
    return PluginView(expected=dict(expected), missing=tuple(missing), twins=twins)


@frozen_dataclass
class PublishedDevice:
    """A device of the DRA driver's ResourceSlices, as far as gfd needs it."""

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


@frozen_dataclass
class GpuPublishers:
    """What one cycle's Node and the DRA driver's slices say about who hands out the GPUs."""

    plugin: PluginView
    #: The DRA driver's devices on the node as last read; None when it publishes no slice
    #: for the node, when the slices were not needed (no plugin resource is missing), or
    #: when they could not be read (:attr:`slices_error`).
    dra_devices: tuple[PublishedDevice, ...] | None = None
    #: Why the last read of the slices failed; None when it worked (or none was needed).
    #: Until a read works the node is judged without them: not a DRA node.
    slices_error: str | None = None

    @property
    def dra_node(self) -> bool:
        """The DRA driver, not the device plugin, hands out this node's GPUs: a plugin
        resource is missing and the driver publishes slices for the node."""
        return bool(self.plugin.missing) and self.dra_devices is not None


class DraNodeWatch:
    """Tells each cycle whether the node is a DRA node, reading the slices sparingly.

    ``list_slices`` lists the node's ResourceSlices (raising :class:`~gfd.base.errors.GfdError`
    when the API server cannot answer; None: there is no API to ask, and no node is a DRA
    node). They are read only while an expected plugin resource is missing (a node whose
    plugin is registered never costs a read), at most once every ``interval`` cycles or at
    once when the Node's allocatable changes; between reads the last answer stands. ``log``
    takes the one warning per distinct read failure. Pass the previous configuration's
    watch as ``previous``: the next read is not brought forward by a reload, and a warning
    given is not repeated.
    """

    def __init__(
        self,
        list_slices: Callable[[], Sequence[Mapping[str, Any]]] | None,
        *,
        interval: int = DEFAULT_SLICE_INTERVAL,
        log: Any = None,
        previous: DraNodeWatch | None = None,
    ) -> None:
        self._list_slices = list_slices
        self.interval = max(1, interval)
        self._log = log
        #: The driver's devices as last read (None: no slice of it), why that read failed,
        #: the allocatable they were read beside, and the cycles counted since.
        self._published: tuple[PublishedDevice, ...] | None = None
        self._error: str | None = None
        self._listed_beside: Mapping[str, Any] | None = None
        self._cycles_since_listed = 0
        self._warned: set[str] = set()
        #: The last question (the Node read and the expectation) and its answer.
        self._last: tuple[Mapping[str, Any], Mapping[str, int], GpuPublishers] | None = None
        if previous is not None:
            self._published = previous._published
            self._error = previous._error
            self._listed_beside = previous._listed_beside
            self._cycles_since_listed = previous._cycles_since_listed
            self._warned = set(previous._warned)

    def observe(self, node: Mapping[str, Any], expected: Mapping[str, int]) -> GpuPublishers:
        """Who hands out the GPUs, judged from ``node`` (this cycle's read of the Node)
        against what the device plugin would advertise (``expected``); one call counts one
        cycle towards the next read of the slices."""
        allocatable = allocatable_of(node)
        view = plugin_view(expected, allocatable)
        answer = GpuPublishers(plugin=view)
        if view.missing:
            devices = self._devices(allocatable)
            answer = GpuPublishers(plugin=view, dra_devices=devices, slices_error=self._error)
        self._last = (node, dict(expected), answer)
        return answer

    def answered(
        self, node: Mapping[str, Any], expected: Mapping[str, int]
    ) -> GpuPublishers | None:
        """The answer :meth:`observe` already gave about this very read of the Node (the
        same object) and expectation, or None: the second asker of a cycle takes it, so
        that one cycle counts once towards the next read."""
        last = self._last
        if last is not None and last[0] is node and last[1] == expected:
            return last[2]
        return None

    def _devices(self, allocatable: Mapping[str, Any]) -> tuple[PublishedDevice, ...] | None:
        """The DRA driver's devices on this node (None: it publishes none, or the read
        failed), read again only when due."""
        if self._list_slices is None:
            return None
        self._cycles_since_listed += 1
        due = (
            self._listed_beside is None
            or self._cycles_since_listed >= self.interval
            or allocatable != self._listed_beside
        )
        if not due:
            return self._published
        self._cycles_since_listed = 0
        self._listed_beside = dict(allocatable)
        try:
            self._published = published_devices(self._list_slices())
            self._error = None
        except GfdError as exc:
            self._published = None
            self._error = str(exc)
            self._warn_once(exc)
        return self._published

    def _warn_once(self, exc: GfdError) -> None:
        key = str(exc)
        if key in self._warned or self._log is None:
            return
        self._warned.add(key)
        self._log.warning(
            "ResourceSlices not read",
            reason=key,
            consequence=f"a node whose GPUs {DRA_DRIVER} publishes is judged by the device "
            "plugin's resources meanwhile (--label-mode auto keeps the mode it decided last)",
        )
