"""GPU health: the checks, their false-positive guards, and the verdict they add up to.

This module owns what gfd says about the health of the node's GPUs, each cycle, from
what the cycle already holds (the facts NVML gave, the sysfs PCI tree, and, with the
node sink, the Node the sink reads anyway):

* ``gpu-lost`` — an NVIDIA display or 3D controller (vendor ``0x10de``, class
  ``0x03xxxx``; NVSwitches are bridges, ``0x0680``) on the PCI bus that NVML does not
  see, or a GPU that answered ``NVML_ERROR_GPU_IS_LOST`` during the read. Guards: a
  device bound to another driver (``vfio-pci`` for a VM, ``nouveau``) is not NVML's
  to see, and an SR-IOV virtual function (it has ``physfn``) is no GPU of this host.
* ``device-plugin`` — the Node's ``status.allocatable`` against what NVML, the MIG
  strategy and the sharing config make the NVIDIA device plugin advertise
  (:func:`expected_resources`). A resource missing means the plugin is not
  registered (``DevicePluginMissing``); fewer means devices it marked unhealthy
  (``AllocatableMismatch``). Guards: a problem counts only once it has lasted the
  grace period (a plugin starting after gfd, or restarting after a MIG or sharing
  change, is not reported); a resource advertised under its shared twin's name
  (``nvidia.com/gpu`` against ``nvidia.com/gpu.shared``) means the plugin's sharing
  config differs from gfd's, which is said in the log, not reported as lost GPUs;
  more than expected is never a problem of this check.
* ``nvlink`` — an NVLink seen active earlier in this process's life that is now
  inactive or gone (``NVLinkDegraded``), by GPU UUID.

:class:`HealthMonitor` runs the checks and keeps what they remember across cycles
(and across a SIGHUP reload). :class:`HealthState` is the state gfd reports: the
node condition ``GPUHealthy`` and, when asked for, the label ``nvidia.com/gpu.health``.
:class:`HealthReporter` turns verdicts into that state, holding the last one while a
check cannot decide (no facts this cycle, a problem still in its grace period), and
hands changes to a condition writer (:mod:`gfd.sinks.condition`) and telemetry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gfd.config import Sharing
from gfd.config.values import (
    DEVICE_PLUGIN_CHECK,
    GPU_LOST_CHECK,
    HEALTH_CHECKS,
    NVLINK_CHECK,
)
from gfd.errors import GfdError, NvmlGpuLost
from gfd.facts import Gpu, NodeFacts
from gfd.pci import PCI_DEVICES, is_nvidia_display, sysfs_bus_id

CONDITION_TYPE = "GPUHealthy"
HEALTH_LABEL = "nvidia.com/gpu.health"
#: The label's value while every check passes.
HEALTHY_LABEL_VALUE = "healthy"

GPU_LOST = GPU_LOST_CHECK
DEVICE_PLUGIN = DEVICE_PLUGIN_CHECK
NVLINK = NVLINK_CHECK
#: Every check, in the order their problems are reported.
CHECKS = HEALTH_CHECKS
#: The checks that need the Node object (the node sink's read).
API_CHECKS = frozenset({DEVICE_PLUGIN})

REASON_HEALTHY = "GPUsHealthy"
REASON_GPU_LOST = "GPULost"
REASON_PLUGIN_MISSING = "DevicePluginMissing"
REASON_ALLOCATABLE = "AllocatableMismatch"
REASON_NVLINK = "NVLinkDegraded"
#: Condition reasons by priority: the condition's reason is the first one that applies.
REASONS = (REASON_GPU_LOST, REASON_PLUGIN_MISSING, REASON_ALLOCATABLE, REASON_NVLINK)

DEFAULT_GRACE_PERIOD = 300.0
#: The longest condition message gfd writes (kubectl shows it whole).
MAX_MESSAGE = 1024

#: The driver whose GPUs NVML sees; a device bound to any other is left alone.
NVIDIA_DRIVER = "nvidia"

FULL_GPU_RESOURCE = "nvidia.com/gpu"
#: The device plugin's suffix for a shared resource under ``renameByDefault``.
SHARED_SUFFIX = ".shared"

OK = "ok"
FAILING = "failing"
#: A problem seen but not yet reported: the device plugin's grace period.
PENDING = "pending"
#: Nothing to decide from this cycle (the facts could not be read).
UNKNOWN = "unknown"


# --------------------------------------------------------------------------- #
# The PCI bus


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA display or 3D controller on the PCI bus that NVML should see."""

    #: sysfs form: ``0000:8a:00.0``.
    address: str


