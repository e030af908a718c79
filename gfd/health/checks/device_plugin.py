"""The ``device-plugin`` check: the Node's ``status.allocatable`` against what NVIDIA's
device plugin should advertise for the GPUs NVML sees
(:func:`gfd.health.dra_node.expected_resources`).

A resource missing means the plugin is not registered (``DevicePluginMissing``); fewer
devices than expected means devices it marked unhealthy (``AllocatableMismatch``).
Guards: a problem counts only once it has lasted the grace period (a plugin starting
after gfd, or restarting after a MIG or sharing change, is not reported); a resource
advertised under its shared twin's name (``nvidia.com/gpu`` against
``nvidia.com/gpu.shared``) means the plugin's sharing config differs from gfd's, which is
said in the log, not reported as lost GPUs; more than expected is never a problem of this
check. It needs the Node object, so it runs only with the node sink.

DRA nodes. Where NVIDIA's DRA driver (``gpu.nvidia.com``) publishes the GPUs as
ResourceSlices, the kubelet advertises no ``nvidia.com/gpu`` at all. Whether the node is
such a DRA node is decided by :class:`gfd.health.dra_node.DraNodeWatch` (which reads the
slices only while an expected resource is missing, and sparingly), the one owner of that
decision, which ``--label-mode auto`` asks too. On a DRA node the missing resources are
no problem, and instead each GPU NVML sees must be published by its UUID, or each of its
MIG devices when MIG is on (:func:`dra_problems`), and not tainted by the driver; what
is not is ``AllocatableMismatch``, after the same grace period. A node with neither the
plugin's resources nor the driver's slices is reported as before (``DevicePluginMissing``).
What gfd relies on of the driver's slices is in docs/health.md ("DRA nodes").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from gfd.config.values import DEVICE_PLUGIN_CHECK
from gfd.facts import NodeFacts
from gfd.facts.pci import sysfs_bus_id
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
from gfd.health.dra_node import (
    DRA_DRIVER,
    DRA_MIG,
    DraNodeWatch,
    PublishedDevice,
    allocatable_of,
    expected_resources,
)

REASON_PLUGIN_MISSING = "DevicePluginMissing"
REASON_ALLOCATABLE = "AllocatableMismatch"


def _quantity(value: Any) -> int | None:
    """An extended resource's quantity (always whole: ``"8"``); None for anything else."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 12:
        return int(value)
    return None


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
        # Without a watch from the assembly (no API to list slices), no node is a DRA node.
        self._dra_node = setup.dra_node if setup.dra_node is not None else DraNodeWatch(None)
        #: When the current problem was first seen, and for what expectation.
        self._onset: tuple[float, tuple[Any, ...]] | None = None
        #: The warnings already given (once each per process).
        self._warned: set[str] = set()
        #: The last facts and what they expect (recomputed only when the facts change).
        self._expected: tuple[NodeFacts, dict[str, int]] | None = None
        if isinstance(previous, DevicePluginCheck):
            # A reload neither restarts a grace period that is running nor repeats a warning.
            self._onset = previous._onset
            self._warned = set(previous._warned)

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
        publishers = self._dra_node.observe(node, expected)
        allocatable = allocatable_of(node)
        problems = []
        for resource, count in sorted(expected.items()):
            twin = publishers.plugin.twins.get(resource)
            if twin is not None:
                self._warn_once(
                    f"twin:{resource}",
                    "device plugin sharing config differs from gfd's",
                    expected=resource,
                    advertised=twin,
                    reason="give gfd the device plugin's sharing config; "
                    "this resource is not checked meanwhile",
                )
                continue
            if resource in publishers.plugin.missing:
                problems.append(
                    Problem(
                        DEVICE_PLUGIN_CHECK,
                        REASON_PLUGIN_MISSING,
                        f"the kubelet does not advertise {resource} (expected {count}): "
                        "the device plugin is not registered",
                    )
                )
                continue
            have = _quantity(allocatable.get(resource))
            if have is None:
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
        if publishers.dra_node and publishers.dra_devices is not None:
            # A DRA node: the driver, not the plugin, offers the GPUs.
            problems = [p for p in problems if p.reason != REASON_PLUGIN_MISSING]
            problems += dra_problems(facts, publishers.dra_devices)
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

    def _warn_once(self, key: str, event: str, **fields: Any) -> None:
        if key in self._warned or self._log is None:
            return
        self._warned.add(key)
        self._log.warning(event, **fields)
