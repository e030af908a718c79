"""``gfd explain`` ("why won't my GPU pod run?") and ``gfd select`` (requirements to a
node affinity): the workload author's commands.

This package owns the commands: where the pod and the nodes come from
(:mod:`gfd.explain.sources`), how the verdicts and the affinity are written
(:mod:`gfd.explain.report`), and the exit status. The rules themselves are
:mod:`gfd.scheduling`'s. Both commands only read: nothing is written to the cluster.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from gfd.base.errors import ConfigError
from gfd.explain.report import explanation_text, explanations_json, yaml_text
from gfd.explain.sources import (
    cluster_file,
    cluster_pod,
    live_cluster,
    manifest_workloads,
    parse_pod_reference,
    simulated_cluster,
)
from gfd.scheduling.cluster import Cluster, NodeUsage
from gfd.scheduling.cuda import REQUIRE_CUDA_ENV, parse_cuda_version, required_cuda
from gfd.scheduling.judge import explain
from gfd.scheduling.quantity import parse_quantity, scheduler_units
from gfd.scheduling.reading import api_client
from gfd.scheduling.select import (
    Requirements,
    affinity_matches,
    check_family,
    check_interconnect,
    check_mig_profile,
    meets,
    node_affinity,
    parse_memory,
    parse_version_requirement,
    selector_for,
)
from gfd.scheduling.workload import Workload, container_env

if TYPE_CHECKING:
    from gfd.config import Settings

#: Exit statuses: every workload runs on some node; some workload runs nowhere.
EXIT_RUNS = 0
EXIT_RUNS_NOWHERE = 1


def _needed_cuda(
    workload: Workload, flag: str | None
) -> tuple[tuple[int, int] | None, str, str | None]:
    """The CUDA the pod needs, where that was said, and the whole requirement."""
    if flag:
        return parse_cuda_version(flag, "--require-cuda"), "--require-cuda", None
    requirement = container_env(workload.spec, REQUIRE_CUDA_ENV)
    if requirement:
        needed = required_cuda(requirement)
        if needed is not None:
            return (
                needed,
                f"{REQUIRE_CUDA_ENV}={requirement.split()[0]} in the manifest",
                requirement,
            )
    return (
        None,
        (
            f"CUDA not checked: the manifest sets no {REQUIRE_CUDA_ENV} (a CUDA image sets it in "
            "its own environment; --require-cuda X.Y checks it)"
        ),
        None,
    )


def command_explain(namespace: Any, settings: Settings, out: TextIO) -> int:
    """Judge each pod of the manifest (or ``--pod``) against every node."""
    filenames: Sequence[str] = namespace.filename or ()
    pod: str | None = namespace.pod
    if bool(filenames) == bool(pod):
        raise ConfigError(
            "gfd explain needs the pod: -f MANIFEST (a file, - for stdin) or --pod "
            "NAMESPACE/NAME, one of the two"
        )
    if namespace.cluster_file and settings.simulate:
        raise ConfigError("--cluster-file and --simulate both name the nodes: give one")
    stop = threading.Event()
    workloads: list[Workload] = []
    for filename in filenames:
        workloads += manifest_workloads(filename)
    if namespace.cluster_file:
        cluster, found = cluster_file(namespace.cluster_file, pod)
        if found is not None:
            workloads.append(found)
    elif settings.simulate:
        if pod:
            raise ConfigError("--pod reads a pod of a cluster; with --simulate give -f MANIFEST")
        cluster = simulated_cluster(settings)
    else:
        with api_client(settings) as client:
            exclude = "/".join(parse_pod_reference(pod)) if pod else ""
            if pod:
                workloads.append(cluster_pod(client, pod, stop))
            cluster = live_cluster(client, stop, exclude)
    explanations = []
    for workload in workloads:
        needed, source, requirement = _needed_cuda(workload, namespace.require_cuda)
        explanations.append(
            explain(
                workload,
                cluster,
                needed_cuda=needed,
                cuda_source=source,
                cuda_requirement=requirement,
                all_nodes=namespace.all_nodes,
            )
        )
    if namespace.format == "json":
        out.write(explanations_json(explanations))
    else:
        out.write("\n".join(explanation_text(e) for e in explanations))
    runs = all(any(v.runs for v in e.verdicts) for e in explanations)
    return EXIT_RUNS if runs else EXIT_RUNS_NOWHERE


def requirements_of(namespace: Any) -> Requirements:
    """The requirements of ``gfd select``'s flags, each checked."""
    versions = tuple(
        parse_version_requirement(what, text)
        for what in ("cuda", "compute", "driver")
        for text in (getattr(namespace, what) or ())
    )
    min_count = namespace.min_count
    if min_count is not None and min_count < 1:
        raise ConfigError(f"--min-count {min_count}: at least 1")
    return Requirements(
        families=tuple(check_family(f) for f in namespace.family or ()),
        products=tuple(namespace.product or ()),
        min_memory_mib=parse_memory(namespace.min_memory) if namespace.min_memory else None,
        min_memory_text=namespace.min_memory or "",
        min_count=min_count,
        versions=versions,
        interconnects=tuple(check_interconnect(i) for i in namespace.interconnect or ()),
        mig_profile=check_mig_profile(namespace.mig_profile) if namespace.mig_profile else None,
        healthy=bool(namespace.healthy),
    )


