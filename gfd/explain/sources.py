"""Where ``gfd explain`` and ``gfd select`` get the pod and the nodes from.

The pod: a manifest file (``-f``, several documents allowed, ``-`` for stdin) or a pod of
the cluster (``--pod NAMESPACE/NAME``). The nodes and what their pods request: the API
server (``--kubeconfig``, or the pod's service account), a saved list (``--cluster-file``,
``kubectl get nodes,pods -A -o json``), or one node of gfd's simulator
(``--simulate PROFILE``), labelled as gfd would label it and offering what NVIDIA's device
plugin would register for it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from gfd.base.errors import ConfigError, echo
from gfd.base.inputs import MANIFEST_FILE_LIMIT
from gfd.scheduling.cluster import Cluster, cluster_from_api, cluster_from_list, find_pod
from gfd.scheduling.reading import documents, read_list_file, read_text
from gfd.scheduling.workload import Workload, workload_of, workloads_of

if TYPE_CHECKING:
    from gfd.config import Settings
    from gfd.kube_api import KubeClient

#: The kubelet's default pod limit (``--max-pods``), which a simulated node offers.
KUBELET_MAX_PODS = 110
#: What a simulated node does not know: its CPUs and memory as the kubelet offers them.
SIMULATED_UNKNOWN = ("cpu", "memory", "ephemeral-storage")


def manifest_workloads(path: str) -> list[Workload]:
    """The pods the manifest ``path`` makes."""
    text = read_text(path, MANIFEST_FILE_LIMIT, "manifest")
    return workloads_of(documents(text, path), path)


def cluster_file(path: str, pod: str | None = None) -> tuple[Cluster, Workload | None]:
    """The cluster saved in ``path``, and the pod ``pod`` (``--pod``) found in it."""
    document = read_list_file(path)
    workload = None
    exclude = ""
    if pod is not None:
        namespace, name = parse_pod_reference(pod)
        exclude = f"{namespace}/{name}"
        found = find_pod(document, namespace, name) if isinstance(document, dict) else None
        if found is None:
            raise ConfigError(f"--pod {pod}: no such pod in {path}")
        workload = workload_of(found, f"{path}: pod {pod}")
    return cluster_from_list(document, path, exclude=exclude), workload


def parse_pod_reference(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` (or ``NAME``, in ``default``)."""
    namespace, _, name = text.rpartition("/")
    if not name or "/" in namespace:
        raise ConfigError(f"--pod {echo(text)}: write NAMESPACE/NAME (--pod ml/train-0)")
    return namespace or "default", name


def cluster_pod(client: KubeClient, reference: str, stop: threading.Event) -> Workload:
    """A pod as the API server has it (``--pod``)."""
    from gfd.kube_api.client import path_segment

    namespace, name = parse_pod_reference(reference)
    response = client.request(
        "GET",
        f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(name)}",
        stop=stop,
        deadline=client.deadline(),
        accept_statuses=(404,),
    )
    if response.status == 404:
        raise ConfigError(f"--pod {reference}: no such pod (kubectl get pods -n {namespace})")
    return workload_of(response.json_object(f"pod {reference}"), f"pod {reference}")


def live_cluster(client: KubeClient, stop: threading.Event, exclude: str = "") -> Cluster:
    return cluster_from_api(client, stop, exclude=exclude)


def simulated_cluster(settings: Settings) -> Cluster:
    """One node of gfd's simulator (``--simulate``): gfd's labels for it, what NVIDIA's
    device plugin would register for its GPUs, Ready, no taint. Its CPUs and memory are
    not known (:data:`SIMULATED_UNKNOWN`)."""
    from gfd.agent import compute_labels
    from gfd.app.label_mode import label_options
    from gfd.app.node_reader import read_node_once
    from gfd.health.dra_node import expected_resources

    facts = read_node_once(settings)
    label_set, _ = compute_labels(facts, label_options(settings, with_timestamp=False))
    allocatable = {
        name: str(count)
        for name, count in expected_resources(
            facts, settings.mig_strategy, settings.sharing
        ).items()
    }
    allocatable["pods"] = str(KUBELET_MAX_PODS)
    profile = str(settings.simulate or "node")
    name = f"simulated-{profile.rsplit('/', 1)[-1].removesuffix('.yaml')}"
    cluster = Cluster(source=f"gfd's simulator ({profile})", unknown_resources=SIMULATED_UNKNOWN)
    cluster.add_node(
        {
            "metadata": {"name": name, "labels": dict(label_set.labels)},
            "spec": {},
            "status": {
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    return cluster