class PciScanner:
    """The NVIDIA GPUs under ``<sysfs_root>/bus/pci/devices``, cheaply, every cycle.

    A device's vendor, class and SR-IOV role do not change while its address exists,
    so they are read once per address; only the directory listing and the ``driver``
    link of each candidate are read each cycle (binding can change).
    """

    def __init__(self, sysfs_root: Path) -> None:
        # Plain strings: per cycle, pathlib's joins would cost more than the scan itself.
        self._dir = os.path.join(sysfs_root, PCI_DEVICES)
        self._candidate: dict[str, bool] = {}

    def scan(self) -> tuple[PciGpu, ...] | None:
        """The GPUs NVML should see, by address; None when the PCI tree cannot be listed."""
        try:
            names = os.listdir(self._dir)
        except OSError:
            return None
        candidate = self._candidate
        if len(candidate) > 4 * len(names) + 64:
            # Hot-plug churn: forget addresses that are gone.
            candidate = self._candidate = {n: candidate[n] for n in names if n in candidate}
        gpus = []
        for name in names:
            known = candidate.get(name)
            if known is None:
                known = candidate[name] = self._is_nvidia_gpu(f"{self._dir}/{name}")
            if known:
                gpus.append(name)
        gpus.sort()
        return tuple(
            PciGpu(name.lower())
            for name in gpus
            if self._driver(f"{self._dir}/{name}") in (None, NVIDIA_DRIVER)
        )

    @staticmethod
    def _is_nvidia_gpu(device: str) -> bool:
        # An SR-IOV virtual function (vGPU on a host) is not a GPU NVML lists.
        return is_nvidia_display(Path(device)) and not os.path.lexists(f"{device}/physfn")

    @staticmethod
    def _driver(device: str) -> str | None:
        try:
            return os.path.basename(os.readlink(f"{device}/driver"))
        except OSError:
            return None


# --------------------------------------------------------------------------- #
# What the device plugin advertises


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
# Checks and verdicts


@dataclass(frozen=True)
class Problem:
    """One thing wrong, in words an operator acts on."""

    check: str
    reason: str
    message: str


@dataclass(frozen=True)
class CheckResult:
    """What one check found this cycle: :data:`OK`, :data:`FAILING`, :data:`PENDING` or :data:`UNKNOWN`."""

    check: str
    state: str
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """Every enabled check's result for one cycle."""

    results: tuple[CheckResult, ...]

    @property
    def failing(self) -> tuple[Problem, ...]:
        return tuple(p for r in self.results if r.state == FAILING for p in r.problems)

    @property
    def decided(self) -> bool:
        """No check is failing, and every one could say so."""
        return all(r.state == OK for r in self.results)


def gpu_name(index: int | None, address: str | None) -> str:
    """``GPU 3 (0000:8a:00.0)`` — how messages name a GPU."""
    where = address or "bus id unknown"
    return f"GPU {index} ({where})" if index is not None else f"the GPU at {where}"


