"""Where ``gfd explain`` and ``gfd select`` get the pod and the nodes from.

The pod: a manifest file (``-f``, several documents allowed, ``-`` for stdin) or a pod of
the cluster (``--pod NAMESPACE/NAME``). The nodes and what their pods request: the API
server (``--kubeconfig``, or the pod's service account), a saved list (``--cluster-file``,
``kubectl get nodes,pods -A -o json``), or one node of gfd's simulator
(``--simulate PROFILE``), labelled as gfd would label it and offering what NVIDIA's device
plugin would register for it.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gfd.errors import ConfigError, echo
from gfd.inputs import (
    CLUSTER_FILE_LIMIT,
    MANIFEST_FILE_LIMIT,
    InputRejected,
    check_yaml,
    read_bounded_text,
)
from gfd.scheduling.cluster import Cluster, cluster_from_api, cluster_from_list, find_pod
from gfd.scheduling.workload import Workload, workload_of, workloads_of

if TYPE_CHECKING:
    from gfd.config import Settings
    from gfd.kube_api import KubeClient

#: The kubelet's default pod limit (``--max-pods``), which a simulated node offers.
KUBELET_MAX_PODS = 110
#: What a simulated node does not know: its CPUs and memory as the kubelet offers them.
SIMULATED_UNKNOWN = ("cpu", "memory", "ephemeral-storage")


def _read(path: str, limit: int, what: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read(limit + 1)[:limit]
        return read_bounded_text(path, limit)
    except InputRejected as exc:
        raise ConfigError(f"{what} {path}: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None


def _documents(text: str, source: str) -> list[Any]:
    import yaml

    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: not valid JSON: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{source}: nested too deeply") from None
        return document if isinstance(document, list) else [document]
    try:
        check_yaml(text)
    except InputRejected as exc:
        raise ConfigError(f"{source}: {exc}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: not valid YAML{where}: {problem}") from None


def manifest_workloads(path: str) -> list[Workload]:
    """The pods the manifest ``path`` makes."""
    text = _read(path, MANIFEST_FILE_LIMIT, "manifest")
    return workloads_of(_documents(text, path), path)


def cluster_file(path: str, pod: str | None = None) -> tuple[Cluster, Workload | None]:
    """The cluster saved in ``path``, and the pod ``pod`` (``--pod``) found in it."""
    text = _read(path, CLUSTER_FILE_LIMIT, "cluster file")
    documents = _documents(text, path)
    if len(documents) != 1:
        raise ConfigError(
            f"{path}: {len(documents)} documents; a cluster file is one List "
            "(kubectl get nodes,pods -A -o json > FILE)"
        )
    document = documents[0]
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


@contextmanager
def api_client(settings: Settings) -> Iterator[KubeClient]:
    """The API server of ``--kubeconfig`` (or the pod's service account)."""
    from gfd.kube_api import connect_kubernetes

    client = connect_kubernetes(
        kubeconfig=settings.kubeconfig,
        in_cluster_token_path=settings.host.token_file,
        in_cluster_ca_path=settings.host.ca_file,
    )
    try:
        yield client
    finally:
        client.close()


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
