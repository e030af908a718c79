"""The ``nfd`` link: node-feature-discovery picks gfd's labels up and puts them on the Node.

With the feature-file or NodeFeature sink, NFD publishes gfd's labels: its worker reads
the feature file (or gfd writes a NodeFeature), and its master labels the Node and lists
the keys it set in the annotation ``nfd.node.kubernetes.io/feature-labels`` (with
``-instance``, ``nfd.node.kubernetes.io/<instance>.feature-labels``). So, on the Node:

- no such annotation: NFD has never labelled this node (its master does not run, or its
  worker does not run here);
- the annotation, but none of gfd's labels: NFD runs, and does not see gfd's labels (the
  worker does not read the folder gfd writes, or the master ignores gfd's NodeFeature);
- gfd's labels with other values, or a ``nvidia.com/gfd.timestamp`` older than the
  file's by more than :data:`PICKUP_WINDOW`: NFD stopped picking them up;
- within :data:`PICKUP_WINDOW` of gfd's last write, a difference is NFD not having caught
  up yet (its worker re-reads features.d at every ``sleepInterval``, 60 s by default,
  besides on file events), which the doctor cannot tell from a fault.
"""

from __future__ import annotations

from collections.abc import Mapping

from gfd.base.errors import GfdError
from gfd.doctor.api import DoctorApi, NoCluster
from gfd.doctor.examination import Examination, sink_flags
from gfd.doctor.finding import Answer, cannot_tell, ok, problem
from gfd.kube_api import KubeApiPermanentError, path_segment
from gfd.labels.core import TIMESTAMP_KEY
from gfd.sinks.node_update import NFD_OWNERSHIP_ANNOTATION
from gfd.sinks.nodefeature import API_VERSION, nodefeature_name

#: Seconds after gfd's write within which NFD may not have published it yet: the worker's
#: default sleepInterval (60 s) and NFD's observed 0.07-1.1 s from file to Node, rounded up.
PICKUP_WINDOW = 90.0
NFD_NAMESPACE = NFD_OWNERSHIP_ANNOTATION.partition("/")[0] + "/"
FEATURE_LABELS = NFD_OWNERSHIP_ANNOTATION.partition("/")[2]
NFD_PODS = "kubectl get pods -A -o wide -l app.kubernetes.io/name=node-feature-discovery"
#: What NFD reads its feature files from on the host.
NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"


#: What publishes gfd's labels without NFD: the node sink alone of the Kubernetes ones.
WITHOUT_NFD = {"node": True, "feature-file": False, "nodefeature": False}
#: What publishes them through NFD's feature file rather than a NodeFeature.
THROUGH_THE_FEATURE_FILE = {"feature-file": True, "nodefeature": False}


def label_without_nfd(examination: Examination) -> str:
    """The fix's alternative to NFD, as flags for this configuration: the node sink on,
    and both of NFD's sinks off (the nfd link is then not used)."""
    return f"label without NFD: {' '.join(sink_flags(examination.settings, WITHOUT_NFD))}"


def nfd_has_labelled(annotations: Mapping[str, str]) -> bool:
    """Whether nfd-master has labelled the node: its ``feature-labels`` annotation, of its
    default instance or a named one, is there."""
    return any(
        key.startswith(NFD_NAMESPACE) and key.endswith(FEATURE_LABELS) for key in annotations
    )


def _expected(
    examination: Examination, api: DoctorApi
) -> tuple[Mapping[str, str], float | None] | Answer:
    """gfd's labels as NFD should publish them, and how long ago gfd wrote them (None:
    unknown); or the answer when there is nothing to compare yet."""
    settings = examination.settings
    if "feature-file" in examination.wanted_sinks:
        written = examination.feature_file
        if written.labels is None:
            return cannot_tell(
                f"no feature file to compare: {written.why}",
                "run gfd (or wait for its first cycle), then run gfd doctor again",
            )
        return written.labels, written.age
    namespace = settings.namespace or ""
    name = nodefeature_name(settings.node_name or "")
    path = (
        f"/apis/{API_VERSION}/namespaces/{path_segment(namespace)}/nodefeatures/"
        f"{path_segment(name)}"
    )
    try:
        response = api.request("GET", path, accept_statuses=(404,))
    except KubeApiPermanentError as exc:
        return cannot_tell(f"cannot read gfd's NodeFeature {namespace}/{name}: {exc}")
    except GfdError as exc:
        return cannot_tell(f"cannot read gfd's NodeFeature {namespace}/{name}: {exc}")
    if response.status == 404:
        details = (response.json() or {}).get("details") if response.body else None
        if not isinstance(details, Mapping) or not details.get("name"):
            # NFD labelled the node (the link checks that first): an NFD before v0.14,
            # or one without its NodeFeature API, still reads the feature file.
            feature_file = " ".join(sink_flags(settings, THROUGH_THE_FEATURE_FILE))
            return problem(
                "the API server does not serve NodeFeatures: NFD's CRDs are not installed",
                "install node-feature-discovery v0.14 or later (its NodeFeature CRD and "
                f"master); or publish through NFD's feature file: {feature_file}; or "
                f"{label_without_nfd(examination)}",
            )
        return cannot_tell(
            f"gfd's NodeFeature {namespace}/{name} does not exist yet",
            "run gfd (or wait for its first cycle), then run gfd doctor again",
        )
    spec = response.json_object(f"NodeFeature {namespace}/{name}").get("spec")
    labels = spec.get("labels") if isinstance(spec, Mapping) else None
    if not isinstance(labels, Mapping):
        return cannot_tell(f"gfd's NodeFeature {namespace}/{name} holds no labels")
    return {str(k): str(v) for k, v in labels.items()}, None


