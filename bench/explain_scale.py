"""``gfd explain --pod`` at scale: 5,000 Nodes and 20,000 bound Pods on a real API server.

Issue 42, part 5 ("Scale"). A real control plane (``tests/controlplane.py``: etcd and
kube-apiserver from ``KUBEBUILDER_ASSETS``) is filled with ``--nodes`` Nodes and
``--pods`` Pods, then two commands read the same objects, each a child process of a small
launcher, in alternating rounds:

* kubectl: ``kubectl --kubeconfig ADMIN get nodes,pods -A -o json > /dev/null``, what a
  person would run to look at the cluster (and what ``--cluster-file`` saves);
* gfd: ``gfd explain --pod NS/NAME --kubeconfig ADMIN --format json > /dev/null``, which
  reads the pod, every Node, the bound and unfinished Pods (a page of 500 at a time) and
  the DRA driver's ResourceSlices, and judges the pod against every node.

Measured per run: wall time (monotonic, spawn to ``wait4``), CPU time and peak RSS
(``ru_maxrss`` from ``os.wait4``). The launcher is a bare interpreter, so a child's peak
is its own, not this process's (``bench/_launcher.py`` says why). Reported: medians over
``--rounds`` rounds and the ratios gfd / kubectl. **Goals: gfd's wall time at most 1.5x
kubectl's, its peak RSS at most 1.5x kubectl's.**

Also reported: how long populating took; gfd's output checked once (one explanation, a
verdict for every GPU node, the non-GPU nodes left out) and its exit status; and where each
run's time went, from the API server's audit log (every request with the times the server
received and answered it): start-up before the first request, each resource's list, and
the time after the last answer (judging and writing, for gfd; printing, for kubectl).

The objects: Nodes labelled as gfd labels a DGX H100, a DGX A100 and an HGX H200 (the
labels of ``gfd --simulate PROFILE labels``, about 35 ``nvidia.com/*`` each) plus the
usual ``kubernetes.io`` ones, with capacity, allocatable (cpu, memory, pods,
``nvidia.com/gpu``), conditions (Ready; ``GPUHealthy`` on GPU nodes), addresses, node info
and images set through the status subresource, then the ``not-ready`` taint the API
server puts on a new Node lifted (no node lifecycle controller runs); a share of them
without GPUs, a few tainted by gfd's health taint or cordoned. Pods with ``spec.nodeName`` set (bound directly, no
scheduler), a container with requests and limits (``nvidia.com/gpu`` on some of those on GPU
nodes), and a Running status set through the status subresource. The pod explained is not
bound and asks for 4 H100 GPUs with CUDA 12.8. No controller runs, so each namespace gets
its ``default`` ServiceAccount from here (the ServiceAccount admission plugin requires it).

Results go to ``bench/results/explain_scale.json``.
Run: ``python bench/explain_scale.py [--nodes 5000] [--pods 20000] [--rounds 3]``
(needs ``KUBEBUILDER_ASSETS``: a folder with builds of kube-apiserver and etcd).

Then, on the same cluster, ``gfd fleet --kubeconfig ADMIN --format json`` beside
``kubectl --kubeconfig ADMIN get nodes -o json`` (issue 43: the same goals, 1.5x).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # The control plane lives in the test tree, which is not an installed package.
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "explain_scale.json"
GOAL_RATIO = 1.5
#: The bundled profiles whose labels the GPU nodes carry, with their share of GPU nodes.
GPU_PROFILES = (("dgx-h100", 0.5), ("dgx-a100", 0.3), ("hgx-h200", 0.2))
EXPLAINED_NAMESPACE = "ml"
EXPLAINED_POD = "finetune-0"
H100 = "NVIDIA-H100-80GB-HBM3"

#: Runs each measured command; one JSON line in (argv, stdout and stderr paths), one out.
#: A bare interpreter (``-S``): a child's ``ru_maxrss`` counts what the process that
#: spawned it held, and this benchmark holds far more than the launcher.
_LAUNCHER = """
import json, os, sys, time
for line in sys.stdin:
    job = json.loads(line)
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    epoch = time.time()
    started = time.monotonic()
    pid = os.posix_spawn(job["argv"][0], job["argv"], os.environ, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    print(json.dumps({
        "epoch_start": epoch,
        "wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "peak_rss_kib": usage.ru_maxrss,
        "exit_status": os.waitstatus_to_exitcode(status),
    }), flush=True)
"""


class Launcher:
    """The small process that spawns and waits for each measured command."""

    def __init__(self, env: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-S", "-c", _LAUNCHER],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, argv: list[str], stdout: str, stderr: str) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        job = {"argv": argv, "stdout": stdout, "stderr": stderr}
        self._process.stdin.write(json.dumps(job) + "\n")
        self._process.stdin.flush()
        result: dict[str, Any] = json.loads(self._process.stdout.readline())
        return result

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=10)


# --------------------------------------------------------------------------- #
# The objects


def profile_labels(gfd: Path, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """gfd's labels for each profile of :data:`GPU_PROFILES` (``gfd --simulate P labels``)."""
    found = {}
    for profile, _ in GPU_PROFILES:
        done = subprocess.run(
            [str(gfd), "--simulate", profile, "labels"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(
                f"explain_scale.py: gfd --simulate {profile} labels failed: "
                f"{done.stderr.strip()[-300:]}"
            )
        labels = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        labels["nvidia.com/gfd.timestamp"] = "1767225600"
        found[profile] = labels
    return found


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def node_kind(index: int, nodes: int, gpu_share: float) -> str | None:
    """The profile of node ``index``, or None for a node without GPUs. GPU nodes and the
    others are interleaved, and so are the profiles."""
    gpu_nodes = int(nodes * gpu_share)
    # Spread the GPU nodes evenly over the indices.
    if (index * gpu_nodes) // nodes == ((index + 1) * gpu_nodes) // nodes:
        return None
    position = (index * 0.6180339887) % 1.0  # a fixed, well mixed fraction
    acc = 0.0
    for profile, share in GPU_PROFILES:
        acc += share
        if position < acc:
            return profile
    return GPU_PROFILES[-1][0]


def node_objects(
    index: int, profile: str | None, labels: dict[str, dict[str, str]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Node ``index``: the object to create, and its status (the status subresource)."""
    name = node_name(index)
    zone = f"zone-{'abc'[index % 3]}"
    node_labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": profile or "cpu-64",
        "topology.kubernetes.io/region": "region-1",
        "topology.kubernetes.io/zone": zone,
    }
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    taints: list[dict[str, str]] = []
    spec: dict[str, Any] = {
        "podCIDR": f"10.{64 + index // 256}.{index % 256}.0/24",
        "podCIDRs": [f"10.{64 + index // 256}.{index % 256}.0/24"],
        "providerID": f"bench://{zone}/{name}",
    }
    gpus = 0
    healthy = True
    if profile is not None:
        gpu_labels = labels[profile]
        node_labels.update(gpu_labels)
        annotations["nvidia.com/gfd.labels"] = ",".join(sorted(gpu_labels))
        gpus = int(gpu_labels.get("nvidia.com/gpu.count", "0"))
        if index % 53 == 7:  # a few nodes gfd found unhealthy and tainted
            healthy = False
            taints.append(
                {"key": "nvidia.com/gpu.health", "value": "XidCritical", "effect": "NoSchedule"}
            )
    if index % 97 == 11:  # a few cordoned nodes
        spec["unschedulable"] = True
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    if taints:
        spec["taints"] = taints
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": annotations},
        "spec": spec,
    }
    cpu, memory = ("224", "2113470840Ki") if gpus else ("64", "263842484Ki")
    capacity = {
        "cpu": cpu,
        "memory": memory,
        "pods": "110",
        "ephemeral-storage": "3750157308Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    allocatable = dict(capacity, cpu=str(int(cpu) - 2), **{"ephemeral-storage": "3456117017091"})
    if gpus:
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpus)
    since = "2026-01-01T00:00:00Z"
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": f"KubeletHas{reason}",
            "message": message,
            "lastHeartbeatTime": since,
            "lastTransitionTime": since,
        }
        for kind, reason, message in (
            ("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": since,
            "lastTransitionTime": since,
        }
    )
    if gpus:
        conditions.append(
            {
                "type": "GPUHealthy",
                "status": "True" if healthy else "False",
                "reason": "GPUsHealthy" if healthy else "XidCritical",
                "message": "every check passed"
                if healthy
                else "GPU 3 (0000:61:00.0): Xid 79 (GPU has fallen off the bus)",
                "lastHeartbeatTime": since,
                "lastTransitionTime": since,
            }
        )
    ip = f"10.0.{index // 256}.{index % 256}"
    images = [
        {
            "names": [
                f"registry.example/{image}@sha256:{(index * 7 + n) % 10**8:064d}",
                f"registry.example/{image}:v1.{n}",
            ],
            "sizeBytes": 10_000_000 * (n + 1),
        }
        for n, image in enumerate(
            ("pause", "kube-proxy", "coredns", "node-exporter", "fluent-bit", "cni-plugin")
            + (
                (
                    "nvidia/gpu-feature-discovery",
                    "nvidia/k8s-device-plugin",
                    "nvidia/dcgm-exporter",
                    "nvidia/cuda",
                )
                if gpus
                else ()
            )
        )
    ]
    status = {
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"{index:08x}-0000-4000-8000-000000000000",
                "bootID": f"{index:08x}-1111-4000-8000-000000000000",
                "kernelVersion": "6.8.0-60-generic",
                "osImage": "Ubuntu 24.04.2 LTS",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kubeletVersion": "v1.36.2",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        }
    }
    return node, status


def pod_objects(
    index: int, nodes: int, namespaces: int, profiles: list[str | None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pod ``index``, bound to a node: the object to create, and its Running status."""
    node_index = index % nodes
    slot = index // nodes  # this pod's place among its node's pods
    namespace = f"team-{index % namespaces:02d}"
    name = f"worker-{index:05d}"
    gpu_node = profiles[node_index] is not None
    limits: dict[str, str] = {"cpu": "4", "memory": "16Gi"}
    if gpu_node:
        if node_index % 10 == 0:
            limits["nvidia.com/gpu"] = "2"  # these nodes' 8 GPUs all held (4 pods)
        elif slot < 2:
            limits["nvidia.com/gpu"] = "1"
    container = {
        "name": "main",
        "image": "registry.example/team/app:1.4.2",
        "command": ["/app/server"],
        "args": ["--port=8080", f"--shard={index % 64}"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "LOG_LEVEL", "value": "info"},
        ],
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": limits},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": f"app-{index % 200}", "team": namespace, "tier": "backend"},
        },
        "spec": {"nodeName": node_name(node_index), "containers": [container]},
    }
    started = "2026-01-01T00:05:00Z"
    host = f"10.0.{node_index // 256}.{node_index % 256}"
    ip = f"10.{64 + node_index // 256}.{node_index % 256}.{10 + slot}"
    status = {
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": started,
                }
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "hostIP": host,
            "hostIPs": [{"ip": host}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": started,
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": "registry.example/team/app:1.4.2",
                    "imageID": "registry.example/team/app@sha256:" + "ab" * 32,
                    "containerID": f"containerd://{index:064x}",
                    "state": {"running": {"startedAt": started}},
                }
            ],
        }
    }
    return pod, status


