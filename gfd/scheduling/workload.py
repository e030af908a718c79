"""The pod a manifest makes, and what it requests by the scheduler's rule.

A manifest of any kind with a pod template (Pod, Deployment, StatefulSet, DaemonSet,
ReplicaSet, ReplicationController, Job, CronJob) gives one :class:`Workload`: its name,
its namespace and its pod spec. :func:`pod_requests` is kube-scheduler's
``resourcehelper.PodRequests``: the larger of the containers' sum and each init
container's need (a restartable init container, a sidecar, runs beside everything after
it and is added to both), plus the pod's overhead; a resource with a limit and no request
requests its limit (the API server's defaulting, which a manifest has not been through);
pod-level ``resources`` replace the containers' CPU and memory (a pod-level limit alone
requests what the containers request, or itself when they request none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from gfd.base.errors import ConfigError, echo
from gfd.base.frozen import frozen_dataclass
from gfd.scheduling.quantity import parse_quantity, scheduler_units

#: Where each kind keeps its pod spec, below the object.
TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
}
#: The resources pod-level ``spec.resources`` may set (PodLevelResources, on since 1.34).
POD_LEVEL_RESOURCES = ("cpu", "memory")


@frozen_dataclass
class Workload:
    """One pod as its manifest (or the cluster) describes it."""

    kind: str
    namespace: str
    name: str
    spec: Mapping[str, Any]

    @property
    def title(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def workloads_of(documents: Iterable[Any], source: str) -> list[Workload]:
    """The pods the manifest's documents make (a ``List`` is opened); :class:`ConfigError`
    for a document with no pod template, naming it and where it is."""
    found: list[Workload] = []
    for number, document in enumerate(documents, 1):
        if document is None:
            continue
        where = f"{source}: document {number}"
        if not isinstance(document, Mapping):
            raise ConfigError(f"{where} is not a Kubernetes object (a mapping with kind)")
        kind = document.get("kind")
        if kind == "List" or (isinstance(kind, str) and kind.endswith("List")):
            found += workloads_of(document.get("items") or [], f"{where} ({kind})")
            continue
        found.append(workload_of(document, where))
    if not found:
        raise ConfigError(
            f"{source}: no document with a pod template (give a Pod, Deployment, "
            "StatefulSet, DaemonSet, Job or CronJob)"
        )
    return found


def workload_of(document: Mapping[str, Any], where: str) -> Workload:
    kind = document.get("kind")
    if not isinstance(kind, str) or kind not in TEMPLATE_PATHS:
        raise ConfigError(
            f"{where}: kind {echo(str(kind))} has no pod template (give a Pod, Deployment, "
            "StatefulSet, DaemonSet, ReplicaSet, Job or CronJob)"
        )
    spec: Any = document
    for step in TEMPLATE_PATHS[kind]:
        spec = spec.get(step) if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("containers"), list):
        path = ".".join(TEMPLATE_PATHS[kind])
        raise ConfigError(f"{where}: {kind} has no pod spec with containers at {path}")
    found = document.get("metadata")
    metadata: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    return Workload(
        kind=kind,
        namespace=str(metadata.get("namespace") or "default"),
        name=str(metadata.get("name") or "(unnamed)"),
        spec=spec,
    )


def _container_requests(container: Any, where: str) -> dict[str, Fraction]:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
        raise ConfigError(f"{where}: resources.requests and .limits must be mappings")
    merged = {str(name): value for name, value in limits.items()}
    merged.update({str(name): value for name, value in requests.items()})
    return {
        name: parse_quantity(value, f"{where}: resources {name}") for name, value in merged.items()
    }


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Fraction(0)) + value


def _raise_to(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        if value > into.get(name, Fraction(0)):
            into[name] = value


def pod_requests(spec: Mapping[str, Any], where: str = "the pod") -> dict[str, int]:
    """What the pod requests, in the scheduler's units (:func:`scheduler_units`)."""
    total: dict[str, Fraction] = {}
    for index, container in enumerate(spec.get("containers") or []):
        _add(total, _container_requests(container, f"{where}: containers[{index}]"))
    sidecars: dict[str, Fraction] = {}
    init_need: dict[str, Fraction] = {}
    for index, container in enumerate(spec.get("initContainers") or []):
        own = _container_requests(container, f"{where}: initContainers[{index}]")
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            # A sidecar keeps running: it adds to the containers, and every init container
            # after it runs beside it.
            _add(total, own)
            _add(sidecars, own)
            need = dict(sidecars)
        else:
            need = dict(own)
            _add(need, sidecars)
        _raise_to(init_need, need)
    _raise_to(total, init_need)
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        # The API server's defaulting: a pod-level request not given is the containers'
        # requests where they have one, else the pod-level limit.
        asked = _container_requests(
            {"resources": {"requests": pod_level.get("requests") or {}}}, f"{where}: resources"
        )
        capped = _container_requests(
            {"resources": {"limits": pod_level.get("limits") or {}}}, f"{where}: resources"
        )
        for name in POD_LEVEL_RESOURCES:
            if name in asked:
                total[name] = asked[name]
            elif name in capped and not total.get(name):
                total[name] = capped[name]
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping):
        _add(
            total,
            {str(k): parse_quantity(v, f"{where}: overhead {k}") for k, v in overhead.items()},
        )
    return {name: scheduler_units(name, value) for name, value in sorted(total.items())}


def container_env(spec: Mapping[str, Any], name: str) -> str | None:
    """The first literal value of environment variable ``name`` among the containers."""
    for container in spec.get("containers") or []:
        for variable in (container.get("env") or []) if isinstance(container, Mapping) else []:
            if isinstance(variable, Mapping) and variable.get("name") == name:
                value = variable.get("value")
                if isinstance(value, str):
                    return value
    return None