class HealthMonitor:
    """Runs the enabled checks each cycle and remembers what they need across cycles.

    ``checks``: the enabled checks (the API ones run only when a Node is handed in).
    ``clock`` (monotonic seconds) times the device plugin's grace period. Pass the
    previous monitor as ``previous`` on a reload: NVLinks seen up, GPU names and
    problem onsets carry over, so a reload neither forgets a degraded link nor
    restarts a grace period that is running.
    """

    def __init__(
        self,
        *,
        sysfs_root: Path,
        checks: Sequence[str] = CHECKS,
        mig_strategy: str = "none",
        sharing: Sharing | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        log: Any = None,
        previous: HealthMonitor | None = None,
    ) -> None:
        self.checks = tuple(check for check in CHECKS if check in checks)
        self.mig_strategy = mig_strategy
        self.sharing = sharing
        self.grace_period = grace_period
        self._clock = clock
        self._log = log
        self._pci = PciScanner(sysfs_root)
        #: NVML index and sysfs address of each GPU seen, by address and by index.
        self._names_by_address: dict[str, int] = {}
        self._addresses_by_index: dict[int, str] = {}
        #: Per GPU UUID: the links seen active.
        self._links_up: dict[str, set[int]] = {}
        #: When the current device plugin problem was first seen, and for what expectation.
        self._plugin_onset: tuple[float, tuple[tuple[str, int], ...]] | None = None
        self._warned: set[str] = set()
        self._expected: tuple[NodeFacts, dict[str, int]] | None = None
        if previous is not None:
            self._names_by_address = dict(previous._names_by_address)
            self._addresses_by_index = dict(previous._addresses_by_index)
            self._links_up = {uuid: set(links) for uuid, links in previous._links_up.items()}
            self._plugin_onset = previous._plugin_onset
            self._warned = set(previous._warned)

    def observe(
        self,
        facts: NodeFacts | None,
        *,
        error: GfdError | None = None,
        node: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """This cycle's verdict from its facts (None when the read failed with ``error``)
        and, for the API checks, the Node object (None: those checks are not run)."""
        if facts is not None:
            self._remember(facts.gpus)
        results: list[CheckResult] = []
        for check in self.checks:
            if check == GPU_LOST:
                results.append(self._gpu_lost(facts, error))
            elif check == NVLINK:
                results.append(self._nvlink(facts))
            elif node is not None:
                results.append(self._device_plugin(facts, node))
        return Verdict(tuple(results))

    def _remember(self, gpus: Iterable[Gpu]) -> None:
        for gpu in gpus:
            address = sysfs_bus_id(gpu.bus_id)
            self._names_by_address[address] = gpu.index
            self._addresses_by_index[gpu.index] = address

    def _gpu_lost(self, facts: NodeFacts | None, error: GfdError | None) -> CheckResult:
        if facts is None:
            if isinstance(error, NvmlGpuLost):
                index = error.gpu_index
                address = self._addresses_by_index.get(index) if index is not None else None
                message = f"{gpu_name(index, address)} is lost: NVML answers {error.name}"
                problem = Problem(GPU_LOST, REASON_GPU_LOST, message)
                return CheckResult(GPU_LOST, FAILING, (problem,))
            return CheckResult(GPU_LOST, UNKNOWN)
        on_bus = self._pci.scan()
        if on_bus is None:
            return CheckResult(GPU_LOST, UNKNOWN)
        visible = {sysfs_bus_id(gpu.bus_id) for gpu in facts.gpus}
        problems = tuple(
            Problem(
                GPU_LOST,
                REASON_GPU_LOST,
                f"{gpu_name(self._names_by_address.get(device.address), device.address)} "
                "is on the PCI bus but NVML does not see it",
            )
            for device in on_bus
            if device.address not in visible
        )
        return CheckResult(GPU_LOST, FAILING if problems else OK, problems)

    def _nvlink(self, facts: NodeFacts | None) -> CheckResult:
        if facts is None:
            return CheckResult(NVLINK, UNKNOWN)
        problems = []
        for gpu in facts.gpus:
            active = {link.index for link in gpu.nvlinks if link.active}
            seen = self._links_up.setdefault(gpu.uuid, set())
            down = sorted(seen - active)
            seen.update(active)
            if down:
                links = ", ".join(map(str, down))
                plural = "s" if len(down) > 1 else ""
                problems.append(
                    Problem(
                        NVLINK,
                        REASON_NVLINK,
                        f"{gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))}: NVLink{plural} "
                        f"{links} down (active earlier)",
                    )
                )
        return CheckResult(NVLINK, FAILING if problems else OK, tuple(problems))

    def _device_plugin(self, facts: NodeFacts | None, node: Mapping[str, Any]) -> CheckResult:
        if facts is None:
            return CheckResult(DEVICE_PLUGIN, UNKNOWN)
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
                        DEVICE_PLUGIN,
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
                        DEVICE_PLUGIN,
                        REASON_ALLOCATABLE,
                        f"the kubelet advertises {have} {resource}, expected {count}: "
                        "the device plugin marked devices unhealthy",
                    )
                )
        if not problems:
            self._plugin_onset = None
            return CheckResult(DEVICE_PLUGIN, OK)
        now = self._clock()
        expectation = tuple(sorted(expected.items()))
        if self._plugin_onset is None or self._plugin_onset[1] != expectation:
            # A new problem, or a new expectation (MIG or sharing changed, a GPU came or
            # went): the plugin gets the whole grace period to catch up.
            self._plugin_onset = (now, expectation)
        state = FAILING if now - self._plugin_onset[0] >= self.grace_period else PENDING
        return CheckResult(DEVICE_PLUGIN, state, tuple(problems))

    def _warn_once(self, key: str, event: str, **fields: Any) -> None:
        if key in self._warned or self._log is None:
            return
        self._warned.add(key)
        self._log.warning(event, **fields)