def explained_pod() -> dict[str, Any]:
    """The pod ``gfd explain`` is asked about: not bound, 4 H100 GPUs, CUDA 12.8."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": EXPLAINED_POD, "namespace": EXPLAINED_NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"nvidia.com/gpu.product": H100},
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example/finetune:1.4",
                    "env": [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.8"}],
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }


# --------------------------------------------------------------------------- #
# Populating


class Writer:
    """Requests as cluster-admin over one kept-alive TLS connection per thread (the
    control plane's admin client opens a connection per request, a TLS handshake each,
    which at 50,000 requests would cost more than the writes)."""

    def __init__(self, url: str, ca: Path, cert: Path, key: Path) -> None:
        host_port = url.removeprefix("https://")
        self._host, port = host_port.rsplit(":", 1)
        self._port = int(port)
        self._context = ssl.create_default_context(cafile=str(ca))
        self._context.load_cert_chain(str(cert), str(key))
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=120
            )
            self._local.connection = connection
        return connection

    def request(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (),
    ) -> int:
        data = json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in range(8):
            try:
                connection = self._connection()
                connection.request(method, path, body=data, headers=headers)
                reply = connection.getresponse()
                raw = reply.read()
            except (OSError, http.client.HTTPException):
                self._local.connection = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if 200 <= reply.status < 300 or reply.status in ok:
                return reply.status
            if reply.status in (429, 500, 503, 504):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise RuntimeError(f"{method} {path}: HTTP {reply.status}: {raw[:400]!r}")
        raise RuntimeError(f"{method} {path}: gave up after 8 tries")


def populate(
    writer: Writer, args: argparse.Namespace, labels: dict[str, dict[str, str]]
) -> tuple[dict[str, Any], list[str | None]]:
    """Create the namespaces, Nodes and Pods; return the timings and each node's profile."""
    merge = "application/merge-patch+json"
    namespaces = [f"team-{n:02d}" for n in range(args.namespaces)] + [EXPLAINED_NAMESPACE]
    profiles = [node_kind(i, args.nodes, args.gpu_share) for i in range(args.nodes)]
    timings: dict[str, Any] = {"workers": args.workers}

    def create_namespace(name: str) -> None:
        writer.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            ok=(409,),
        )
        writer.request(
            "POST",
            f"/api/v1/namespaces/{name}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            ok=(409,),
        )

    def create_node(index: int) -> None:
        node, status = node_objects(index, profiles[index], labels)
        writer.request("POST", "/api/v1/nodes", node, ok=(409,))
        writer.request("PATCH", f"/api/v1/nodes/{node_name(index)}/status", status, merge)
        # The API server taints a new Node not-ready (TaintNodesByCondition); the node
        # lifecycle controller, which is not running here, would lift it once Ready.
        taints = node["spec"].get("taints")
        writer.request(
            "PATCH", f"/api/v1/nodes/{node_name(index)}", {"spec": {"taints": taints}}, merge
        )

    def create_pod(index: int) -> None:
        pod, status = pod_objects(index, args.nodes, args.namespaces, profiles)
        where = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
        writer.request("POST", where, pod, ok=(409,))
        if args.pod_status:
            writer.request("PATCH", f"{where}/{pod['metadata']['name']}/status", status, merge)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        for phase, function, items in (
            ("namespaces", create_namespace, namespaces),
            ("nodes", create_node, range(args.nodes)),
            ("pods", create_pod, range(args.pods)),
        ):
            phase_started = time.monotonic()
            for _ in pool.map(function, items):
                pass
            timings[f"{phase}_s"] = round(time.monotonic() - phase_started, 1)
            print(f"populated {phase}: {len(items)} in {timings[f'{phase}_s']} s", flush=True)
    writer.request("POST", f"/api/v1/namespaces/{EXPLAINED_NAMESPACE}/pods", explained_pod())
    timings["total_s"] = round(time.monotonic() - started, 1)
    timings["requests"] = (
        2 * len(namespaces) + 3 * args.nodes + (2 if args.pod_status else 1) * args.pods + 1
    )
    timings["requests_per_s"] = round(timings["requests"] / timings["total_s"], 1)
    timings["objects_per_s"] = round(
        (args.nodes + args.pods + 2 * len(namespaces)) / timings["total_s"], 1
    )
    return timings, profiles


