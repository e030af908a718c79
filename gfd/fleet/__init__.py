"""``gfd fleet`` (also ``kubectl gfd fleet``): the operator's view of every GPU node.

This package owns reading the fleet and summing it up: one row per GPU node (its GPUs,
driver and CUDA, MIG, interconnect and clique, label mode, the ``GPUHealthy`` condition
and how long it has held, gfd's pod there), then what needs a look across the fleet:
GPUs by product, nodes by health reason, drift of driver, CUDA and gfd versions with the
minority nodes named, GPU nodes where gfd runs no Ready pod, and nodes whose gfd labels
are missing or were not refreshed since gfd's pod started. It reads with the user's
credentials, a page at a time, and keeps a small row per node, never the Nodes.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from gfd.base.errors import ConfigError
from gfd.base.frozen import frozen_dataclass
from gfd.health.condition import CONDITION_TYPE, REASON_HEALTHY
from gfd.scheduling.cluster import pages

if TYPE_CHECKING:
    from gfd.kube_api import KubeClient

PREFIX = "nvidia.com/"
TIMESTAMP = f"{PREFIX}gfd.timestamp"
#: gfd's pods, as the chart and deploy/ label them.
GFD_PODS = "app.kubernetes.io/name=gfd"
#: A node whose kubelet offers an ``nvidia.com/`` resource, or on which NFD saw an NVIDIA
#: PCI device, has GPUs even when gfd never labelled it.
NFD_NVIDIA_PCI = "feature.node.kubernetes.io/pci-10de.present"
#: The health of a node without gfd's condition (its health checks are off, or no gfd).
NO_CONDITION = "no-condition"
#: The clock's slack between gfd's start (its timestamp label) and the pod's container start.
START_SLACK_SECONDS = 120


@frozen_dataclass
class GfdPod:
    """gfd's pod on a node, as far as the fleet view needs it."""

    name: str
    ready: bool
    restarts: int
    version: str
    started: datetime | None


@frozen_dataclass
class FleetRow:
    """One GPU node."""

    node: str
    product: str
    gpus: int
    memory_mib: str
    driver: str
    cuda: str
    mig: str
    interconnect: str
    clique: str
    label_mode: str
    health: str
    health_since: datetime | None
    health_message: str
    pod: GfdPod | None
    labelled: bool
    #: gfd's timestamp label, when it has one (taken at its process start).
    published: datetime | None

    @property
    def refreshed(self) -> bool:
        """Labelled by the gfd that runs there now: a label older than the pod's start
        was left by an earlier one, and the agent now there has not published."""
        if not self.labelled:
            return False
        if self.pod is None or self.pod.started is None or self.published is None:
            return True
        return (self.pod.started - self.published).total_seconds() <= START_SLACK_SECONDS


def _time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        if text.isdigit():
            return datetime.fromtimestamp(int(text), tz=UTC)
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        return None


def _is_gpu_node(labels: Mapping[str, str], allocatable: Mapping[str, Any]) -> bool:
    count = labels.get(f"{PREFIX}gpu.count", "")
    if count.isdigit() and int(count) > 0:
        return True
    if labels.get(NFD_NVIDIA_PCI) == "true":
        return True
    return any(str(resource).startswith("nvidia.com/") for resource in allocatable)


def _label_mode(labels: Mapping[str, str]) -> str:
    if f"{PREFIX}gpu.sharing-strategy" in labels or f"{PREFIX}gpu.replicas" in labels:
        return "device-plugin"
    if f"{PREFIX}mig.enabled.count" in labels:
        return "hardware"
    return "-"


def _mig(labels: Mapping[str, str]) -> str:
    strategy = labels.get(f"{PREFIX}mig.strategy", "")
    profiles = sorted(
        key[len(PREFIX) + 4 : -len(".count")]
        for key, value in labels.items()
        if key.startswith(f"{PREFIX}mig-") and key.endswith(".count") and value not in ("", "0")
    )
    if not strategy and not profiles:
        capable = labels.get(f"{PREFIX}mig.capable")
        return "capable" if capable == "true" else "-"
    return f"{strategy or '?'}" + (f" ({','.join(profiles)})" if profiles else "")