# --------------------------------------------------------------------------- #
# The reported state


@dataclass(frozen=True)
class HealthState:
    """What gfd reports: the ``GPUHealthy`` condition's status, reason and message."""

    healthy: bool
    reason: str
    message: str
    #: The checks whose problems make up the message; empty when healthy.
    failing_checks: frozenset[str] = frozenset()

    @property
    def status(self) -> str:
        return "True" if self.healthy else "False"

    @property
    def label_value(self) -> str:
        return HEALTHY_LABEL_VALUE if self.healthy else self.reason

    def same_condition(self, other: HealthState | None) -> bool:
        return other is not None and (self.status, self.reason, self.message) == (
            other.status,
            other.reason,
            other.message,
        )


def state_of(verdict: Verdict) -> HealthState | None:
    """The state ``verdict`` decides, or None when it decides nothing (see :class:`HealthReporter`)."""
    failing = verdict.failing
    if failing:
        ordered = sorted(failing, key=lambda p: REASONS.index(p.reason))
        message = "; ".join(problem.message for problem in ordered)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        return HealthState(
            healthy=False,
            reason=ordered[0].reason,
            message=message,
            failing_checks=frozenset(p.check for p in failing),
        )
    if not verdict.decided:
        return None
    ran = ", ".join(r.check for r in verdict.results) or "none"
    return HealthState(
        healthy=True, reason=REASON_HEALTHY, message=f"every GPU health check passes ({ran})"
    )


def state_from_condition(condition: Mapping[str, Any] | None) -> HealthState | None:
    """The state a ``GPUHealthy`` condition on the Node records (gfd's own, earlier)."""
    if not isinstance(condition, Mapping):
        return None
    status, reason, message = (condition.get(k) for k in ("status", "reason", "message"))
    if status not in ("True", "False") or not isinstance(reason, str):
        return None
    return HealthState(
        healthy=status == "True",
        reason=reason,
        message=message if isinstance(message, str) else "",
    )