def bundled_products(
    settings: Settings, requirements: Requirements
) -> list[tuple[str, str, bool, str, bool]]:
    """Each bundled profile: (profile, product, matches, memory MiB, would match but for
    --min-memory), labelled by gfd (MIG profiles under ``--mig-strategy mixed``, the
    strategy that names them)."""
    from gfd.agent import compute_labels
    from gfd.app.label_mode import label_options
    from gfd.sim import BUNDLED_PROFILES, load_profile

    strategy = "mixed" if requirements.mig_profile else settings.mig_strategy
    options = label_options(
        dataclasses.replace(settings, mig_strategy=strategy, simulate=None), with_timestamp=False
    )
    hardware = dataclasses.replace(requirements, healthy=False)
    any_memory = dataclasses.replace(hardware, min_memory_mib=None)
    rows = []
    for profile in BUNDLED_PROFILES:
        facts = load_profile(profile).facts
        labels, _ = compute_labels(facts, options)
        found = labels.labels
        rows.append(
            (
                profile,
                found.get("nvidia.com/gpu.product", "-"),
                meets(hardware, found),
                found.get("nvidia.com/gpu.memory", "-"),
                not meets(hardware, found) and meets(any_memory, found),
            )
        )
    return rows


def _free(cluster: Cluster, node: dict[str, Any], resource: str) -> int:
    name = node["metadata"]["name"]
    value = node["status"]["allocatable"].get(resource)
    if value is None:
        return 0
    have = scheduler_units(resource, parse_quantity(value, f"node {name}: {resource}"))
    used = cluster.usage.get(name, NodeUsage()).requested.get(resource, 0)
    return max(have - used, 0)


#: ``gfd select``'s requirement flags, as (flag, attribute).
SELECT_FLAGS = (
    ("--family", "family"),
    ("--product", "product"),
    ("--min-memory", "min_memory"),
    ("--min-count", "min_count"),
    ("--cuda", "cuda"),
    ("--compute", "compute"),
    ("--driver", "driver"),
    ("--interconnect", "interconnect"),
    ("--mig-profile", "mig_profile"),
)


def described(namespace: Any) -> str:
    """The requirement flags given, as a command line would spell them."""
    words: list[str] = []
    for flag, attribute in SELECT_FLAGS:
        value = getattr(namespace, attribute, None)
        for one in value if isinstance(value, list) else ([] if value is None else [value]):
            text = str(one)
            words.append(f"{flag} '{text}'" if any(c in text for c in "<> ") else f"{flag} {text}")
    if getattr(namespace, "healthy", False):
        words.append("--healthy")
    return " ".join(words)


def command_select(namespace: Any, settings: Settings, out: TextIO) -> int:
    """Print the node affinity (or node selector) for the requirements, with the bundled
    products it matches and, given a cluster, the nodes that match now."""
    requirements = requirements_of(namespace)
    affinity = node_affinity(requirements)
    selector = selector_for(requirements)
    comments = [f"gfd select {described(namespace)}".rstrip()]
    if requirements.min_memory_mib is not None:
        comments.append(
            f"--min-memory {requirements.min_memory_text} is {requirements.min_memory_mib} MiB "
            "(gpu.memory counts MiB)"
        )
    rows = bundled_products(settings, requirements)
    matching = [f"{product} ({profile})" for profile, product, hit, _, _ in rows if hit]
    comments.append(
        "bundled products it matches: "
        + (", ".join(matching) if matching else "none")
        + (" (health is known on live nodes only)" if requirements.healthy else "")
    )
    if requirements.min_memory_mib is not None:
        close = sorted(
            {
                f"{product} ({memory} MiB)"
                for _, product, _, memory, but_memory in rows
                if but_memory
            }
        )
        if close:
            comments.append("left out by --min-memory alone: " + ", ".join(close))
    cluster: Cluster | None = None
    if namespace.cluster_file:
        cluster, _ = cluster_file(namespace.cluster_file)
    elif settings.kubeconfig:
        with api_client(settings) as client:
            cluster = live_cluster(client, threading.Event())
    live: list[dict[str, Any]] = []
    if cluster is not None:
        for node in cluster.nodes:
            if affinity_matches(affinity, node["metadata"]["labels"]):
                name = node["metadata"]["name"]
                live.append({"node": name, "free": _free(cluster, node, requirements.resource)})
        comments.append(
            f"nodes of {cluster.source} that match now (free {requirements.resource}): "
            + (", ".join(f"{n['node']} ({n['free']})" for n in live) if live else "none")
        )
    placement: dict[str, Any] = (
        {"nodeSelector": selector}
        if selector is not None
        else {"affinity": {"nodeAffinity": affinity}}
    )
    if namespace.as_ == "pod":
        if namespace.gpus < 1:
            raise ConfigError(f"--gpus {namespace.gpus}: at least 1")
        placement = {
            "spec": {
                **placement,
                "containers": [
                    {
                        "name": "main",
                        "resources": {"limits": {requirements.resource: namespace.gpus}},
                    }
                ],
            }
        }
    if namespace.format == "json":
        document: dict[str, Any] = {"placement": placement, "notes": comments}
        if cluster is not None:
            document["matchingNodes"] = live
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        out.write("".join(f"# {line}\n" for line in comments) + yaml_text(placement))
    return 0