def node_row(node: Mapping[str, Any], pod: GfdPod | None) -> FleetRow | None:
    """The row of a GPU node; None for a node without GPUs."""
    metadata = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    if not _is_gpu_node(labels, allocatable):
        return None
    health = next(
        (
            c
            for c in status.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == CONDITION_TYPE
        ),
        None,
    )
    annotations = metadata.get("annotations") or {}
    count = labels.get(f"{PREFIX}gpu.count", "")
    return FleetRow(
        node=str(metadata.get("name", "")),
        product=labels.get(f"{PREFIX}gpu.product", "-"),
        gpus=int(count) if count.isdigit() else 0,
        memory_mib=labels.get(f"{PREFIX}gpu.memory", "-"),
        driver=labels.get(f"{PREFIX}cuda.driver-version.full", "-"),
        cuda=labels.get(f"{PREFIX}cuda.runtime-version.full", "-"),
        mig=_mig(labels),
        interconnect=labels.get(f"{PREFIX}gpu.interconnect", "-"),
        clique=labels.get(f"{PREFIX}gpu.clique", "-"),
        label_mode=_label_mode(labels),
        health=str(health.get("reason", "-")) if health else NO_CONDITION,
        health_since=_time(health.get("lastTransitionTime")) if health else None,
        health_message=str(health.get("message", "")) if health else "",
        pod=pod,
        labelled=f"{PREFIX}gpu.count" in labels,
        published=_time(labels.get(TIMESTAMP) or annotations.get(TIMESTAMP)),
    )


def pod_of(pod: Mapping[str, Any]) -> tuple[str, GfdPod] | None:
    """(node name, gfd's pod) of a gfd Pod bound to a node."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    status = pod.get("status") or {}
    statuses = [s for s in status.get("containerStatuses") or [] if isinstance(s, Mapping)]
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    )
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    version = str(labels.get("app.kubernetes.io/version") or "")
    if not version:
        images = [str(c.get("image", "")) for c in spec.get("containers") or []]
        version = images[0].rsplit(":", 1)[-1] if images and ":" in images[0] else "-"
    started = None
    for container in statuses:
        running = (container.get("state") or {}).get("running") or {}
        started = _time(running.get("startedAt")) or started
    return str(node), GfdPod(
        name=f"{metadata.get('namespace', '')}/{metadata.get('name', '')}",
        ready=ready,
        restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
        version=version,
        started=started,
    )


@frozen_dataclass
class Fleet:
    """Every GPU node's row, sorted by name, and the count of nodes read."""

    rows: tuple[FleetRow, ...]
    nodes_read: int


