"""The ``cluster`` link: the API server answers these credentials, and knows this node.

Credentials come from ``--kubeconfig`` or, in a pod, from its service account. Where the
configured sinks need the API server (``--patch-node``, ``--use-node-feature-api``),
having none, or one that does not answer or refuses them, is a problem; where they do not,
the doctor cannot tell what depends on the cluster (NFD's labels, the device plugin), and
says how to let it.
"""

from __future__ import annotations

from gfd.base.errors import GfdError
from gfd.doctor.api import DoctorApi, NoCluster
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, cannot_tell, ok, problem
from gfd.kube_api import TRUST_THE_CLUSTER_CA, KubeApiError, KubeApiPermanentError

#: What lets the doctor look at the cluster when no sink needs it.
LOOK_AT_THE_CLUSTER = (
    "run it in gfd's pod (kubectl exec -n gpu-feature-discovery ds/gfd -- gfd doctor --from-pid 1) or pass --kubeconfig "
    "PATH of a user that may get this node, to check NFD's labels and the device plugin"
)
REACH_THE_SERVER = (
    "check that the API server's address in the kubeconfig (in a pod: "
    "KUBERNETES_SERVICE_HOST) is reachable from this node (kubectl get --raw /readyz "
    "with the same credentials), and its certificate authority"
)


def _unavailable(examination: Examination, what: str, fix: str) -> Answer:
    sinks = examination.kubernetes_sinks
    if sinks:
        needed = ", ".join(sinks)
        return problem(f"{what}; the {needed} sink(s) need the API server", fix)
    return cannot_tell(f"{what}; no configured sink needs the API server", LOOK_AT_THE_CLUSTER)


def examine(examination: Examination) -> Answer:
    api = examination.api
    if isinstance(api, NoCluster):
        return _unavailable(
            examination, f"no credentials for the API server: {api}", LOOK_AT_THE_CLUSTER
        )
    assert isinstance(api, DoctorApi)
    try:
        user = api.user()
    except KubeApiPermanentError as exc:
        if exc.status == 401:
            return _unavailable(
                examination,
                f"the API server refuses the credentials from {api.credentials}: {exc}",
                "in a pod, its service-account token must be mounted "
                "(automountServiceAccountToken: true) and its ServiceAccount exist; with "
                "--kubeconfig, the user's token or certificate must be valid",
            )
        return _unavailable(examination, f"the API server answers oddly: {exc}", REACH_THE_SERVER)
    except (KubeApiError, GfdError) as exc:
        return _unavailable(
            examination,
            f"the API server does not answer ({api.credentials}): {exc}",
            REACH_THE_SERVER,
        )
    who = f"as {user}" if user else "(this server does not say as whom: before Kubernetes 1.28)"
    answered = f"the API server answers {api.credentials} {who}"
    unverified = api.client.unverified
    if unverified is not None:
        # Said here, not in the log the doctor keeps quiet: once, in its report.
        answered += f" ({unverified}; {TRUST_THE_CLUSTER_CA})"
    name = examination.settings.node_name
    if not name:
        return ok(
            f"{answered}; no node name (--node-name or NODE_NAME): the node's own checks cannot tell"
        )
    read = examination.node
    if read.node is not None:
        return ok(f"{answered}; node {name} found")
    if read.status == 404:
        return problem(
            f"{answered}, but it has no node {name!r}",
            "set --node-name (in a pod: NODE_NAME from the downward API, fieldRef "
            "spec.nodeName) to this node's name as kubectl get nodes shows it",
        )
    if read.status == 403:
        return ok(f"{answered}; these credentials may not read node {name} (see the rbac line)")
    return _unavailable(
        examination, f"{answered}, but reading node {name} failed: {read.why}", REACH_THE_SERVER
    )
