"""The feasibility decisions recorded from kube-scheduler v1.36, and the cases they answer.

Each case is a candidate Pod (a manifest, as a user writes it), one to four Nodes (labels,
taints, cordon, capacity and allocatable, the ``Ready`` condition and gfd's ``GPUHealthy``)
and the pods already bound to them (``spec.nodeName`` set, their requests held on that
node). The runner (``python -m tests.records.scheduler_cases --record --built "..."``)
starts a control plane (``tests/controlplane.py``: etcd, kube-apiserver, kube-scheduler),
and for every case gives the scheduler each node alone (only that node and its bound pods
exist), then, where there are several, all of them together, and keeps what the scheduler
decided: the pod bound (it fits), or its ``PodScheduled=False`` condition with reason
``Unschedulable`` and the scheduler's message. CI replays the record against gfd's
scheduling engine (``tests/scheduling/test_scheduler_record.py``); with
``KUBEBUILDER_ASSETS`` set, ``tests/realkube/test_scheduler.py`` runs the cases live.

The corpus is hand-written cases, one or more for each rule and edge the engine must get
right, and a seeded generator for breadth (:data:`SEED`): the same cases on every run.
Node names are the case's own (``gpu-a``); on the server each attempt's objects get a
prefix of their own, so that no attempt meets the objects of another in the scheduler's
cache, and the scheduler's log (``--v=4``) says when it has taken each change in before
the candidate pod is created.

A few inputs the API server refuses (:data:`REFUSED`: a negative label value, a
``Gt`` with a negative bound, ...) are kept with its refusal: they cannot reach the
scheduler, so the engine never meets them from a cluster.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.records.store import RECORDS_DIR, Record, inputs_sha256, today, write_record

RECORD = RECORDS_DIR / "kube-scheduler" / "verdicts.json"
RERECORD = 'KUBEBUILDER_ASSETS=... python -m tests.records.scheduler_cases --record --built "..."'
#: The generator's seed: change it and every generated case changes (and must be re-recorded).
SEED = 20261207
GENERATED = 110
NAMESPACE = "sched"
IMAGE = "registry.k8s.io/pause:3.10"
CANDIDATE = "candidate"

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
HEALTH_TAINT = "nvidia.com/gpu.health"
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

#: The RuntimeClasses the cases may name. The RuntimeClass admission plugin copies
#: ``overhead.podFixed`` into the pod's ``spec.overhead`` and merges ``scheduling`` into its
#: node selector and tolerations: a manifest that names one is not what the scheduler sees.
RUNTIME_CLASSES: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "kata-gpu"},
        "handler": "kata",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}},
    },
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia-pinned"},
        "handler": "nvidia",
        "overhead": {"podFixed": {"cpu": "100m", "memory": "64Mi"}},
        "scheduling": {
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        },
    },
)


# --- nodes ------------------------------------------------------------------------------

#: Some of gfd's labels per GPU model: product, memory (MiB), family.
GPU_MODELS: dict[str, tuple[str, str, str]] = {
    "h100": ("NVIDIA-H100-80GB-HBM3", "81559", "hopper"),
    "a100": ("NVIDIA-A100-SXM4-40GB", "40960", "ampere"),
    "l40s": ("NVIDIA-L40S", "46068", "ada-lovelace"),
    "t4": ("Tesla-T4", "15360", "turing"),
}


def taint(key: str, effect: str, value: str | None = None) -> dict[str, str]:
    found = {"key": key, "effect": effect}
    if value is not None:
        found["value"] = value
    return found


def node(
    name: str,
    *,
    model: str | None = None,
    gpus: int = 0,
    resources: Mapping[str, str] | None = None,
    cpu: str = "16",
    memory: str = "64Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: str = "True",
    gpu_healthy: tuple[str, str] | None = None,
    mig_strategy: str | None = None,
    driver: str = "550",
    zone: str = "zone-a",
    capacity_extra: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as a kubelet and gfd leave it. ``model`` gives gfd's GPU labels for ``gpus``
    GPUs; ``resources`` the device plugin's (``{"nvidia.com/gpu": "8"}``), by default
    ``gpus`` of ``nvidia.com/gpu`` on a GPU node. ``gpu_healthy``: gfd's ``GPUHealthy``
    condition as (reason, message) when unhealthy; healthy on every GPU node otherwise."""
    all_labels = {"topology.kubernetes.io/zone": zone}
    offered: dict[str, str] = {}
    if model is not None:
        product, gpu_memory, family = GPU_MODELS[model]
        all_labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": gpu_memory,
                "nvidia.com/gpu.family": family,
                "nvidia.com/cuda.driver.major": driver,
            }
        )
        if mig_strategy is not None:
            all_labels["nvidia.com/mig.strategy"] = mig_strategy
        offered = {GPU: str(gpus)} if resources is None else dict(resources)
    elif resources is not None:
        offered = dict(resources)
    all_labels.update(labels or {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **offered}
    capacity = {**allocatable, **(capacity_extra or {})}
    conditions = [
        {
            "type": "Ready",
            "status": ready,
            "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
            "message": "ready" if ready == "True" else "runtime network not ready",
        }
    ]
    if model is not None:
        reason, message = gpu_healthy or ("GPUsHealthy", "all checks pass")
        conditions.append(
            {
                "type": "GPUHealthy",
                "status": "True" if gpu_healthy is None else "False",
                "reason": reason,
                "message": message,
            }
        )
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(sorted(all_labels.items()))},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": allocatable, "conditions": conditions},
    }


def h100(name: str = "gpu-a", gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return node(name, model="h100", gpus=gpus, **kw)


def a100_mig(name: str = "mig-a", **kw: Any) -> dict[str, Any]:
    """Two A100s partitioned (mig.strategy=mixed): seven 1g.10gb... as the device plugin
    offers them; no ``nvidia.com/gpu``."""
    resources = kw.pop("resources", {MIG_1G: "7", MIG_3G: "2"})
    return node(name, model="a100", gpus=2, mig_strategy="mixed", resources=resources, **kw)


def t4_shared(name: str = "shared-a", **kw: Any) -> dict[str, Any]:
    """Four T4s time-sliced ten ways, renamed to ``nvidia.com/gpu.shared``."""
    resources = kw.pop("resources", {SHARED: "40"})
    return node(name, model="t4", gpus=4, resources=resources, **kw)


def cpu_node(name: str = "cpu-a", **kw: Any) -> dict[str, Any]:
    return node(name, **kw)


# --- pods -------------------------------------------------------------------------------


def container(
    name: str = "main",
    *,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    restart_always: bool = False,
) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "image": IMAGE}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    if resources:
        found["resources"] = resources
    if restart_always:
        found["restartPolicy"] = "Always"
    return found


def gpus(count: int | str, name: str = GPU) -> dict[str, str]:
    """An extended resource: in limits (requests default to limits)."""
    return {name: str(count)}


def pod(
    name: str = CANDIDATE,
    *,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init: Sequence[Mapping[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
    terms: Sequence[Mapping[str, Any]] | None = None,
    preferred: Sequence[Mapping[str, Any]] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    runtime_class: str | None = None,
    pod_resources: Mapping[str, Any] | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    """A Pod manifest. ``terms``: required node affinity's nodeSelectorTerms. The service
    account token is not mounted (its volume's random name would be noise in the record)."""
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [dict(c) for c in containers]
        if containers is not None
        else [container(requests=requests, limits=limits)],
    }
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    affinity: dict[str, Any] = {}
    if terms is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [dict(t) for t in terms]
        }
    if preferred is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [dict(p) for p in preferred]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    if tolerations is not None:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    if pod_resources is not None:
        spec["resources"] = dict(pod_resources)
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def bound(name: str, node_name: str, **kw: Any) -> dict[str, Any]:
    """A pod already bound to ``node_name`` (the scheduler counts its requests there)."""
    return pod(name, node_name=node_name, **kw)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def term(*expressions: Mapping[str, Any], fields: Sequence[Mapping[str, Any]] = ()) -> dict:
    found: dict[str, Any] = {}
    if expressions:
        found["matchExpressions"] = [dict(e) for e in expressions]
    if fields:
        found["matchFields"] = [dict(f) for f in fields]
    return found


def name_is(operator: str, name: str) -> dict[str, Any]:
    """A ``matchFields`` entry on ``metadata.name`` (the only field a node selector takes)."""
    return {"key": "metadata.name", "operator": operator, "values": [name]}


def tol(
    key: str | None = None,
    operator: str | None = None,
    value: str | None = None,
    effect: str | None = None,
    seconds: int | None = None,
) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, item in (("key", key), ("operator", operator), ("value", value), ("effect", effect)):
        if item is not None:
            found[name] = item
    if seconds is not None:
        found["tolerationSeconds"] = seconds
    return found


# --- cases ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SchedulingCase:
    case_id: str
    #: What the case is about, for a reader of the record and of a failure.
    about: str
    nodes: tuple[dict[str, Any], ...]
    pod: dict[str, Any]
    bound: tuple[dict[str, Any], ...] = ()

    def inputs(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "bound": list(self.bound), "pod": self.pod}

    @property
    def inputs_hash(self) -> str:
        return inputs_sha256(self.inputs())

    @property
    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]

    def bound_on(self, node_name: str) -> list[dict[str, Any]]:
        return [p for p in self.bound if p["spec"].get("nodeName") == node_name]

    @property
    def admission_changes_the_pod(self) -> bool:
        """The pod names a RuntimeClass: admission adds its overhead (and scheduling)."""
        return "runtimeClassName" in self.pod["spec"]


@dataclass(frozen=True, eq=False)
class RefusedCase:
    """Objects the API server refuses (``kind`` names which one): never scheduled."""

    case_id: str
    about: str
    obj: dict[str, Any]

    def inputs(self) -> dict[str, Any]:
        return {"object": self.obj}

    @property
    def inputs_hash(self) -> str:
        return inputs_sha256(self.inputs())


def _case(
    case_id: str,
    about: str,
    nodes: Sequence[Mapping[str, Any]],
    candidate: Mapping[str, Any],
    bound_pods: Sequence[Mapping[str, Any]] = (),
) -> SchedulingCase:
    return SchedulingCase(
        case_id,
        about,
        tuple(copy.deepcopy(dict(n)) for n in nodes),
        copy.deepcopy(dict(candidate)),
        tuple(copy.deepcopy(dict(p)) for p in bound_pods),
    )