def fleet_of(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> Fleet:
    """The fleet from Nodes and gfd's Pods (any iterables: pages as they come)."""
    by_node: dict[str, GfdPod] = {}
    earliest = datetime.min.replace(tzinfo=UTC)
    for pod in pods:
        found = pod_of(pod)
        if found is not None:
            node_name, gfd = found
            # Two (a rollout): the Ready one, then the newer.
            current = by_node.get(node_name)
            if current is None or (gfd.ready, gfd.started or earliest) > (
                current.ready,
                current.started or earliest,
            ):
                by_node[node_name] = gfd
    rows = []
    read = 0
    for node in nodes:
        read += 1
        name = str((node.get("metadata") or {}).get("name", ""))
        row = node_row(node, by_node.get(name))
        if row is not None:
            rows.append(row)
    rows.sort(key=lambda r: r.node)
    return Fleet(tuple(rows), read)


def read_fleet(
    client: KubeClient, stop: threading.Event, selector: str | None, gfd_pods: str
) -> Fleet:
    """The fleet from the API server: gfd's pods first (few), then the Nodes page by page."""
    # The server filters by the selector; what it sends is held to it again, cheaply.
    pods = [
        pod
        for pod in pages(client, "/api/v1/pods", stop, {"labelSelector": gfd_pods})
        if matches_selector((pod.get("metadata") or {}).get("labels") or {}, gfd_pods)
    ]
    query = {"labelSelector": selector} if selector else None
    return fleet_of(pages(client, "/api/v1/nodes", stop, query), pods)


def fleet_from_list(document: Any, source: str, gfd_pods: str) -> Fleet:
    """The fleet from ``kubectl get nodes,pods -A -o json`` saved."""
    if not isinstance(document, Mapping) or not isinstance(document.get("items"), list):
        raise ConfigError(
            f"{source}: not a Kubernetes List with items (kubectl get nodes,pods -A -o json > FILE)"
        )
    wanted = dict(part.split("=", 1) for part in gfd_pods.split(",") if "=" in part)
    items = [item for item in document["items"] if isinstance(item, Mapping)]
    pods = [
        item
        for item in items
        if item.get("kind") == "Pod"
        and all(
            ((item.get("metadata") or {}).get("labels") or {}).get(k) == v
            for k, v in wanted.items()
        )
    ]
    return fleet_of((item for item in items if item.get("kind") == "Node"), pods)


def matches_selector(labels: Mapping[str, str], selector: str) -> bool:
    """A label selector of ``k=v``, ``k==v``, ``k!=v``, ``k`` and ``!k`` terms joined by
    commas, as ``kubectl -l`` takes them (for a saved cluster; the API server applies it
    to a live one). Set-based terms are refused."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if " in " in term or " notin " in term or "(" in term:
            raise ConfigError(
                f"-l {selector!r}: set-based terms work against the API server, not a saved "
                "cluster; write k=v, k!=v, k or !k"
            )
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


# --------------------------------------------------------------------------- #
# The summary


@frozen_dataclass
class Drift:
    """One property's values across the fleet: the most common, and the others' nodes."""

    what: str
    common: str
    common_nodes: int
    others: tuple[tuple[str, tuple[str, ...]], ...]


def _drift(what: str, values: Mapping[str, str]) -> Drift | None:
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        if value not in ("", "-"):
            groups.setdefault(value, []).append(node)
    if len(groups) < 2:
        return None
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    common, nodes = ranked[0]
    return Drift(
        what, common, len(nodes), tuple((value, tuple(sorted(n))) for value, n in ranked[1:])
    )


@frozen_dataclass
class Summary:
    gpus_by_product: tuple[tuple[str, int], ...]
    nodes_by_health: tuple[tuple[str, tuple[str, ...]], ...]
    drift: tuple[Drift, ...]
    without_ready_gfd: tuple[str, ...]
    labels_missing: tuple[str, ...]
    labels_stale: tuple[str, ...]


def summarise(fleet: Fleet) -> Summary:
    products: Counter[str] = Counter()
    health: dict[str, list[str]] = {}
    for row in fleet.rows:
        products[row.product] += row.gpus
        health.setdefault(row.health, []).append(row.node)
    drifts = [
        _drift("driver", {r.node: r.driver for r in fleet.rows}),
        _drift("CUDA", {r.node: r.cuda for r in fleet.rows}),
        _drift("gfd", {r.node: r.pod.version for r in fleet.rows if r.pod is not None}),
    ]
    return Summary(
        gpus_by_product=tuple(sorted(products.items(), key=lambda item: (-item[1], item[0]))),
        nodes_by_health=tuple(
            sorted(
                ((reason, tuple(nodes)) for reason, nodes in health.items()),
                key=lambda item: (item[0] == REASON_HEALTHY, -len(item[1]), item[0]),
            )
        ),
        drift=tuple(d for d in drifts if d is not None),
        without_ready_gfd=tuple(r.node for r in fleet.rows if r.pod is None or not r.pod.ready),
        labels_missing=tuple(r.node for r in fleet.rows if not r.labelled),
        labels_stale=tuple(r.node for r in fleet.rows if r.labelled and not r.refreshed),
    )


# --------------------------------------------------------------------------- #
# Output


def _age(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "-"
    seconds = max(int((now - since).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _names(nodes: Sequence[str], most: int = 8) -> str:
    return ", ".join(nodes[:most]) + (
        f", and {len(nodes) - most} more" if len(nodes) > most else ""
    )


def table(fleet: Fleet, now: datetime, *, wide: bool) -> str:
    header = [
        "NODE",
        "PRODUCT",
        "GPUS",
        "MEMORY",
        "DRIVER",
        "CUDA",
        "MIG",
        "HEALTH",
        "SINCE",
        "GFD",
    ]
    if wide:
        header += ["INTERCONNECT", "CLIQUE", "MODE", "POD", "RESTARTS", "VERSION"]
    rows = [header]
    for r in fleet.rows:
        gfd = "-" if r.pod is None else ("Ready" if r.pod.ready else "NotReady")
        if r.pod is not None and not r.refreshed:
            gfd += ",stale"
        line = [
            r.node, r.product, str(r.gpus), f"{r.memory_mib}Mi" if r.memory_mib.isdigit() else "-",
            r.driver, r.cuda, r.mig, r.health, _age(r.health_since, now), gfd,
        ]  # fmt: skip
        if wide:
            line += [
                r.interconnect, r.clique, r.label_mode,
                r.pod.name if r.pod else "-", str(r.pod.restarts) if r.pod else "-",
                r.pod.version if r.pod else "-",
            ]  # fmt: skip
        rows.append(line)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return (
        "\n".join(
            "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )
        + "\n"
    )


def summary_text(fleet: Fleet, summary: Summary) -> str:
    lines = [f"{len(fleet.rows)} GPU nodes of {fleet.nodes_read} nodes read."]
    if summary.gpus_by_product:
        lines.append(
            "GPUs by product: "
            + ", ".join(f"{product} {count}" for product, count in summary.gpus_by_product)
        )
    if summary.nodes_by_health:
        lines.append(
            "Nodes by health: "
            + "; ".join(
                f"{reason} {len(nodes)}"
                + ("" if reason == REASON_HEALTHY else f" ({_names(nodes)})")
                for reason, nodes in summary.nodes_by_health
            )
        )
    for drift in summary.drift:
        others = "; ".join(f"{value} on {_names(nodes)}" for value, nodes in drift.others)
        lines.append(
            f"Drift of {drift.what}: {drift.common} on {drift.common_nodes} nodes; {others}"
        )
    if summary.without_ready_gfd:
        lines.append(f"GPU nodes where gfd runs no Ready pod: {_names(summary.without_ready_gfd)}")
    if summary.labels_missing:
        lines.append(f"GPU nodes without gfd's labels: {_names(summary.labels_missing)}")
    if summary.labels_stale:
        lines.append(
            "Labels not refreshed since gfd's pod started (the agent there has not "
            f"published): {_names(summary.labels_stale)}"
        )
    return "\n".join(lines) + "\n"


def fleet_json(fleet: Fleet, summary: Summary) -> str:
    def when(moment: datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    document = {
        "nodes": [
            {
                "node": r.node,
                "product": r.product,
                "gpus": r.gpus,
                "memoryMiB": r.memory_mib,
                "driver": r.driver,
                "cuda": r.cuda,
                "mig": r.mig,
                "interconnect": r.interconnect,
                "clique": r.clique,
                "labelMode": r.label_mode,
                "health": r.health,
                "healthSince": when(r.health_since),
                "healthMessage": r.health_message,
                "labelled": r.labelled,
                "refreshed": r.refreshed,
                "gfdPod": None
                if r.pod is None
                else {
                    "name": r.pod.name,
                    "ready": r.pod.ready,
                    "restarts": r.pod.restarts,
                    "version": r.pod.version,
                    "started": when(r.pod.started),
                },
            }
            for r in fleet.rows
        ],
        "nodesRead": fleet.nodes_read,
        "summary": {
            "gpusByProduct": dict(summary.gpus_by_product),
            "nodesByHealth": {reason: list(nodes) for reason, nodes in summary.nodes_by_health},
            "drift": [
                {
                    "what": d.what,
                    "common": d.common,
                    "commonNodes": d.common_nodes,
                    "others": {value: list(nodes) for value, nodes in d.others},
                }
                for d in summary.drift
            ],
            "withoutReadyGfd": list(summary.without_ready_gfd),
            "labelsMissing": list(summary.labels_missing),
            "labelsStale": list(summary.labels_stale),
        },
    }
    return json.dumps(document, indent=2) + "\n"


def command_fleet(namespace: Any, settings: Any, out: TextIO, now: datetime | None = None) -> int:
    """Print the fleet (``--format table|wide|json``); exit 0."""
    selector = namespace.selector
    if namespace.cluster_file:
        from gfd.scheduling.reading import read_list_file

        document = read_list_file(namespace.cluster_file)
        fleet = fleet_from_list(document, namespace.cluster_file, namespace.gfd_pods)
        if selector:
            wanted = {r.node for r in fleet.rows}
            kept = [
                item
                for item in document.get("items") or []
                if isinstance(item, Mapping)
                and item.get("kind") == "Node"
                and matches_selector((item.get("metadata") or {}).get("labels") or {}, selector)
            ]
            names = {str((n.get("metadata") or {}).get("name")) for n in kept}
            fleet = Fleet(tuple(r for r in fleet.rows if r.node in names & wanted), len(kept))
    else:
        from gfd.scheduling.reading import api_client

        with api_client(settings) as client:
            fleet = read_fleet(client, threading.Event(), selector, namespace.gfd_pods)
    summary = summarise(fleet)
    moment = now or datetime.now(UTC)
    if namespace.format == "json":
        out.write(fleet_json(fleet, summary))
    else:
        out.write(table(fleet, moment, wide=namespace.format == "wide"))
        out.write("\n" + summary_text(fleet, summary))
    return 0
