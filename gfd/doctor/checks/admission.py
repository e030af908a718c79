"""The ``admission`` link: the API server admits this cycle's write.

The node sink's and the NodeFeature sink's own code sends this cycle's write, as a
server-side dry run (``dryRun=All``): the API server authorises, validates and runs every
admission policy and webhook on it, and stores nothing. A refusal by admission (gfd's
ValidatingAdmissionPolicies of ``deploy/``, or any other policy or webhook) is a problem
quoting the server; a refusal by RBAC is the ``rbac`` line's. Whether gfd's own policy is
installed is said where these credentials may read it.
"""

from __future__ import annotations

import threading

from gfd.base.errors import GfdError, SinkPermanentError
from gfd.doctor.api import DoctorApi, NoCluster
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, cannot_tell, ok, problem
from gfd.kube_api import KubeApiPermanentError, path_segment

#: gfd's policy on each sink's writes, as deploy/ names it.
POLICIES = {"node": "gfd-node-labeler", "nodefeature": "gfd-node-feature-writer"}
POLICIES_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
#: What an admission refusal says, and an RBAC one does not.
ADMISSION_WORDS = ("ValidatingAdmissionPolicy", "admission webhook", "denied the request")


def _policy_state(api: DoctorApi, name: str) -> str:
    """Whether gfd's policy ``name`` is installed, where these credentials may read it."""
    try:
        response = api.request(
            "GET", f"{POLICIES_PATH}/{path_segment(name)}", accept_statuses=(404,)
        )
    except GfdError:
        return ""
    return (
        f"gfd's policy {name} installed"
        if response.status != 404
        else f"gfd's policy {name} not installed"
    )


def _dry_run(examination: Examination, api: DoctorApi, sink_name: str) -> bool:
    """Send this cycle's write of ``sink_name`` as a dry run (raising the refusal); False
    when the sink finds nothing to write."""
    settings = examination.settings
    publication = examination.publication
    assert publication is not None
    stop = threading.Event()
    if sink_name == "node":
        from gfd.sinks.node import NodeSink

        return NodeSink(
            client=api.client,
            node_name=settings.node_name or "",
            stop=stop,
            timestamp_annotation=settings.timestamp_annotation,
            dry_run=True,
        ).publish(publication)
    from gfd.sinks.nodefeature import NodeFeatureSink

    return NodeFeatureSink(
        client=api.client,
        node_name=settings.node_name or "",
        namespace=settings.namespace or "",
        pod_name=settings.pod_name,
        stop=stop,
        dry_run=True,
    ).publish(publication)


def examine(examination: Examination) -> Answer:
    writers = [name for name in examination.kubernetes_sinks if name in POLICIES]
    if not writers:
        return ok("not used: no configured sink writes through the API server")
    api = examination.api
    if isinstance(api, NoCluster) or api.unreachable is not None:
        return cannot_tell("no answer from the API server (see the cluster line)")
    if examination.publication is None:
        return cannot_tell("no labels to write this cycle (see the nvml and labels lines)")
    assert isinstance(api, DoctorApi)
    accepted = []
    for sink_name in writers:
        try:
            written = _dry_run(examination, api, sink_name)
        except KubeApiPermanentError as exc:
            text = str(exc)
            if exc.status == 403 and not any(word in text for word in ADMISSION_WORDS):
                return cannot_tell(
                    f"RBAC refused the dry run of the {sink_name} sink's write (see the rbac line)"
                )
            if exc.status == 422:
                return problem(
                    f"the API server finds the {sink_name} sink's write of this cycle invalid: {text}",
                    "a label or annotation gfd made is refused: report it to gfd's maintainers "
                    "with gfd facts > node.yaml",
                )
            return problem(
                f"the API server refuses the {sink_name} sink's write of this cycle: {text}",
                "the refusal names its policy: gfd's own policies (deploy/components/*/"
                "admission-policy.yaml) admit gfd's ServiceAccount only with a pod-bound "
                "token (Kubernetes 1.30+, the kubelet's projected token) and only for this "
                "node; another policy or webhook must allow gfd's labels under nvidia.com/",
            )
        except SinkPermanentError as exc:
            return cannot_tell(f"the {sink_name} sink cannot write: {exc}")
        except GfdError as exc:
            return cannot_tell(f"the dry run of the {sink_name} sink's write got no answer: {exc}")
        state = _policy_state(api, POLICIES[sink_name])
        notes = [note for note in (state, "" if written else "it changes nothing") if note]
        noted = f" ({'; '.join(notes)})" if notes else ""
        accepted.append(f"the {sink_name} sink's write{noted}")
    return ok(f"the API server admits a dry run of {' and '.join(accepted)}")