def node_condition(node: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The ``GPUHealthy`` entry of a Node's ``status.conditions``, if there is one."""
    status = node.get("status") if isinstance(node, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_TYPE:
            return condition
    return None


@dataclass(frozen=True)
class Transition:
    """The reported state changed this cycle: ``previous`` (None: nothing known) to ``state``."""

    previous: HealthState | None
    state: HealthState

    @property
    def worth_an_event(self) -> bool:
        """A change to or between problems, or back to health; not the first healthy
        state of a node nothing was known of, nor a healthy state reworded."""
        if self.previous is None:
            return not self.state.healthy
        return not (self.previous.healthy and self.state.healthy)


class ConditionWriter(Protocol):
    """Where the state goes beyond logs and metrics: the Node's condition, Events."""

    def saw(self, node: Mapping[str, Any]) -> None:
        """The Node as this cycle read it (what its condition says now)."""
        ...

    def write(self, state: HealthState, transition: Transition | None) -> None:
        """Make the Node's condition say ``state`` (when it does not), and record
        ``transition`` as an Event. Failures are logged, never raised: the condition is
        written again next cycle."""
        ...


class HealthTelemetry(Protocol):
    def health_checked(self, verdict: Verdict, state: HealthState | None) -> None: ...


class HealthReporter:
    """Turns each cycle's verdict into the reported :class:`HealthState`.

    A verdict with a failing check decides the state at once; one where every check
    passes decides it healthy; one that decides nothing (a check without facts this
    cycle, a device plugin problem inside its grace period) keeps the state as it was:
    the last one decided, or at start-up the condition a previous gfd left on the Node.
    So a restart never turns a node that is unhealthy healthy for the length of a grace
    period, and nothing is written while nothing is decided.

    The agent calls :meth:`observe` before it publishes (its labels join the
    publication) and :meth:`report` after (the node sink has read the Node by then).
    """

    def __init__(
        self,
        monitor: HealthMonitor,
        *,
        log: Any,
        label: bool = False,
        read_node: Callable[[], Mapping[str, Any] | None] | None = None,
        writer: ConditionWriter | None = None,
        telemetry: HealthTelemetry | None = None,
        previous: HealthReporter | None = None,
    ) -> None:
        self.monitor = monitor
        self.log = log
        self.label = label
        self._read_node = read_node
        self.writer = writer
        self.telemetry = telemetry
        #: The state last decided (or adopted); a reload keeps it.
        self.state: HealthState | None = previous.state if previous is not None else None
        self._adopted: bool = previous._adopted if previous is not None else False
        self._transition: Transition | None = None

    def observe(self, facts: NodeFacts | None, error: GfdError | None = None) -> Mapping[str, str]:
        """Run the checks on this cycle's facts (None: the read failed with ``error``);
        returns the labels to add to this cycle's publication."""
        # The node sink reads the Node only in cycles that publish: after a good read.
        node = self._read_node() if self._read_node is not None and facts is not None else None
        if node is not None:
            if self.writer is not None:
                self.writer.saw(node)
            if not self._adopted:
                self._adopted = True
                if self.state is None:
                    self.state = state_from_condition(node_condition(node))
        verdict = self.monitor.observe(facts, error=error, node=node)
        decided = state_of(verdict)
        if decided is not None:
            if not decided.same_condition(self.state):
                self._transition = Transition(self.state, decided)
                self._log_transition(self._transition)
            self.state = decided
        if self.telemetry is not None:
            self.telemetry.health_checked(verdict, self.state)
        if self.label and self.state is not None:
            return {HEALTH_LABEL: self.state.label_value}
        return {}

    def report(self) -> None:
        """After the cycle's publication: hand the state and any transition to the writer."""
        transition, self._transition = self._transition, None
        if self.writer is not None and self.state is not None:
            self.writer.write(
                self.state, transition if transition and transition.worth_an_event else None
            )

    def _log_transition(self, transition: Transition) -> None:
        state, previous = transition.state, transition.previous
        fields = {"reason": state.reason, "message": state.message}
        if previous is not None:
            fields["was"] = previous.reason
        if not state.healthy:
            self.log.warning("GPU health problem", **fields)
        elif previous is not None and not previous.healthy:
            self.log.info("GPU health restored", **fields)
        else:
            self.log.info("GPU health checked", **fields)