def _timestamp(labels: Mapping[str, str]) -> int | None:
    value = labels.get(TIMESTAMP_KEY, "")
    return int(value) if value.isdigit() else None


def examine(examination: Examination) -> Answer:
    wanted = examination.wanted_sinks
    if "feature-file" not in wanted and "nodefeature" not in wanted:
        return ok("not used: no configured sink publishes through NFD")
    api = examination.api
    if isinstance(api, NoCluster):
        return cannot_tell(
            f"cannot read the Node without the API server ({api})",
            "pass --kubeconfig PATH of a user that may get nodes to check NFD's labels",
        )
    read = examination.node
    if read.node is None:
        return cannot_tell(
            f"cannot read the Node: {read.why}",
            "pass --kubeconfig PATH of a user that may get nodes (and --node-name) to "
            "check NFD's labels",
        )
    name = examination.settings.node_name
    metadata = read.node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    on_node = metadata.get("labels") or {}
    if not nfd_has_labelled(annotations):
        return problem(
            f"NFD has never labelled node {name}: it has no {NFD_OWNERSHIP_ANNOTATION} annotation",
            "install node-feature-discovery, or check that its master runs and its worker "
            f"runs on this node ({NFD_PODS}); or {label_without_nfd(examination)}",
        )
    expected = _expected(examination, api)
    if isinstance(expected, Answer):
        return expected
    labels, age = expected
    differing = sorted(
        key for key, value in labels.items() if key != TIMESTAMP_KEY and on_node.get(key) != value
    )
    mine, theirs = _timestamp(labels), _timestamp(on_node)
    behind = mine - theirs if mine is not None and theirs is not None else 0
    source = (
        f"the feature file {examination.feature_file.path}"
        if "feature-file" in wanted
        else "gfd's NodeFeature"
    )
    if not differing and behind <= PICKUP_WINDOW:
        return ok(f"NFD published all {len(labels)} labels of {source} on node {name}")
    if age is not None and age <= PICKUP_WINDOW:
        return cannot_tell(
            f"NFD has not published {source} on node {name} yet; gfd wrote it {age:.0f} s "
            f"ago (NFD's worker re-reads it within its sleepInterval, 60 s by default)",
            "run gfd doctor again in a minute",
        )
    published = [key for key in labels if key != TIMESTAMP_KEY]
    if published and not any(key in on_node for key in published):
        fix = (
            f"nfd-worker must read the host's {NFD_FEATURES_DIR} (its hostPath mount) and gfd "
            "must write into that same host folder (deploy/overlays/nfd mounts it); check "
            f"nfd-worker's log on this node ({NFD_PODS})"
            if "feature-file" in wanted
            else "nfd-master must watch NodeFeatures in gfd's namespace and allow the "
            "nvidia.com label namespace; check its log"
        )
        return problem(f"NFD labels node {name}, but with none of {source}'s labels", fix)
    shown = ", ".join(
        f"{key} ({on_node.get(key, 'absent')} on the node, {labels[key]} in gfd's)"
        for key in differing[:3]
    )
    stale = (
        f"{len(differing)} label(s) differ: {shown}"
        if differing
        else (f"its {TIMESTAMP_KEY} is {behind} s behind gfd's")
    )
    return problem(
        f"NFD's labels on node {name} are stale against {source}: {stale}",
        f"NFD stopped picking gfd's labels up: check that nfd-worker runs on this node and "
        f"nfd-master runs, and their logs ({NFD_PODS})",
    )