def _labelled(extra: Mapping[str, str], name: str = "gpu-a", **kw: Any) -> dict[str, Any]:
    return h100(name, labels=extra, **kw)


def _trio() -> list[dict[str, Any]]:
    """An H100 node (zone a), a MIG-partitioned A100 node (zone b), a CPU node (zone a)."""
    return [
        h100("gpu-a", labels={"example.com/tier": "gold", "example.com/rank": "7"}),
        a100_mig("mig-b", zone="zone-b", labels={"example.com/tier": "silver"}),
        cpu_node("cpu-c", labels={"example.com/rank": "2"}),
    ]


def _selector_cases() -> list[SchedulingCase]:
    one_gpu = gpus(1)
    trio = _trio()
    cases = [
        _case(
            "selector-product",
            "nodeSelector on gfd's product label: one node has it",
            trio,
            pod(node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        ),
        _case(
            "selector-missing-label",
            "nodeSelector on a label no node has",
            trio,
            pod(node_selector={"example.com/absent": "yes"}),
        ),
        _case(
            "selector-two-keys",
            "nodeSelector with two keys: both must match",
            trio,
            pod(
                node_selector={"topology.kubernetes.io/zone": "zone-a", "example.com/tier": "gold"}
            ),
        ),
        _case(
            "selector-empty-value",
            "nodeSelector asking for an empty value: only the node "
            "whose label is empty matches, not the one without the label",
            [h100("gpu-a", labels={"example.com/flag": ""}), h100("gpu-b")],
            pod(node_selector={"example.com/flag": ""}),
        ),
        _case(
            "selector-hostname",
            "nodeSelector on kubernetes.io/hostname",
            [
                h100("gpu-a", labels={"kubernetes.io/hostname": "gpu-a"}),
                cpu_node("cpu-c", labels={"kubernetes.io/hostname": "cpu-c"}),
            ],
            pod(node_selector={"kubernetes.io/hostname": "cpu-c"}),
        ),
        _case(
            "selector-and-affinity",
            "nodeSelector and required affinity: both must hold",
            trio,
            pod(
                node_selector={"topology.kubernetes.io/zone": "zone-a"},
                terms=[term(expr("nvidia.com/gpu.present", "Exists"))],
            ),
        ),
        _case(
            "selector-empty-map",
            "an empty nodeSelector selects every node",
            trio,
            pod(node_selector={}),
        ),
        _case(
            "affinity-in",
            "In with two values",
            trio,
            pod(terms=[term(expr("example.com/tier", "In", "gold", "bronze"))]),
        ),
        _case(
            "affinity-in-missing",
            "In on a label one node lacks",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.family", "In", "ampere"))]),
        ),
        _case(
            "affinity-notin",
            "NotIn: a node without the label matches",
            trio,
            pod(terms=[term(expr("example.com/tier", "NotIn", "gold"))]),
        ),
        _case(
            "affinity-notin-all",
            "NotIn listing every value present",
            trio,
            pod(terms=[term(expr("topology.kubernetes.io/zone", "NotIn", "zone-a", "zone-b"))]),
        ),
        _case(
            "affinity-exists",
            "Exists",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.present", "Exists"))]),
        ),
        _case(
            "affinity-doesnotexist",
            "DoesNotExist",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.present", "DoesNotExist"))]),
        ),
        _case(
            "affinity-gt-memory",
            "Gt on gfd's GPU memory label",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.memory", "Gt", "40960"))]),
        ),
        _case(
            "affinity-gt-equal",
            "Gt is strict: equal does not match",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.memory", "Gt", "81559"))]),
        ),
        _case(
            "affinity-lt-count",
            "Lt on the GPU count",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.count", "Lt", "4"))]),
        ),
        _case(
            "affinity-lt-missing-label",
            "Lt on a label a node lacks: no match there",
            trio,
            pod(terms=[term(expr("example.com/rank", "Lt", "10"))]),
        ),
        _case(
            "affinity-gt-noninteger-label",
            "Gt against a node label that is not an integer",
            [
                _labelled({"example.com/ratio": "1.5"}),
                _labelled({"example.com/ratio": "2"}, "gpu-b"),
            ],
            pod(terms=[term(expr("example.com/ratio", "Gt", "1"))]),
        ),
        _case(
            "affinity-gt-leading-zero",
            "Gt against the label 08 (base 10, leading zero)",
            [
                _labelled({"example.com/level": "08"}),
                _labelled({"example.com/level": "010"}, "gpu-b"),
            ],
            pod(terms=[term(expr("example.com/level", "Gt", "7"))]),
        ),
        _case(
            "affinity-gt-long-leading-zeros",
            "Gt against a 23-digit label of leading zeros",
            [
                _labelled({"example.com/level": "00000000000000000000009"}),
                _labelled({"example.com/level": "00000000000000000000001"}, "gpu-b"),
            ],
            pod(terms=[term(expr("example.com/level", "Gt", "3"))]),
        ),
        _case(
            "affinity-gt-overflow",
            "Gt against a label past int64 (not an integer to it)",
            [
                _labelled({"example.com/big": "9223372036854775808"}),
                _labelled({"example.com/big": "9223372036854775807"}, "gpu-b"),
            ],
            pod(terms=[term(expr("example.com/big", "Gt", "9223372036854775806"))]),
        ),
        _case(
            "affinity-gt-hex",
            "Gt against a hexadecimal label: not base 10",
            [
                _labelled({"example.com/mask": "0x10"}),
                _labelled({"example.com/mask": "16"}, "gpu-b"),
            ],
            pod(terms=[term(expr("example.com/mask", "Gt", "8"))]),
        ),
        _case(
            "affinity-lt-word-label",
            "Lt against a label that is a word",
            [
                _labelled({"example.com/mask": "many"}),
                _labelled({"example.com/mask": "3"}, "gpu-b"),
            ],
            pod(terms=[term(expr("example.com/mask", "Lt", "8"))]),
        ),
        _case(
            "affinity-gt-noninteger-bound-or",
            "a term whose Gt bound is not an integer fails alone; another term may still match",
            trio,
            pod(
                terms=[
                    term(expr("nvidia.com/gpu.memory", "Gt", "1.5")),
                    term(expr("example.com/tier", "In", "silver")),
                ]
            ),
        ),
        _case(
            "affinity-gt-noninteger-bound",
            "a Gt bound that is not an integer matches nothing",
            trio,
            pod(terms=[term(expr("nvidia.com/gpu.memory", "Gt", "1.5"))]),
        ),
        _case(
            "affinity-lt-exponent-bound",
            "an Lt bound written 1e3 is not an integer",
            trio,
            pod(terms=[term(expr("example.com/rank", "Lt", "1e3"))]),
        ),
        _case(
            "fields-in",
            "matchFields metadata.name In: the PreFilter narrows to that node",
            trio,
            pod(terms=[term(fields=[name_is("In", "mig-b")])]),
        ),
        _case(
            "fields-notin",
            "matchFields metadata.name NotIn",
            trio,
            pod(terms=[term(fields=[name_is("NotIn", "gpu-a")])]),
        ),
        _case(
            "fields-in-absent-node",
            "matchFields naming a node that does not exist",
            trio,
            pod(terms=[term(fields=[name_is("In", "elsewhere")])]),
        ),
        _case(
            "fields-and-label",
            "matchFields and matchExpressions in one term: both hold",
            trio,
            pod(
                terms=[
                    term(expr("example.com/tier", "In", "gold"), fields=[name_is("In", "gpu-a")])
                ]
            ),
        ),
        _case(
            "fields-and-label-fails",
            "matchFields holds, the expression beside it fails",
            trio,
            pod(
                terms=[
                    term(expr("example.com/tier", "In", "silver"), fields=[name_is("In", "gpu-a")])
                ]
            ),
        ),
        _case(
            "fields-conflict",
            "two matchFields In of different names in one term: no node",
            trio,
            pod(terms=[term(fields=[name_is("In", "gpu-a"), name_is("In", "cpu-c")])]),
        ),
        _case(
            "fields-in-and-notin",
            "In one name and NotIn another in one term",
            trio,
            pod(terms=[term(fields=[name_is("In", "gpu-a"), name_is("NotIn", "cpu-c")])]),
        ),
        _case(
            "fields-or-terms",
            "two terms each naming a node: either",
            trio,
            pod(
                terms=[term(fields=[name_is("In", "gpu-a")]), term(fields=[name_is("In", "cpu-c")])]
            ),
        ),
        _case(
            "fields-or-label-term",
            "a term naming a node OR a label term: every node is a candidate of the PreFilter",
            trio,
            pod(
                terms=[
                    term(fields=[name_is("In", "gpu-a")]),
                    term(expr("example.com/tier", "In", "silver")),
                ]
            ),
        ),
        _case(
            "fields-in-with-gpu",
            "matchFields on the node whose GPUs are all MIG devices",
            trio,
            pod(limits=one_gpu, terms=[term(fields=[name_is("In", "mig-b")])]),
        ),
        _case(
            "terms-or-one-matches",
            "several terms ORed: the second matches one node",
            trio,
            pod(
                terms=[
                    term(expr("example.com/tier", "In", "platinum")),
                    term(expr("nvidia.com/mig.strategy", "Exists")),
                    term(expr("example.com/absent", "Exists")),
                ]
            ),
        ),
        _case(
            "terms-or-none-match",
            "several terms ORed, none matches",
            trio,
            pod(
                terms=[
                    term(expr("example.com/tier", "In", "platinum")),
                    term(expr("example.com/absent", "Exists")),
                ]
            ),
        ),
        _case(
            "term-and-one-fails",
            "AND within a term: one expression fails",
            trio,
            pod(
                terms=[
                    term(
                        expr("nvidia.com/gpu.present", "Exists"),
                        expr("topology.kubernetes.io/zone", "In", "zone-b"),
                        expr("nvidia.com/gpu.count", "Gt", "4"),
                    )
                ]
            ),
        ),
        _case(
            "term-and-all-hold",
            "AND within a term: all hold on one node",
            trio,
            pod(
                terms=[
                    term(
                        expr("nvidia.com/gpu.present", "Exists"),
                        expr("topology.kubernetes.io/zone", "In", "zone-a"),
                        expr("nvidia.com/gpu.count", "Gt", "4"),
                        expr("example.com/tier", "NotIn", "silver"),
                    )
                ]
            ),
        ),
        _case(
            "term-empty-and-matching",
            "an empty term matches nothing; the other term does",
            trio,
            pod(terms=[{}, term(expr("example.com/tier", "In", "silver"))]),
        ),
        _case("term-empty-only", "the only term is empty: no node matches", trio, pod(terms=[{}])),
        _case(
            "preferred-only",
            "preferred affinity never blocks",
            trio,
            pod(
                preferred=[{"weight": 50, "preference": term(expr("example.com/absent", "Exists"))}]
            ),
        ),
        _case(
            "affinity-and-gpu",
            "affinity narrows to the H100 node; the GPU fits",
            trio,
            pod(limits=gpus(2), terms=[term(expr("nvidia.com/gpu.family", "In", "hopper"))]),
        ),
    ]
    return cases


def _taint_cases() -> list[SchedulingCase]:
    dedicated_ns = taint("dedicated", "NoSchedule", "ml")
    dedicated_ne = taint("dedicated", "NoExecute", "ml")
    plain = cpu_node("cpu-z")

    def tainted(*taints: Mapping[str, str], **kw: Any) -> list[dict[str, Any]]:
        return [h100("gpu-a", taints=taints, **kw), plain]

    xid = ("XidError", "GPU 0: Xid 79 (fallen off the bus)")
    health_ns = taint(HEALTH_TAINT, "NoSchedule", "XidError")
    health_ne = taint(HEALTH_TAINT, "NoExecute", "XidError")
    return [
        _case("taint-noschedule", "an untolerated NoSchedule taint", tainted(dedicated_ns), pod()),
        _case("taint-noexecute", "an untolerated NoExecute taint", tainted(dedicated_ne), pod()),
        _case(
            "taint-prefernoschedule",
            "PreferNoSchedule never blocks",
            tainted(taint("dedicated", "PreferNoSchedule", "ml")),
            pod(),
        ),
        _case(
            "taint-no-value",
            "an untolerated taint without a value",
            tainted(taint("example.com/maintenance", "NoSchedule")),
            pod(),
        ),
        _case(
            "tol-exists-no-key",
            "operator Exists with no key tolerates every taint",
            tainted(dedicated_ns, dedicated_ne, health_ns),
            pod(tolerations=[tol(operator="Exists")]),
        ),
        _case(
            "tol-exists-no-key-effect",
            "Exists with no key but an effect: only that effect",
            tainted(dedicated_ne),
            pod(tolerations=[tol(operator="Exists", effect="NoSchedule")]),
        ),
        _case(
            "tol-key-exists",
            "key and Exists: any value",
            tainted(dedicated_ns),
            pod(tolerations=[tol("dedicated", "Exists")]),
        ),
        _case(
            "tol-key-equal",
            "key, Equal and the value",
            tainted(dedicated_ns),
            pod(tolerations=[tol("dedicated", "Equal", "ml", "NoSchedule")]),
        ),
        _case(
            "tol-default-operator",
            "no operator means Equal",
            tainted(dedicated_ns),
            pod(tolerations=[tol("dedicated", value="ml")]),
        ),
        _case(
            "tol-value-mismatch",
            "Equal with another value",
            tainted(dedicated_ns),
            pod(tolerations=[tol("dedicated", "Equal", "web")]),
        ),
        _case(
            "tol-equal-empty-value",
            "Equal with no value against a taint without a value",
            tainted(taint("example.com/maintenance", "NoSchedule")),
            pod(tolerations=[tol("example.com/maintenance", "Equal")]),
        ),
        _case(
            "tol-equal-empty-vs-value",
            "Equal with no value against a taint with a value",
            tainted(dedicated_ns),
            pod(tolerations=[tol("dedicated", "Equal")]),
        ),
        _case(
            "tol-empty-effect",
            "a toleration with no effect tolerates both effects",
            tainted(dedicated_ns, dedicated_ne),
            pod(tolerations=[tol("dedicated", "Equal", "ml")]),
        ),
        _case(
            "tol-effect-mismatch",
            "a NoExecute toleration against a NoSchedule taint",
            tainted(dedicated_ns),
            pod(tolerations=[tol("dedicated", "Equal", "ml", "NoExecute")]),
        ),
        _case(
            "tol-seconds",
            "tolerationSeconds does not matter to scheduling",
            tainted(dedicated_ne),
            pod(tolerations=[tol("dedicated", "Exists", effect="NoExecute", seconds=60)]),
        ),
        _case(
            "tol-key-mismatch",
            "a toleration for another key",
            tainted(dedicated_ns),
            pod(tolerations=[tol("team", "Exists")]),
        ),
        _case(
            "taints-one-of-two-tolerated",
            "two taints, one tolerated",
            tainted(dedicated_ns, taint("example.com/maintenance", "NoSchedule", "true")),
            pod(tolerations=[tol("dedicated", "Exists")]),
        ),
        _case(
            "taints-two-untolerated",
            "two untolerated taints on one node: the scheduler counts the node once",
            [
                h100("gpu-a", taints=[dedicated_ns, taint("example.com/maintenance", "NoExecute")]),
                h100("gpu-b", taints=[dedicated_ns]),
            ],
            pod(),
        ),
        _case(
            "taints-prefer-and-noschedule",
            "PreferNoSchedule beside a tolerated NoSchedule",
            tainted(taint("spot", "PreferNoSchedule", "true"), dedicated_ns),
            pod(tolerations=[tol("dedicated", "Equal", "ml", "NoSchedule")]),
        ),
        _case(
            "gpu-taint",
            "the common nvidia.com/gpu:NoSchedule taint, untolerated",
            tainted(taint(GPU, "NoSchedule", "present")),
            pod(limits=gpus(1)),
        ),
        _case(
            "gpu-taint-tolerated",
            "nvidia.com/gpu tolerated by key Exists",
            tainted(taint(GPU, "NoSchedule", "present")),
            pod(limits=gpus(1), tolerations=[tol(GPU, "Exists", effect="NoSchedule")]),
        ),
        _case(
            "health-taint",
            "gfd's health taint (NoSchedule), untolerated",
            tainted(health_ns, gpu_healthy=xid),
            pod(limits=gpus(1)),
        ),
        _case(
            "health-taint-noexecute",
            "gfd's health taint as NoExecute",
            tainted(health_ne, gpu_healthy=xid),
            pod(limits=gpus(1)),
        ),
        _case(
            "health-taint-tolerated",
            "gfd's health taint tolerated by key Exists",
            tainted(health_ns, gpu_healthy=xid),
            pod(limits=gpus(1), tolerations=[tol(HEALTH_TAINT, "Exists")]),
        ),
        _case(
            "health-taint-tolerated-reason",
            "tolerating gfd's health taint for one reason",
            tainted(health_ns, gpu_healthy=xid),
            pod(limits=gpus(1), tolerations=[tol(HEALTH_TAINT, "Equal", "XidError", "NoSchedule")]),
        ),
        _case(
            "health-taint-other-reason",
            "tolerating gfd's health taint for another reason",
            tainted(
                taint(HEALTH_TAINT, "NoSchedule", "GPULost"),
                gpu_healthy=("GPULost", "GPU 00000000:3B:00.0 is gone from the bus"),
            ),
            pod(limits=gpus(1), tolerations=[tol(HEALTH_TAINT, "Equal", "XidError")]),
        ),
        _case(
            "health-taint-noexecute-tolerated-noschedule",
            "a NoSchedule toleration of gfd's key against its NoExecute taint",
            tainted(health_ne, gpu_healthy=xid),
            pod(tolerations=[tol(HEALTH_TAINT, "Exists", effect="NoSchedule")]),
        ),
        _case(
            "health-condition-only",
            "GPUHealthy=False without a taint does not block",
            [h100("gpu-a", gpu_healthy=("UncorrectableECC", "GPU 3: 2 uncorrectable errors"))],
            pod(limits=gpus(1)),
        ),
        _case(
            "health-taint-both-nodes",
            "both GPU nodes tainted unhealthy for different reasons",
            [
                h100("gpu-a", taints=[health_ns], gpu_healthy=xid),
                h100(
                    "gpu-b",
                    taints=[taint(HEALTH_TAINT, "NoSchedule", "DevicePluginMissing")],
                    gpu_healthy=("DevicePluginMissing", "no nvidia.com/gpu offered"),
                ),
            ],
            pod(limits=gpus(1)),
        ),
        _case(
            "cordoned",
            "a cordoned node (spec.unschedulable, no taint yet)",
            [h100("gpu-a", unschedulable=True), plain],
            pod(),
        ),
        _case(
            "cordoned-tolerated",
            "tolerating node.kubernetes.io/unschedulable passes the cordon",
            [h100("gpu-a", unschedulable=True)],
            pod(tolerations=[tol(UNSCHEDULABLE, "Exists", effect="NoSchedule")]),
        ),
        _case(
            "cordoned-tolerated-noexecute",
            "a NoExecute toleration of the cordon's key does not pass it",
            [h100("gpu-a", unschedulable=True)],
            pod(tolerations=[tol(UNSCHEDULABLE, "Exists", effect="NoExecute")]),
        ),
        _case(
            "cordoned-with-taint",
            "cordoned, with the taint the node controller adds",
            [h100("gpu-a", unschedulable=True, taints=[taint(UNSCHEDULABLE, "NoSchedule")]), plain],
            pod(),
        ),
        _case(
            "cordoned-with-taint-tolerated",
            "cordoned and tainted, tolerated",
            [h100("gpu-a", unschedulable=True, taints=[taint(UNSCHEDULABLE, "NoSchedule")])],
            pod(tolerations=[tol(UNSCHEDULABLE, "Exists")]),
        ),
        _case(
            "cordoned-tolerate-all",
            "Exists with no key passes a cordon too",
            [h100("gpu-a", unschedulable=True, taints=[dedicated_ns])],
            pod(tolerations=[tol(operator="Exists")]),
        ),
        _case(
            "cordoned-and-tainted-first-filter",
            "cordoned and tainted, neither tolerated: the cordon is the scheduler's first filter",
            [
                h100("gpu-a", unschedulable=True, taints=[dedicated_ns]),
                h100("gpu-b", taints=[dedicated_ns]),
            ],
            pod(limits=gpus(1)),
        ),
        _case(
            "taint-then-affinity-first-filter",
            "tainted and not matching: the taint is counted first",
            [h100("gpu-a", taints=[dedicated_ns]), cpu_node("cpu-b")],
            pod(node_selector={"nvidia.com/gpu.present": "true"}),
        ),
        _case(
            "affinity-then-resources-first-filter",
            "not matching and too small: the affinity is counted",
            [cpu_node("cpu-a"), h100("gpu-b", gpus=1)],
            pod(limits=gpus(4), node_selector={"topology.kubernetes.io/zone": "zone-b"}),
        ),
    ]


def _readiness_cases() -> list[SchedulingCase]:
    not_ready_ns = taint(NOT_READY, "NoSchedule")
    not_ready_ne = taint(NOT_READY, "NoExecute")
    unreachable_ns = taint(UNREACHABLE, "NoSchedule")
    unreachable_ne = taint(UNREACHABLE, "NoExecute")
    healthy = h100("gpu-z")
    return [
        _case(
            "notready-tainted",
            "Ready=False with the not-ready NoSchedule taint (the node controller's)",
            [h100("gpu-a", ready="False", taints=[not_ready_ns]), healthy],
            pod(limits=gpus(1)),
        ),
        _case(
            "notready-untainted",
            "Ready=False before any taint: the scheduler places it",
            [h100("gpu-a", ready="False")],
            pod(limits=gpus(1)),
        ),
        _case(
            "notready-both-taints",
            "Ready=False with both not-ready taints, as a node controller leaves it",
            [h100("gpu-a", ready="False", taints=[not_ready_ns, not_ready_ne]), healthy],
            pod(limits=gpus(1)),
        ),
        _case(
            "notready-noexecute-only",
            "only the not-ready NoExecute taint: admission's "
            "default toleration covers it, a manifest has none",
            [h100("gpu-a", ready="False", taints=[not_ready_ne])],
            pod(limits=gpus(1)),
        ),
        _case(
            "notready-tolerated",
            "the pod tolerates not-ready",
            [h100("gpu-a", ready="False", taints=[not_ready_ns, not_ready_ne])],
            pod(tolerations=[tol(NOT_READY, "Exists")]),
        ),
        _case(
            "notready-noschedule-tolerated-noexecute",
            "tolerating not-ready NoExecute only",
            [h100("gpu-a", ready="False", taints=[not_ready_ns])],
            pod(tolerations=[tol(NOT_READY, "Exists", effect="NoExecute", seconds=300)]),
        ),
        _case(
            "unreachable",
            "Ready=Unknown with the unreachable taints",
            [h100("gpu-a", ready="Unknown", taints=[unreachable_ns, unreachable_ne]), healthy],
            pod(limits=gpus(1)),
        ),
        _case(
            "unreachable-noexecute-only",
            "only unreachable:NoExecute",
            [h100("gpu-a", ready="Unknown", taints=[unreachable_ne])],
            pod(),
        ),
        _case(
            "ready-unknown-untainted",
            "Ready=Unknown, no taint",
            [h100("gpu-a", ready="Unknown")],
            pod(),
        ),
        _case(
            "notready-cpu-node",
            "a not-ready CPU node beside a busy GPU node",
            [cpu_node("cpu-a", ready="False", taints=[not_ready_ns]), h100("gpu-b", gpus=1)],
            pod(limits=gpus(1)),
            [bound("holder", "gpu-b", limits=gpus(1))],
        ),
    ]


def _resource_cases() -> list[SchedulingCase]:
    one = gpus(1)
    return [
        _case("gpu-fits", "one GPU on an idle 8-GPU node", [h100()], pod(limits=one)),
        _case("gpu-too-many", "four GPUs asked, two offered", [h100(gpus=2)], pod(limits=gpus(4))),
        _case(
            "gpu-all-used",
            "every GPU held by bound pods",
            [h100(gpus=2), cpu_node("cpu-b")],
            pod(limits=one),
            [bound("job-1", "gpu-a", limits=one), bound("job-2", "gpu-a", limits=one)],
        ),
        _case(
            "gpu-one-free",
            "two asked, one free",
            [h100(gpus=4)],
            pod(limits=gpus(2)),
            [bound("job-1", "gpu-a", limits=gpus(3))],
        ),
        _case(
            "gpu-exactly-free",
            "asks exactly what is free",
            [h100(gpus=4)],
            pod(limits=gpus(2)),
            [bound("job-1", "gpu-a", limits=gpus(2))],
        ),
        _case(
            "gpu-absent",
            "a node that does not offer the resource at all",
            [cpu_node("cpu-a")],
            pod(limits=one),
        ),
        _case(
            "gpu-zero-offered",
            "nvidia.com/gpu offered as 0 (every GPU unhealthy to the device plugin)",
            [h100(resources={GPU: "0"})],
            pod(limits=one),
        ),
        _case(
            "gpu-requests-and-limits",
            "requests and limits both set",
            [h100(gpus=2)],
            pod(requests=gpus(2), limits=gpus(2)),
        ),
        _case(
            "gpu-limit-zero",
            "a GPU limit of 0 asks for nothing",
            [cpu_node("cpu-a")],
            pod(limits=gpus(0)),
        ),
        _case(
            "gpu-by-limits-only-bound",
            "bound pods with limits only hold their limits",
            [h100(gpus=2)],
            pod(limits=one),
            [bound("job-1", "gpu-a", limits={GPU: "2", "cpu": "1"})],
        ),
        _case(
            "cpu-short",
            "CPU asked beyond allocatable",
            [h100(cpu="4")],
            pod(requests={"cpu": "4500m"}),
        ),
        _case("cpu-exact", "CPU asked exactly", [h100(cpu="4")], pod(requests={"cpu": "4"})),
        _case(
            "cpu-used",
            "CPU held by bound pods",
            [h100(cpu="8")],
            pod(requests={"cpu": "2"}),
            [bound("web", "gpu-a", requests={"cpu": "6500m"})],
        ),
        _case(
            "cpu-millis",
            "millicores add up exactly",
            [cpu_node("cpu-a", cpu="1")],
            pod(requests={"cpu": "334m"}),
            [
                bound("a", "cpu-a", requests={"cpu": "333m"}),
                bound("b", "cpu-a", requests={"cpu": "333m"}),
            ],
        ),
        _case(
            "cpu-fraction", "0.5 CPU", [cpu_node("cpu-a", cpu="500m")], pod(requests={"cpu": "0.5"})
        ),
        _case(
            "cpu-limits-only",
            "CPU limit only: requests default to the limit",
            [cpu_node("cpu-a", cpu="2")],
            pod(limits={"cpu": "3"}),
        ),
        _case(
            "memory-short",
            "memory beyond allocatable",
            [h100(memory="8Gi")],
            pod(requests={"memory": "9Gi"}),
        ),
        _case(
            "memory-decimal-vs-binary",
            "8G asked of 8Gi: fits (8G < 8Gi)",
            [cpu_node("cpu-a", memory="8Gi")],
            pod(requests={"memory": "8G"}),
        ),
        _case(
            "memory-binary-vs-decimal",
            "8Gi asked of 8G: does not",
            [cpu_node("cpu-a", memory="8G")],
            pod(requests={"memory": "8Gi"}),
        ),
        _case(
            "memory-used",
            "memory held by bound pods",
            [h100(memory="32Gi")],
            pod(requests={"memory": "10Gi"}),
            [bound("db", "gpu-a", requests={"memory": "24Gi"})],
        ),
        _case(
            "memory-exponent",
            "memory written 1e9",
            [cpu_node("cpu-a", memory="1G")],
            pod(requests={"memory": "1e9"}),
        ),
        _case(
            "three-short",
            "GPUs, CPU and memory all short: three reasons",
            [h100(gpus=1, cpu="2", memory="4Gi")],
            pod(requests={"cpu": "3", "memory": "5Gi"}, limits=gpus(2)),
        ),
        _case(
            "too-many-pods",
            "the node's pod capacity is reached",
            [h100(pods="2"), cpu_node("cpu-b", pods="1")],
            pod(),
            [bound("a", "gpu-a"), bound("b", "gpu-a"), bound("c", "cpu-b")],
        ),
        _case(
            "too-many-pods-and-gpus",
            "too many pods and too few GPUs",
            [h100(gpus=1, pods="1")],
            pod(limits=one),
            [bound("a", "gpu-a", limits=one)],
        ),
        _case("pods-zero", "a node that takes no pods", [h100(pods="0")], pod()),
        _case(
            "no-requests-full-node",
            "a pod asking nothing still needs a pod slot",
            [h100(gpus=1, cpu="1", memory="1Gi")],
            pod(),
            [bound("a", "gpu-a", requests={"cpu": "1", "memory": "1Gi"}, limits=one)],
        ),
        _case(
            "containers-sum",
            "two containers' GPUs add up",
            [h100(gpus=2)],
            pod(containers=[container("a", limits=one), container("b", limits=gpus(2))]),
        ),
        _case(
            "init-larger",
            "an init container's need beyond the containers' sum",
            [h100(gpus=1)],
            pod(limits=one, init=[container("warm", limits=gpus(2))]),
        ),
        _case(
            "init-smaller",
            "an init container asking less than the containers",
            [h100(gpus=2)],
            pod(limits=gpus(2), init=[container("warm", limits=one)]),
        ),
        _case(
            "init-cpu-dominates",
            "init CPU above the containers' CPU",
            [cpu_node("cpu-a", cpu="2")],
            pod(requests={"cpu": "1"}, init=[container("setup", requests={"cpu": "2500m"})]),
        ),
        _case(
            "sidecar-adds",
            "a sidecar's GPU adds to the containers'",
            [h100(gpus=1)],
            pod(limits=one, init=[container("proxy", limits=one, restart_always=True)]),
        ),
        _case(
            "sidecar-fits",
            "sidecar plus container within the node",
            [h100(gpus=2)],
            pod(limits=one, init=[container("proxy", limits=one, restart_always=True)]),
        ),
        _case(
            "sidecar-then-init",
            "an init container after a sidecar runs beside it",
            [cpu_node("cpu-a", cpu="3")],
            pod(
                requests={"cpu": "1"},
                init=[
                    container("proxy", requests={"cpu": "1"}, restart_always=True),
                    container("setup", requests={"cpu": "2500m"}),
                ],
            ),
        ),
        _case(
            "init-then-sidecar",
            "an init container before the sidecar does not run beside it",
            [cpu_node("cpu-a", cpu="3")],
            pod(
                requests={"cpu": "1"},
                init=[
                    container("setup", requests={"cpu": "2500m"}),
                    container("proxy", requests={"cpu": "1"}, restart_always=True),
                ],
            ),
        ),
        _case(
            "two-sidecars-memory",
            "two sidecars' memory adds to the containers'",
            [cpu_node("cpu-a", memory="3Gi")],
            pod(
                requests={"memory": "1Gi"},
                init=[
                    container("s1", requests={"memory": "1Gi"}, restart_always=True),
                    container("s2", requests={"memory": "1536Mi"}, restart_always=True),
                ],
            ),
        ),
        _case(
            "bound-init-holds",
            "a bound pod's init container need is held on the node",
            [h100(gpus=2)],
            pod(limits=one),
            [bound("job", "gpu-a", limits=one, init=[container("warm", limits=gpus(2))])],
        ),
        _case(
            "bound-sidecar-holds",
            "a bound pod's sidecar is held on the node",
            [h100(gpus=2)],
            pod(limits=one),
            [
                bound(
                    "job",
                    "gpu-a",
                    limits=one,
                    init=[container("proxy", limits=one, restart_always=True)],
                )
            ],
        ),
        _case(
            "overhead-pushes-over",
            "a RuntimeClass's overhead pushes CPU past allocatable",
            [h100(cpu="2")],
            pod(requests={"cpu": "1900m"}, runtime_class="kata-gpu"),
        ),
        _case(
            "overhead-fits",
            "a RuntimeClass's overhead within allocatable",
            [h100(cpu="2")],
            pod(requests={"cpu": "1500m"}, runtime_class="kata-gpu"),
        ),
        _case(
            "overhead-memory",
            "overhead memory beyond what is free",
            [h100(memory="2Gi")],
            pod(requests={"memory": "1900Mi"}, runtime_class="kata-gpu"),
        ),
        _case(
            "runtimeclass-scheduling",
            "a RuntimeClass whose scheduling adds a nodeSelector and a toleration",
            [h100(taints=[taint(GPU, "NoSchedule", "present")]), cpu_node("cpu-b")],
            pod(limits=one, runtime_class="nvidia-pinned"),
        ),
        _case(
            "pod-level-cpu",
            "pod-level resources replace the containers' CPU",
            [cpu_node("cpu-a", cpu="2")],
            pod(
                pod_resources={"requests": {"cpu": "2500m"}},
                containers=[container("a", requests={"cpu": "500m"})],
            ),
        ),
        _case(
            "pod-level-fits",
            "pod-level CPU within allocatable though above each container",
            [cpu_node("cpu-a", cpu="2")],
            pod(
                pod_resources={"requests": {"cpu": "1500m"}},
                containers=[
                    container("a", requests={"cpu": "500m"}),
                    container("b", requests={"cpu": "500m"}),
                ],
            ),
        ),
        _case(
            "pod-level-memory-limits",
            "pod-level memory limit only: its request defaults to it",
            [cpu_node("cpu-a", memory="4Gi")],
            pod(
                pod_resources={"limits": {"memory": "5Gi"}},
                containers=[container("a", requests={"memory": "1Gi"})],
            ),
        ),
        _case(
            "pod-level-with-gpu",
            "pod-level CPU and memory; GPUs stay the containers'",
            [h100(gpus=1, cpu="4")],
            pod(
                pod_resources={"requests": {"cpu": "3", "memory": "2Gi"}},
                containers=[container("a", limits=gpus(2))],
            ),
        ),
        _case("mig-fits", "a MIG device on a MIG node", [a100_mig()], pod(limits=gpus(2, MIG_1G))),
        _case(
            "mig-3g-short",
            "three 3g.40gb asked, two offered",
            [a100_mig()],
            pod(limits=gpus(3, MIG_3G)),
        ),
        _case(
            "mig-both-kinds",
            "one of each MIG profile",
            [a100_mig()],
            pod(
                containers=[
                    container("a", limits=gpus(1, MIG_1G)),
                    container("b", limits=gpus(1, MIG_3G)),
                ]
            ),
        ),
        _case(
            "mig-node-whole-gpu",
            "nvidia.com/gpu asked of a MIG node",
            [a100_mig(), h100()],
            pod(limits=one),
        ),
        _case(
            "mig-on-plain-node",
            "a MIG device asked of a node without MIG",
            [h100(), t4_shared()],
            pod(limits=gpus(1, MIG_1G)),
        ),
        _case(
            "mig-used",
            "MIG devices held by bound pods",
            [a100_mig()],
            pod(limits=gpus(2, MIG_1G)),
            [
                bound("a", "mig-a", limits=gpus(3, MIG_1G)),
                bound("b", "mig-a", limits=gpus(3, MIG_1G)),
            ],
        ),
        _case(
            "mig-single-strategy",
            "mig.strategy=single: MIG devices offered as nvidia.com/gpu",
            [node("mig-s", model="a100", gpus=2, mig_strategy="single", resources={GPU: "14"})],
            pod(limits=gpus(1, MIG_1G)),
        ),
        _case("shared-fits", "a shared GPU replica", [t4_shared()], pod(limits=gpus(1, SHARED))),
        _case(
            "shared-whole-gpu",
            "nvidia.com/gpu asked of a node offering only shared GPUs",
            [t4_shared()],
            pod(limits=one),
        ),
        _case(
            "shared-on-plain-node",
            "nvidia.com/gpu.shared asked of an unshared node",
            [h100()],
            pod(limits=gpus(1, SHARED)),
        ),
        _case(
            "shared-used",
            "every replica held",
            [t4_shared(resources={SHARED: "4"})],
            pod(limits=gpus(1, SHARED)),
            [bound("a", "shared-a", limits=gpus(4, SHARED))],
        ),
        _case(
            "shared-and-plain",
            "both names offered (sharing without rename on some GPUs)",
            [t4_shared(resources={SHARED: "8", GPU: "2"})],
            pod(limits={SHARED: "2", GPU: "1"}),
        ),
        _case(
            "other-extended",
            "a non-NVIDIA extended resource, absent",
            [h100()],
            pod(limits={"example.com/fpga": "1"}),
        ),
        _case(
            "other-extended-offered",
            "a non-NVIDIA extended resource, offered",
            [h100(resources={GPU: "8", "example.com/fpga": "2"})],
            pod(limits={"example.com/fpga": "2"}),
        ),
        _case(
            "ephemeral-storage",
            "ephemeral storage beyond allocatable",
            [h100(resources={GPU: "8", "ephemeral-storage": "10Gi"})],
            pod(requests={"ephemeral-storage": "20Gi"}),
        ),
        _case(
            "capacity-above-allocatable",
            "capacity larger than allocatable: allocatable counts",
            [h100(cpu="3500m", capacity_extra={"cpu": "4"})],
            pod(requests={"cpu": "3800m"}),
        ),
    ]


def _mixed_cases() -> list[SchedulingCase]:
    one = gpus(1)
    dedicated = taint("dedicated", "NoSchedule", "ml")
    return [
        _case(
            "mixed-none-fit",
            "four nodes, each failing another filter",
            [
                h100("gpu-a", taints=[dedicated]),
                h100("gpu-b", unschedulable=True),
                h100("gpu-c", zone="zone-b"),
                h100("gpu-d", gpus=1),
            ],
            pod(limits=gpus(2), node_selector={"topology.kubernetes.io/zone": "zone-a"}),
        ),
        _case(
            "mixed-one-fits",
            "four nodes, one fits",
            [
                h100("gpu-a", taints=[dedicated]),
                h100("gpu-b", unschedulable=True),
                h100("gpu-c", gpus=4),
                h100("gpu-d", gpus=1),
            ],
            pod(limits=gpus(2)),
        ),
        _case(
            "mixed-gpu-kinds",
            "whole GPUs asked of MIG, shared, CPU and busy nodes",
            [a100_mig(), t4_shared(), cpu_node(), h100("gpu-d", gpus=1)],
            pod(limits=one),
            [bound("job", "gpu-d", limits=one)],
        ),
        _case(
            "mixed-health",
            "unhealthy, not ready, cordoned, and one good node",
            [
                h100(
                    "gpu-a",
                    taints=[taint(HEALTH_TAINT, "NoSchedule", "GPULost")],
                    gpu_healthy=("GPULost", "GPU 1 is gone from the bus"),
                ),
                h100("gpu-b", ready="False", taints=[taint(NOT_READY, "NoSchedule")]),
                h100("gpu-c", unschedulable=True, taints=[taint(UNSCHEDULABLE, "NoSchedule")]),
                h100("gpu-d", gpus=2),
            ],
            pod(limits=gpus(2)),
        ),
        _case(
            "mixed-health-none",
            "unhealthy, not ready, cordoned, and one full node",
            [
                h100(
                    "gpu-a",
                    taints=[taint(HEALTH_TAINT, "NoSchedule", "GPULost")],
                    gpu_healthy=("GPULost", "GPU 1 is gone from the bus"),
                ),
                h100("gpu-b", ready="False", taints=[taint(NOT_READY, "NoSchedule")]),
                h100("gpu-c", unschedulable=True, taints=[taint(UNSCHEDULABLE, "NoSchedule")]),
                h100("gpu-d", gpus=2),
            ],
            pod(limits=gpus(2)),
            [bound("job", "gpu-d", limits=one)],
        ),
        _case(
            "mixed-resources-histogram",
            "each node short of something else",
            [
                h100("gpu-a", gpus=1),
                h100("gpu-b", cpu="1"),
                h100("gpu-c", memory="1Gi"),
                h100("gpu-d", pods="1"),
            ],
            pod(limits=gpus(2), requests={"cpu": "2", "memory": "2Gi"}),
            [bound("a", "gpu-d")],
        ),
        _case(
            "mixed-fields-and-taint",
            "matchFields names two nodes; one tainted, one small",
            [h100("gpu-a", taints=[dedicated]), h100("gpu-b", gpus=1), h100("gpu-c")],
            pod(
                limits=gpus(2),
                terms=[
                    term(fields=[name_is("In", "gpu-a")]),
                    term(fields=[name_is("In", "gpu-b")]),
                ],
            ),
        ),
        _case(
            "mixed-two-gpu-models",
            "affinity on GPU memory across models",
            [h100("gpu-a"), node("l40s-b", model="l40s", gpus=4), node("t4-c", model="t4", gpus=1)],
            pod(limits=one, terms=[term(expr("nvidia.com/gpu.memory", "Gt", "40000"))]),
            [bound("job", "gpu-a", limits=gpus(8))],
        ),
    ]


# --- the generator ------------------------------------------------------------------------

_LABEL_VALUES: dict[str, tuple[str, ...]] = {
    "nvidia.com/gpu.product": tuple(m[0] for m in GPU_MODELS.values()),
    "nvidia.com/gpu.memory": ("15360", "40960", "46068", "81559"),
    "nvidia.com/gpu.count": ("1", "2", "4", "8"),
    "nvidia.com/gpu.family": ("hopper", "ampere", "turing", "ada-lovelace"),
    "nvidia.com/cuda.driver.major": ("535", "550", "580"),
    "topology.kubernetes.io/zone": ("zone-a", "zone-b", "zone-c"),
    "example.com/tier": ("gold", "silver", "1.5", "08", "10"),
    "example.com/absent": ("x",),
}
_TAINTS = (
    taint("dedicated", "NoSchedule", "ml"),
    taint("dedicated", "NoExecute", "ml"),
    taint("spot", "PreferNoSchedule", "true"),
    taint(GPU, "NoSchedule", "present"),
    taint(HEALTH_TAINT, "NoSchedule", "XidError"),
    taint(HEALTH_TAINT, "NoExecute", "GPULost"),
    taint("example.com/maintenance", "NoSchedule"),
)
_TOLERATIONS = (
    tol(operator="Exists"),
    tol("dedicated", "Exists"),
    tol("dedicated", "Equal", "ml", "NoSchedule"),
    tol("dedicated", "Equal", "web"),
    tol(GPU, "Exists", effect="NoSchedule"),
    tol(HEALTH_TAINT, "Exists"),
    tol(HEALTH_TAINT, "Equal", "XidError", "NoSchedule"),
    tol(UNSCHEDULABLE, "Exists", effect="NoSchedule"),
    tol(NOT_READY, "Exists"),
    tol("example.com/maintenance", "Exists", effect="NoExecute"),
)
_GPU_NAMES = (GPU, GPU, GPU, MIG_1G, MIG_3G, SHARED)


def _random_node(rng: random.Random, name: str) -> dict[str, Any]:
    kind = rng.choice(("h100", "h100", "a100", "mig", "shared", "l40s", "cpu"))
    kw: dict[str, Any] = {
        "cpu": rng.choice(("4", "8", "16", "32", "7500m")),
        "memory": rng.choice(("16Gi", "32Gi", "64Gi", "128Gi", "30G")),
        "pods": rng.choice(("110", "110", "110", "3", "2")),
        "zone": rng.choice(_LABEL_VALUES["topology.kubernetes.io/zone"]),
        "labels": {},
    }
    if rng.random() < 0.4:
        kw["labels"]["example.com/tier"] = rng.choice(_LABEL_VALUES["example.com/tier"])
    taints: list[dict[str, str]] = []
    if rng.random() < 0.35:
        taints = [dict(t) for t in rng.sample(_TAINTS, rng.choice((1, 1, 2)))]
    if rng.random() < 0.1:
        kw["unschedulable"] = True
        if rng.random() < 0.5:
            taints.append(taint(UNSCHEDULABLE, "NoSchedule"))
    if rng.random() < 0.1:
        kw["ready"] = "False"
        if rng.random() < 0.7:
            taints.append(taint(NOT_READY, "NoSchedule"))
    kw["taints"] = taints
    if any(t["key"] == HEALTH_TAINT for t in taints):
        reason = next(t["value"] for t in taints if t["key"] == HEALTH_TAINT)
        kw["gpu_healthy"] = (reason, f"{reason} on GPU 0")
    if kind == "cpu":
        kw.pop("gpu_healthy", None)
        return cpu_node(name, **kw)
    if kind == "mig":
        return a100_mig(
            name,
            resources={MIG_1G: str(rng.choice((0, 3, 7, 14))), MIG_3G: str(rng.choice((0, 2, 4)))},
            **kw,
        )
    if kind == "shared":
        return t4_shared(name, resources={SHARED: str(rng.choice((4, 10, 40)))}, **kw)
    count = rng.choice((1, 2, 4, 8))
    model = {"h100": "h100", "a100": "a100", "l40s": "l40s"}[kind]
    return node(
        name,
        model=model,
        gpus=count,
        driver=rng.choice(_LABEL_VALUES["nvidia.com/cuda.driver.major"]),
        **kw,
    )


def _random_expression(rng: random.Random) -> dict[str, Any]:
    key = rng.choice(tuple(_LABEL_VALUES))
    operator = rng.choice(("In", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
    values = _LABEL_VALUES[key]
    if operator in ("In", "NotIn"):
        return expr(key, operator, *rng.sample(values, rng.randint(1, min(2, len(values)))))
    if operator in ("Gt", "Lt"):
        return expr(key, operator, rng.choice(("1", "4", "500", "40000", "1.5", "08")))
    return expr(key, operator)


def _random_resources(rng: random.Random, node_names: Sequence[str]) -> dict[str, Any]:
    """A candidate's containers and the rest of what it asks."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if rng.random() < 0.8:
        name = rng.choice(_GPU_NAMES)
        count = str(rng.choice((1, 1, 2, 3, 4, 8)))
        if rng.random() < 0.7:
            limits[name] = count
        else:
            requests[name] = limits[name] = count
    if rng.random() < 0.5:
        requests["cpu"] = rng.choice(("100m", "1", "2", "4", "6500m", "20"))
    if rng.random() < 0.4:
        requests["memory"] = rng.choice(("256Mi", "4Gi", "16Gi", "40Gi", "100Gi"))
    if rng.random() < 0.15 and "cpu" not in requests:
        limits["cpu"] = rng.choice(("1", "8", "40"))
    kw: dict[str, Any] = {"requests": requests or None, "limits": limits or None}
    roll = rng.random()
    if roll < 0.08:
        kw["init"] = [container("setup", limits={GPU: str(rng.choice((2, 4, 8)))})]
    elif roll < 0.14:
        kw["init"] = [
            container("proxy", requests={"cpu": "500m", "memory": "512Mi"}, restart_always=True)
        ]
    elif roll < 0.18:
        kw["runtime_class"] = "kata-gpu"
    elif roll < 0.21:
        # At least what the containers ask (the API server refuses less): they ask none.
        kw["pod_resources"] = {"requests": {"cpu": rng.choice(("2", "12", "40"))}}
        requests.pop("cpu", None)
        limits.pop("cpu", None)
        kw = {**kw, "requests": requests or None, "limits": limits or None}
    return kw


def _random_case(rng: random.Random, number: int) -> SchedulingCase:
    count = rng.choice((1, 2, 2, 3, 3, 4))
    names = [f"n{i}" for i in range(1, count + 1)]
    nodes = [_random_node(rng, name) for name in names]
    bound_pods: list[dict[str, Any]] = []
    for node_obj in nodes:
        name = node_obj["metadata"]["name"]
        allocatable = node_obj["status"]["allocatable"]
        offered = [r for r in allocatable if r.startswith("nvidia.com/")]
        for index in range(rng.choice((0, 0, 1, 1, 2, 3))):
            limits: dict[str, str] = {}
            if offered and rng.random() < 0.8:
                resource = rng.choice(offered)
                limits[resource] = str(rng.choice((1, 1, 2, 4)))
            requests = {"cpu": rng.choice(("500m", "2", "6")), "memory": rng.choice(("1Gi", "8Gi"))}
            bound_pods.append(
                bound(f"{name}-job{index}", name, requests=requests, limits=limits or None)
            )
    kw = _random_resources(rng, names)
    if rng.random() < 0.25:
        key = rng.choice(
            (
                "nvidia.com/gpu.present",
                "topology.kubernetes.io/zone",
                "example.com/tier",
                "nvidia.com/gpu.family",
            )
        )
        value = "true" if key == "nvidia.com/gpu.present" else rng.choice(_LABEL_VALUES[key])
        kw["node_selector"] = {key: value}
    if rng.random() < 0.4:
        terms = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            expressions = [_random_expression(rng) for _ in range(rng.choice((1, 1, 2, 3)))]
            fields = []
            if rng.random() < 0.15:
                fields = [name_is(rng.choice(("In", "NotIn")), rng.choice(names))]
            terms.append(term(*expressions, fields=fields))
        kw["terms"] = terms
    if rng.random() < 0.45:
        kw["tolerations"] = [dict(t) for t in rng.sample(_TOLERATIONS, rng.choice((1, 1, 2, 3)))]
    return _case(
        f"gen-{number:03d}", f"generated (seed {SEED}, draw {number})", nodes, pod(**kw), bound_pods
    )


def generated_cases(count: int = GENERATED, seed: int = SEED) -> list[SchedulingCase]:
    rng = random.Random(seed)
    return [_random_case(rng, number) for number in range(1, count + 1)]


def _refused() -> tuple[RefusedCase, ...]:
    return (
        RefusedCase(
            "refused-negative-label",
            "a node label value starting with '-' (so no node carries a negative number for Gt/Lt)",
            h100("gpu-a", labels={"example.com/offset": "-5"}),
        ),
        RefusedCase(
            "refused-negative-bound",
            "a Gt bound starting with '-'",
            pod(terms=[term(expr("example.com/offset", "Gt", "-1"))]),
        ),
        RefusedCase(
            "refused-plus-label",
            "a node label value starting with '+'",
            h100("gpu-a", labels={"example.com/offset": "+5"}),
        ),
        RefusedCase(
            "refused-gt-two-values",
            "Gt with two values",
            pod(terms=[term(expr("nvidia.com/gpu.count", "Gt", "1", "2"))]),
        ),
        RefusedCase(
            "refused-fields-two-names",
            "matchFields In with two names",
            pod(
                terms=[
                    term(
                        fields=[
                            {"key": "metadata.name", "operator": "In", "values": ["gpu-a", "gpu-b"]}
                        ]
                    )
                ]
            ),
        ),
        RefusedCase(
            "refused-fields-label-key",
            "matchFields on a key other than metadata.name",
            pod(
                terms=[term(fields=[{"key": "metadata.labels", "operator": "In", "values": ["x"]}])]
            ),
        ),
        RefusedCase("refused-no-terms", "required node affinity with no terms", pod(terms=[])),
        RefusedCase(
            "refused-gpu-request-only",
            "an extended resource in requests only",
            pod(requests=gpus(1)),
        ),
        RefusedCase(
            "refused-gpu-request-not-limit",
            "an extended resource whose request differs from its limit",
            pod(requests=gpus(1), limits=gpus(2)),
        ),
        RefusedCase("refused-gpu-fraction", "half a GPU", pod(limits=gpus("500m"))),
        RefusedCase(
            "refused-exists-with-value",
            "a toleration with Exists and a value",
            pod(tolerations=[tol("dedicated", "Exists", "ml")]),
        ),
        RefusedCase(
            "refused-equal-without-key",
            "a toleration with Equal and no key",
            pod(tolerations=[tol(operator="Equal", value="ml")]),
        ),
    )


CASES: tuple[SchedulingCase, ...] = tuple(
    _selector_cases()
    + _taint_cases()
    + _readiness_cases()
    + _resource_cases()
    + _mixed_cases()
    + generated_cases()
)
REFUSED: tuple[RefusedCase, ...] = _refused()


def _check_unique() -> None:
    seen = Counter(c.case_id for c in (*CASES, *REFUSED))
    duplicated = sorted(name for name, n in seen.items() if n > 1)
    if duplicated:
        raise AssertionError(f"case ids used twice: {duplicated}")


_check_unique()


# --- the scheduler's message ------------------------------------------------------------------

_HEAD = re.compile(r"^0/(?P<total>\d+) nodes are available: ")
_COUNTED = re.compile(r"^(?P<count>\d+) (?P<reason>.+)$")


def reason_histogram(message: str) -> dict[str, int]:
    """The scheduler's count of nodes per reason in an ``Unschedulable`` message:
    ``0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient
    nvidia.com/gpu. preemption: ...`` gives ``{"node(s) had untolerated taint(s)": 1,
    "Insufficient nvidia.com/gpu": 2}``. A PreFilter's refusal (no counts: ``0/3 nodes are
    available: pod affinity terms conflict.``) counts for every node, as the scheduler
    applies it to each."""
    head = _HEAD.match(message)
    if head is None:
        raise ValueError(f"not a scheduler's FitError message: {message!r}")
    total = int(head["total"])
    rest = message[head.end() :]
    end = rest.find(". ")
    body = rest[:end] if end >= 0 else rest.removesuffix(".")
    histogram: dict[str, int] = {}
    for part in body.split(", "):
        counted = _COUNTED.match(part)
        if counted is None:
            histogram[part] = histogram.get(part, 0) + total
        else:
            reason = counted["reason"]
            histogram[reason] = histogram.get(reason, 0) + int(counted["count"])
    return histogram


def available_of(message: str) -> int:
    head = _HEAD.match(message)
    if head is None:
        raise ValueError(f"not a scheduler's FitError message: {message!r}")
    return int(head["total"])


# --- running cases on a control plane ------------------------------------------------------

#: What kube-scheduler logs (``--v=4``) as its informers hand it each change.
_EVENT = re.compile(
    r'"(?P<action>Add|Update|Delete) event for (?P<kind>node|scheduled pod|unscheduled pod)" '
    r'(?:node|pod)="(?P<name>[^"]+)"'
)
DECISION_S = 30.0
#: After the log line, the handler updates the cache (the line comes just before).
SETTLE_S = 0.03


class RecordingError(RuntimeError):
    """The server did not do what the runner asked, or the scheduler did not decide."""


class SchedulerLog:
    """The events kube-scheduler has taken in, read from its log as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.seen: Counter[tuple[str, str, str]] = Counter()

    def _read(self) -> None:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            found = _EVENT.search(line.decode("utf-8", "replace"))
            if found:
                self.seen[(found["action"], found["kind"], found["name"])] += 1

    def wait(self, expected: Mapping[tuple[str, str, str], int], timeout: float = 30.0) -> None:
        """Until the scheduler has logged at least ``expected`` of each event."""
        deadline = time.monotonic() + timeout
        while True:
            self._read()
            missing = {k: n for k, n in expected.items() if self.seen[k] < n}
            if not missing:
                time.sleep(SETTLE_S)
                return
            if time.monotonic() > deadline:
                raise RecordingError(
                    f"kube-scheduler did not take in {sorted(missing)} within {timeout:.0f} s "
                    f"(log {self.path})"
                )
            time.sleep(0.005)


def merge_patch(original: Any, changed: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``original`` into ``changed``: mappings
    patched key by key (``None``: the key removed), anything else replaced whole."""
    if not isinstance(original, Mapping) or not isinstance(changed, Mapping):
        return copy.deepcopy(changed)
    patch: dict[str, Any] = {}
    for key in original:
        if key not in changed:
            patch[key] = None
    for key, value in changed.items():
        if key not in original:
            patch[key] = copy.deepcopy(value)
        elif original[key] != value:
            patch[key] = merge_patch(original[key], value)
    return patch


def apply_merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``original`` (neither is changed)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = copy.deepcopy(dict(original)) if isinstance(original, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def stored_spec(case: SchedulingCase, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The candidate's spec as the API server stored it, from a recorded case."""
    return apply_merge_patch(case.pod["spec"], recorded["stored_spec_patch"])


def _key(pod_obj: Mapping[str, Any]) -> str:
    return f"{pod_obj['metadata']['namespace']}/{pod_obj['metadata']['name']}"


def _trimmed_spec(spec: Mapping[str, Any], back: Mapping[str, str]) -> dict[str, Any]:
    """A stored pod's spec with the run's names turned back into the case's."""
    kept = {k: v for k, v in spec.items() if k != "nodeName"}
    return _renamed(kept, back)


def _renamed(value: Any, names: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, Mapping):
        return {k: _renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return value


def _live_pod(pod_obj: Mapping[str, Any], prefix: str, names: Mapping[str, str]) -> dict:
    """``pod_obj`` as this attempt creates it: its own name, node names the run's."""
    live = copy.deepcopy(dict(pod_obj))
    live["metadata"] = {"name": f"{prefix}-{pod_obj['metadata']['name']}", "namespace": NAMESPACE}
    spec = live["spec"]
    if "nodeName" in spec:
        spec["nodeName"] = names[spec["nodeName"]]
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    preferred = [
        p.get("preference") or {}
        for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ]
    for selector_term in [*(required.get("nodeSelectorTerms") or []), *preferred]:
        for entry in selector_term.get("matchFields") or []:
            entry["values"] = [names.get(v, v) for v in entry.get("values") or []]
    return live


@dataclass
class Outcome:
    """What the scheduler did with one attempt's candidate."""

    scheduled_to: str | None
    message: str | None
    stored_spec: dict[str, Any] = field(default_factory=dict)


class CaseRunner:
    """Runs cases against a control plane whose kube-scheduler logs at ``--v=4``."""

    def __init__(self, admin: Any, scheduler_log: Path) -> None:
        self.admin = admin
        self.log = SchedulerLog(scheduler_log)
        self.run_id = uuid.uuid4().hex[:6]
        self.attempt = 0

    def prepare(self) -> None:
        """The namespace, its ``default`` ServiceAccount (no controller makes it here),
        and the RuntimeClasses."""
        self.admin.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            ok=(409,),
        )
        self.admin.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            ok=(409,),
        )
        for runtime_class in RUNTIME_CLASSES:
            self.admin.request(
                "POST", "/apis/node.k8s.io/v1/runtimeclasses", runtime_class, ok=(409,)
            )

    # One attempt: these nodes (of the case) alone, with their bound pods, and the candidate.

    def attempt_on(self, case: SchedulingCase, node_names: Sequence[str]) -> Outcome:
        self.attempt += 1
        prefix = f"r{self.run_id}-{self.attempt:04d}"
        names = {name: f"{prefix}-{name}" for name in case.node_names}
        back = {live: name for name, live in names.items()}
        expected: Counter[tuple[str, str, str]] = Counter()
        created_nodes: list[str] = []
        #: Each pod made, and whether the scheduler has it as bound (scheduled).
        created_pods: dict[str, bool] = {}
        try:
            for node_obj in case.nodes:
                if node_obj["metadata"]["name"] in node_names:
                    live = names[node_obj["metadata"]["name"]]
                    expected.update(self._create_node(node_obj, live))
                    created_nodes.append(live)
            for bound_pod in case.bound:
                if bound_pod["spec"]["nodeName"] in node_names:
                    live_pod = _live_pod(bound_pod, prefix, names)
                    self._create_pod(live_pod)
                    created_pods[live_pod["metadata"]["name"]] = True
                    expected[("Add", "scheduled pod", _key(live_pod))] += 1
            self.log.wait(expected)
            candidate = _live_pod(case.pod, prefix, names)
            stored = self._create_pod(candidate)
            created_pods[candidate["metadata"]["name"]] = False
            scheduled_to, message = self._decision(candidate["metadata"]["name"])
            created_pods[candidate["metadata"]["name"]] = scheduled_to is not None
            return Outcome(
                scheduled_to=back.get(scheduled_to, scheduled_to) if scheduled_to else None,
                message=message,
                stored_spec=_trimmed_spec(stored["spec"], back),
            )
        finally:
            self._remove(created_pods, created_nodes)

    def _create_node(self, node_obj: Mapping[str, Any], live: str) -> Counter:
        """POST the node, then set its taints as the case has them (admission adds
        ``node.kubernetes.io/not-ready:NoSchedule`` to every new Node), then its status
        through the status subresource. Returns the scheduler events it makes."""
        events: Counter[tuple[str, str, str]] = Counter({("Add", "node", live): 1})
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": live, "labels": node_obj["metadata"]["labels"]},
            "spec": node_obj["spec"],
        }
        _, created = self.admin.request("POST", "/api/v1/nodes", body)
        version = created["metadata"]["resourceVersion"]
        want_taints = node_obj["spec"].get("taints") or []
        if (created["spec"].get("taints") or []) != want_taints:
            _, changed = self.admin.request(
                "PATCH",
                f"/api/v1/nodes/{live}",
                {"spec": {"taints": want_taints or None}},
                content_type="application/merge-patch+json",
            )
            if changed["metadata"]["resourceVersion"] != version:
                events[("Update", "node", live)] += 1
                version = changed["metadata"]["resourceVersion"]
        _, changed = self.admin.request(
            "PATCH",
            f"/api/v1/nodes/{live}/status",
            {"status": node_obj["status"]},
            content_type="application/merge-patch+json",
        )
        if changed["metadata"]["resourceVersion"] != version:
            events[("Update", "node", live)] += 1
        self._check_node(node_obj, changed)
        return events

    @staticmethod
    def _check_node(node_obj: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
        """The server holds the node the case describes (nothing added or dropped)."""
        name = node_obj["metadata"]["name"]
        pairs = (
            ("labels", node_obj["metadata"]["labels"], stored["metadata"].get("labels") or {}),
            ("taints", node_obj["spec"].get("taints") or [], stored["spec"].get("taints") or []),
            (
                "unschedulable",
                bool(node_obj["spec"].get("unschedulable")),
                bool(stored["spec"].get("unschedulable")),
            ),
            ("allocatable", node_obj["status"]["allocatable"], stored["status"]["allocatable"]),
            ("capacity", node_obj["status"]["capacity"], stored["status"]["capacity"]),
            (
                "conditions",
                [(c["type"], c["status"], c["reason"]) for c in node_obj["status"]["conditions"]],
                [(c["type"], c["status"], c.get("reason")) for c in stored["status"]["conditions"]],
            ),
        )
        for what, wanted, held in pairs:
            if wanted != held:
                raise RecordingError(
                    f"node {name}: the server holds {what} {held!r}, not {wanted!r}"
                )

    def _create_pod(self, live_pod: Mapping[str, Any]) -> dict[str, Any]:
        _, stored = self.admin.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", live_pod)
        return stored

    def _decision(self, name: str) -> tuple[str | None, str | None]:
        deadline = time.monotonic() + DECISION_S
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"
        while time.monotonic() < deadline:
            current = self.admin.get(path)
            node_name = current["spec"].get("nodeName")
            if node_name:
                return node_name, None
            for condition in (current.get("status") or {}).get("conditions") or []:
                if (
                    condition.get("type") == "PodScheduled"
                    and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"
                ):
                    return None, str(condition.get("message", ""))
            time.sleep(0.01)
        raise RecordingError(f"kube-scheduler decided nothing on pod {name} in {DECISION_S:.0f} s")

    def _remove(self, pods: Mapping[str, bool], nodes: Sequence[str]) -> None:
        """Delete what the attempt made, and wait until the scheduler has let it go (an
        unschedulable candidate left in its queue would be tried on the next attempt's
        nodes; a node left in its cache would be one of them)."""
        expected: Counter[tuple[str, str, str]] = Counter()
        for name, scheduled in pods.items():
            status, _ = self.admin.request(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                {"gracePeriodSeconds": 0},
                ok=(404,),
            )
            if status != 404:
                kind = "scheduled pod" if scheduled else "unscheduled pod"
                expected[("Delete", kind, f"{NAMESPACE}/{name}")] += 1
        for name in nodes:
            status, _ = self.admin.request("DELETE", f"/api/v1/nodes/{name}", ok=(404,))
            if status != 404:
                expected[("Delete", "node", name)] += 1
        self.log.wait(expected)

    def refusal(self, case: RefusedCase) -> dict[str, Any]:
        """Create the refused object; what the server answered (it must refuse)."""
        self.attempt += 1
        obj = copy.deepcopy(case.obj)
        name = f"r{self.run_id}-{self.attempt:04d}-{obj['metadata']['name']}"
        obj["metadata"]["name"] = name
        if obj["kind"] == "Node":
            path, where = "/api/v1/nodes", f"/api/v1/nodes/{name}"
        else:
            path = f"/api/v1/namespaces/{NAMESPACE}/pods"
            where = f"{path}/{name}"
        status, answer = self.admin.request("POST", path, obj, ok=tuple(range(400, 500)))
        if status < 400:
            self.admin.request("DELETE", where, {"gracePeriodSeconds": 0}, ok=(404,))
            raise RecordingError(f"{case.case_id}: the server accepted it ({status})")
        message = str(answer.get("message", "")) if isinstance(answer, Mapping) else str(answer)
        return {
            "status": status,
            "reason": answer.get("reason") if isinstance(answer, Mapping) else None,
            "message": message.replace(name, obj["kind"].lower()),
        }

    # The case: each node alone, then all together.

    def run_case(self, case: SchedulingCase) -> dict[str, Any]:
        per_node: dict[str, dict[str, Any]] = {}
        stored: dict[str, Any] | None = None
        for name in case.node_names:
            outcome = self.attempt_on(case, [name])
            if outcome.scheduled_to not in (None, name):
                raise RecordingError(
                    f"{case.case_id}: bound to {outcome.scheduled_to}, which was not in the cluster"
                )
            if outcome.message is not None and available_of(outcome.message) != 1:
                raise RecordingError(
                    f"{case.case_id}: the scheduler saw another node count: {outcome.message}"
                )
            per_node[name] = {"fits": outcome.scheduled_to == name, "message": outcome.message}
            if stored is None:
                stored = outcome.stored_spec
            elif stored != outcome.stored_spec:
                raise RecordingError(
                    f"{case.case_id}: the server stored the pod differently between attempts"
                )
        if len(case.nodes) == 1:
            only = case.node_names[0]
            together = {
                "scheduled_to": only if per_node[only]["fits"] else None,
                "message": per_node[only]["message"],
            }
        else:
            outcome = self.attempt_on(case, case.node_names)
            if outcome.message is not None and available_of(outcome.message) != len(case.nodes):
                raise RecordingError(
                    f"{case.case_id}: the scheduler saw another node count: {outcome.message}"
                )
            together = {"scheduled_to": outcome.scheduled_to, "message": outcome.message}
        assert stored is not None
        patch = merge_patch(case.pod["spec"], stored)
        if apply_merge_patch(case.pod["spec"], patch) != stored:
            raise RecordingError(f"{case.case_id}: the stored spec is no merge patch away")
        return {
            "inputs_sha256": case.inputs_hash,
            "about": case.about,
            "inputs": case.inputs(),
            "stored_spec_patch": patch,
            "per_node": per_node,
            "together": together,
        }


def scheduler_version(assets: Path) -> str:
    done = subprocess.run(
        [str(assets / "kube-scheduler"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip()


def record(
    assets: Path, built: str, target: Path, *, progress: Callable[[str], None] = print
) -> Record:
    """Run every case on a fresh control plane and write the record to ``target``."""
    from tests.controlplane import ControlPlane

    workdir = Path(tempfile.mkdtemp(prefix="gfd-scheduler-record-"))
    plane = ControlPlane(assets, workdir)
    started = time.monotonic()
    try:
        plane.start()
        plane.start_scheduler(verbosity=4)
        runner = CaseRunner(plane.admin, plane.scheduler_log)
        runner.prepare()
        cases: dict[str, dict[str, Any]] = {}
        for number, case in enumerate(CASES, 1):
            cases[case.case_id] = runner.run_case(case)
            if number % 20 == 0:
                progress(f"{number}/{len(CASES)} cases, {time.monotonic() - started:.0f} s")
        for refused in REFUSED:
            cases[refused.case_id] = {
                "inputs_sha256": refused.inputs_hash,
                "about": refused.about,
                "inputs": refused.inputs(),
                "refused": runner.refusal(refused),
            }
        elapsed = time.monotonic() - started
        server = plane.admin.get("/version")
        result = Record(
            program="kube-scheduler",
            version=server["gitVersion"],
            recorded=today(),
            cases=cases,
            notes={
                "built": built,
                "kube-scheduler --version": scheduler_version(assets),
                "kube-apiserver /version": {
                    k: server.get(k) for k in ("gitVersion", "gitCommit", "goVersion", "platform")
                },
                "how": (
                    "tests/records/scheduler_cases.py on a control plane of tests/controlplane.py "
                    "(etcd, kube-apiserver with its default admission plugins, kube-scheduler "
                    "with its default profile, --v=4): per case, each node alone (that node "
                    "and the pods bound to it), then all the case's nodes together where "
                    "there are several (one node: together is the alone run). Each node is "
                    "POSTed, its taints set to the case's (admission adds the not-ready "
                    "taint), its status set through /status; the scheduler's log says it "
                    "has every node and bound pod before the candidate is created. Verdict: "
                    "spec.nodeName set, or PodScheduled=False, reason Unschedulable, with "
                    "its message. stored_spec_patch: what the server made of the candidate's "
                    "spec (defaults, admission's tolerations, a RuntimeClass's overhead), as "
                    "a JSON merge patch (RFC 7386) of the submitted spec: "
                    "scheduler_cases.stored_spec applies it."
                ),
                "attempts": runner.attempt,
                "seconds": round(elapsed),
                "generator": {"seed": SEED, "cases": GENERATED},
            },
        )
        write_record(target, result, case_per_line=True)
        return result
    except Exception:
        progress(plane.describe_failure())
        raise
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record",
        action="store_true",
        help="run every case on kube-scheduler and rewrite the record",
    )
    parser.add_argument(
        "--built",
        default="",
        help="with --record: what was run (the source commit, Go, etcd), kept "
        "as the record's provenance",
    )
    parser.add_argument(
        "--to",
        type=Path,
        default=RECORD,
        help="with --record: where to write (default: the record itself)",
    )
    args = parser.parse_args()
    if not args.record:
        for case in CASES:
            print(f"{case.case_id}: {case.about}")
        print(f"{len(CASES)} cases, {len(REFUSED)} refused inputs")
        return 0
    if not args.built:
        parser.error("--record needs --built: the record must say what build it captured")
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not assets or not (Path(assets) / "kube-scheduler").is_file():
        parser.error(
            "KUBEBUILDER_ASSETS must name a folder with kube-apiserver, etcd and kube-scheduler"
        )
    done = record(
        Path(assets),
        args.built,
        args.to,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(f"recorded {len(done.cases)} cases in {done.notes['seconds']} s to {args.to}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