# --------------------------------------------------------------------------- #
# Measuring


def audit_phases(audit: Path, since: int, run: dict[str, Any], agent: str) -> dict[str, Any]:
    """Where one run's time went, from the audit log events written after ``since`` by
    a client whose user agent starts with ``agent`` (the API server's own are left out):
    seconds from the start to the first request, each resource's span (first received to
    last answered), and from the last answer to the exit."""
    with audit.open("rb") as handle:
        handle.seek(since)
        events = [json.loads(line) for line in handle.read().splitlines() if line.strip()]
    start = run["epoch_start"]
    end = start + run["wall_s"]

    def when(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    spans: dict[str, list[float]] = {}
    count: Counter[str] = Counter()
    for event in events:
        if not str(event.get("userAgent", "")).startswith(agent):
            continue
        received = when(event["requestReceivedTimestamp"])
        answered = when(event["stageTimestamp"])
        if not start - 1 <= received <= end + 1:
            continue
        ref = event.get("objectRef") or {}
        what = ref.get("resource") or ("discovery" if "/api" in event["requestURI"] else "other")
        if ref.get("name") and event["verb"] == "get":
            what = f"{what} (get one)"
        count[what] += 1
        span = spans.setdefault(what, [received, answered])
        span[0], span[1] = min(span[0], received), max(span[1], answered)
    if not spans:
        return {"requests": 0}
    first = min(s[0] for s in spans.values())
    last = max(s[1] for s in spans.values())
    return {
        "requests": sum(count.values()),
        "requests_by_resource": dict(count),
        "start_to_first_request_s": round(first - start, 3),
        "span_by_resource_s": {k: round(v[1] - v[0], 3) for k, v in spans.items()},
        "last_answer_to_exit_s": round(end - last, 3),
    }


def measure(
    launcher: Launcher,
    argv: list[str],
    workdir: Path,
    label: str,
    audit: Path,
    stdout: str = os.devnull,
) -> dict[str, Any]:
    stderr = workdir / f"{label}.stderr"
    since = audit.stat().st_size
    result = launcher.run(argv, stdout, str(stderr))
    result["peak_rss_mib"] = round(result.pop("peak_rss_kib") / 1024, 1)
    result["wall_s"] = round(result["wall_s"], 3)
    result["cpu_s"] = round(result.pop("user_s") + result.pop("sys_s"), 3)
    result["phases"] = audit_phases(audit, since, result, agent=Path(argv[0]).name)
    del result["epoch_start"]
    text = stderr.read_text(encoding="utf-8", errors="replace").strip()
    if text:
        result["stderr_tail"] = text[-400:]
    return result


def gpus_held(args: argparse.Namespace, profiles: list[str | None]) -> tuple[Counter[int], int]:
    """The GPUs the bound pods hold, per node index, and how many pods hold some."""
    held: Counter[int] = Counter()
    holders = 0
    for index in range(args.pods):
        pod, _ = pod_objects(index, args.nodes, args.namespaces, profiles)
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        if "nvidia.com/gpu" in limits:
            held[index % args.nodes] += int(limits["nvidia.com/gpu"])
            holders += 1
    return held, holders


def check_gfd_output(path: Path, profiles: list[str | None], held: Counter[int]) -> dict[str, Any]:
    """gfd's JSON: one explanation, with a verdict for each GPU node and no other, and
    the H100 nodes with 4 GPUs free, neither tainted nor cordoned, the ones that fit."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"ok": False, "problem": f"not JSON: {exc}"}
    gpu_nodes = {node_name(i) for i, p in enumerate(profiles) if p is not None}
    if not isinstance(document, list) or len(document) != 1:
        return {
            "ok": False,
            "problem": f"expected a list of one explanation, got {document!r:.200}",
        }
    explanation = document[0]
    judged = {n["name"] for n in explanation.get("nodes", []) if n.get("gpuNode")}
    fits = sorted(n["name"] for n in explanation["nodes"] if n.get("fits"))
    runs = [n["name"] for n in explanation["nodes"] if n.get("runs")]
    h100_free = sorted(
        node_name(i)
        for i, p in enumerate(profiles)
        if p == "dgx-h100" and 8 - held[i] >= 4 and i % 53 != 7 and i % 97 != 11
    )
    problems = []
    if judged != gpu_nodes:
        problems.append(f"GPU nodes judged {len(judged)}, created {len(gpu_nodes)}")
    if len(explanation["nodes"]) != len(gpu_nodes):
        problems.append(f"{len(explanation['nodes'])} verdicts for {len(gpu_nodes)} GPU nodes")
    if fits != h100_free:
        problems.append(
            f"{len(fits)} nodes fit, expected the {len(h100_free)} H100 nodes with "
            "4 free GPUs, untainted and not cordoned"
        )
    return {
        "ok": not problems,
        "problems": problems,
        "pod": f"{explanation.get('namespace')}/{explanation.get('name')}",
        "requests": explanation.get("requests"),
        "verdicts": len(explanation["nodes"]),
        "gpu_nodes": len(gpu_nodes),
        "nodes_left_out": explanation.get("nodesLeftOut"),
        "fit": len(fits),
        "would_start": len(runs),
        "summary": str(explanation.get("summary", ""))[:600],
    }


def machine_description() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo", encoding="utf-8") as meminfo:
        total_kib = int(meminfo.readline().split()[1])
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(total_kib / 2**20, 1),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "note": "a shared VM: other sessions' work may run beside the benchmark; etcd, "
        "kube-apiserver, kubectl and gfd share its cores",
    }


def etcd_version(binary: Path) -> str:
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def side_by_side(
    launcher: Launcher,
    commands: dict[str, list[str]],
    workdir: Path,
    audit: Path,
    rounds: int,
    prefix: str,
) -> dict[str, Any]:
    """``rounds`` rounds of kubectl's and gfd's ``commands``, alternating which goes first so
    that a drift in the machine's load hits both: the rounds, each one's medians, gfd's over
    kubectl's, and whether the goals are met, as the report keeps them. ``prefix`` names
    the runs in the audit log and the progress lines."""
    done: list[dict[str, Any]] = []
    for number in range(rounds):
        order = ("kubectl", "gfd") if number % 2 == 0 else ("gfd", "kubectl")
        row: dict[str, Any] = {"order": list(order)}
        for name in order:
            row[name] = measure(
                launcher, commands[name], workdir, f"{prefix}{name}-{number}", audit
            )
        done.append(row)
        print(
            f"{prefix}round {number + 1}: "
            + ", ".join(
                f"{n} {row[n]['wall_s']} s {row[n]['peak_rss_mib']} MiB "
                f"(exit {row[n]['exit_status']})"
                for n in ("kubectl", "gfd")
            ),
            flush=True,
        )
    medians = {
        name: {
            key: median([r[name][key] for r in done]) for key in ("wall_s", "cpu_s", "peak_rss_mib")
        }
        for name in ("kubectl", "gfd")
    }
    ratios = {
        key: round(medians["gfd"][key] / medians["kubectl"][key], 2)
        for key in ("wall_s", "cpu_s", "peak_rss_mib")
    }
    return {
        "rounds": done,
        "medians": medians,
        "ratios_gfd_over_kubectl": ratios,
        "goals": {
            "wall_at_most_1.5x_kubectl": ratios["wall_s"] <= GOAL_RATIO,
            "peak_rss_at_most_1.5x_kubectl": ratios["peak_rss_mib"] <= GOAL_RATIO,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000, help="bound pods")
    parser.add_argument("--namespaces", type=int, default=20, help="the bound pods' namespaces")
    parser.add_argument("--gpu-share", type=float, default=0.8, help="share of nodes with GPUs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16, help="threads populating")
    parser.add_argument(
        "--no-pod-status",
        dest="pod_status",
        action="store_false",
        help="leave the pods' status as created (Pending, no IPs)",
    )
    parser.add_argument("--gfd", type=Path, default=ROOT / ".venv" / "bin" / "gfd")
    parser.add_argument("--kubectl", type=Path, default=ROOT / ".venv" / "bin" / "kubectl")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()

    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not assets:
        # As bench/reference.py does without its binary: one line, status 0, so that
        # `make bench` goes on.
        print(
            "explain_scale.py: skipped: KUBEBUILDER_ASSETS is unset (the directory with "
            "kube-apiserver and etcd)"
        )
        return 0
    for tool in (args.gfd, args.kubectl):
        if not os.access(tool, os.X_OK):
            print(f"explain_scale.py: {tool} is not an executable")
            return 2

    from tests.controlplane import ControlPlane, ControlPlaneError

    machine = machine_description()
    workdir = Path(tempfile.mkdtemp(prefix="gfd-explain-scale-"))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("GFD_")}
    # kubectl's discovery cache in the working directory (the warm-up fills it, as a
    # person's cache is filled).
    env["KUBECACHEDIR"] = str(workdir / "kube-cache")
    labels = profile_labels(args.gfd, env)
    plane = ControlPlane(Path(assets), workdir / "plane")
    launcher: Launcher | None = None
    try:
        try:
            plane.start()
        except ControlPlaneError as exc:
            print(f"explain_scale.py: the control plane did not start: {exc}")
            return 1
        print(f"kube-apiserver {plane.version} at {plane.url}; workdir {workdir}", flush=True)
        writer = Writer(plane.url, plane.pki.ca_cert, plane.pki.admin_cert, plane.pki.admin_key)
        populated, profiles = populate(writer, args, labels)
        print(f"populated in {populated['total_s']} s", flush=True)

        kubeconfig = str(plane.admin_kubeconfig)
        pod = f"{EXPLAINED_NAMESPACE}/{EXPLAINED_POD}"
        commands = {
            "kubectl": [
                str(args.kubectl),
                "--kubeconfig",
                kubeconfig,
                "get",
                "nodes,pods",
                "-A",
                "-o",
                "json",
            ],
            "gfd": [
                str(args.gfd),
                "explain",
                "--pod",
                pod,
                "--kubeconfig",
                kubeconfig,
                "--format",
                "json",
            ],
        }
        launcher = Launcher(env)
        audit = plane.audit_path

        # Warm-up, one each, their output kept: kubectl's is checked for the count of
        # objects, gfd's for its verdicts. Fills kubectl's discovery cache, the API
        # server's watch cache, and gfd's bytecode.
        kubectl_out = workdir / "kubectl.json"
        gfd_out = workdir / "gfd.json"
        warmup = {
            "kubectl": measure(
                launcher, commands["kubectl"], workdir, "warmup-kubectl", audit, str(kubectl_out)
            ),
            "gfd": measure(launcher, commands["gfd"], workdir, "warmup-gfd", audit, str(gfd_out)),
        }
        listed = json.loads(kubectl_out.read_text(encoding="utf-8")).get("items", [])
        kubectl_check = {
            "exit_status": warmup["kubectl"]["exit_status"],
            "output_mib": round(kubectl_out.stat().st_size / 2**20, 1),
            "items": dict(Counter(item.get("kind") for item in listed)),
        }
        del listed
        held, holders = gpus_held(args, profiles)
        gfd_check = check_gfd_output(gfd_out, profiles, held)
        gfd_check["exit_status"] = warmup["gfd"]["exit_status"]
        gfd_check["output_kib"] = round(gfd_out.stat().st_size / 1024, 1)
        print(f"warm-up: kubectl {warmup['kubectl']['wall_s']} s, {kubectl_check}", flush=True)
        print(
            f"warm-up: gfd {warmup['gfd']['wall_s']} s, exit {gfd_check['exit_status']}, "
            f"output check {'ok' if gfd_check['ok'] else gfd_check['problems']}",
            flush=True,
        )

        explained = side_by_side(launcher, commands, workdir, audit, args.rounds, "")
        # gfd fleet (issue 43) on the same cluster, beside kubectl reading the Nodes.
        fleet_commands = {
            "kubectl": [
                str(args.kubectl),
                "--kubeconfig",
                kubeconfig,
                "get",
                "nodes",
                "-o",
                "json",
            ],
            "gfd": [str(args.gfd), "fleet", "--kubeconfig", kubeconfig, "--format", "json"],
        }
        fleet_out = workdir / "fleet.json"
        fleet_warmup = {
            name: measure(
                launcher,
                command,
                workdir,
                f"warmup-fleet-{name}",
                audit,
                str(fleet_out) if name == "gfd" else "/dev/null",
            )
            for name, command in fleet_commands.items()
        }
        fleet_rows = len(json.loads(fleet_out.read_text(encoding="utf-8"))["nodes"])
        fleet = side_by_side(launcher, fleet_commands, workdir, audit, args.rounds, "fleet-")
        kubectl_version = subprocess.run(
            [str(args.kubectl), "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        ).stdout
        machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        report = {
            "command": " ".join(["python", "bench/explain_scale.py", *sys.argv[1:]]),
            "machine": machine,
            "versions": {
                "kube_apiserver": plane.version,
                "kubectl": json.loads(kubectl_version)["clientVersion"]["gitVersion"]
                if kubectl_version
                else "unknown",
                "etcd": etcd_version(Path(assets) / "etcd"),
                "python": platform.python_version(),
                # Others edit this checkout: which gfd was measured.
                "gfd_checkout": subprocess.run(
                    ["git", "describe", "--always", "--dirty"],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                ).stdout.strip(),
            },
            "commands": {
                "kubectl": "kubectl --kubeconfig ADMIN get nodes,pods -A -o json > /dev/null",
                "gfd": f"gfd explain --pod {pod} --kubeconfig ADMIN --format json > /dev/null",
            },
            "counts": {
                "nodes": args.nodes,
                "gpu_nodes": sum(p is not None for p in profiles),
                "gpu_nodes_by_profile": dict(Counter(p for p in profiles if p is not None)),
                "bound_pods": args.pods,
                "bound_pods_with_gpus": holders,
                "gpus_held_by_bound_pods": sum(held.values()),
                "namespaces": args.namespaces + 1,
                "pod_status": "Running (status subresource)" if args.pod_status else "as created",
            },
            "populate": populated,
            "warmup": warmup,
            "kubectl_check": kubectl_check,
            "gfd_check": gfd_check,
            **explained,
            "fleet": {
                "commands": {
                    "kubectl": "kubectl --kubeconfig ADMIN get nodes -o json > /dev/null",
                    "gfd": "gfd fleet --kubeconfig ADMIN --format json > /dev/null",
                },
                "warmup": fleet_warmup,
                "gpu_node_rows": fleet_rows,
                **fleet,
            },
        }
    finally:
        if launcher is not None:
            launcher.close()
        plane.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    machine = report["machine"]
    print(
        f"machine: {machine['nproc']} x {machine['cpu']}, Python {machine['python']}, "
        f"load {machine['load_average_at_start']} -> {machine['load_average_at_end']}"
    )
    print(
        f"kube-apiserver {report['versions']['kube_apiserver']}, kubectl "
        f"{report['versions']['kubectl']}; populated in {report['populate']['total_s']} s"
    )
    print("| command | wall | CPU | peak RSS |")
    print("|---|---:|---:|---:|")
    for name in ("kubectl", "gfd"):
        m = report["medians"][name]
        print(
            f"| {report['commands'][name]} | {m['wall_s']:.2f} s | {m['cpu_s']:.2f} s "
            f"| {m['peak_rss_mib']:.0f} MiB |"
        )
    r = report["ratios_gfd_over_kubectl"]
    print(f"| gfd / kubectl | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_mib']} |")
    print(f"goals: {report['goals']}")


if __name__ == "__main__":
    raise SystemExit(main())
