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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from gfd.config import Sharing
from gfd.config.values import DEVICE_PLUGIN_CHECK
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
)

REASON_PLUGIN_MISSING = "DevicePluginMissing"
REASON_ALLOCATABLE = "AllocatableMismatch"

FULL_GPU_RESOURCE = "nvidia.com/gpu"
#: The device plugin's suffix for a shared resource under ``renameByDefault``.
SHARED_SUFFIX = ".shared"


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
        #: When the current problem was first seen, and for what expectation.
        self._onset: tuple[float, tuple[tuple[str, int], ...]] | None = None
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
        if not problems:
            self._onset = None
            return CheckResult(DEVICE_PLUGIN_CHECK, OK)
        now = self._clock()
        expectation = tuple(sorted(expected.items()))
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
