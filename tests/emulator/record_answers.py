"""Record an API server's answers to every request shape gfd and its tests make.

One request script (:data:`SCRIPT`) runs against any API server; each step's answer is
reduced to what a real server does not vary (status code, ``reason``, ``details``, the
``message`` with the names of this run replaced by placeholders, and whether the object's
``resourceVersion`` moved), and written as a record of :mod:`tests.records.store`
(``tests/records/kube-apiserver/answers.json``). CI runs the same script against the
project's emulator and compares (``tests/emulator/test_recorded_answers.py``).

Re-record against a real kube-apiserver (1.36) prepared for gfd::

    python -m tests.emulator.record_answers --server https://127.0.0.1:6443 \\
        --ca ca.crt --gfd-token "$GFD_TOKEN" --reader-token "$READER_TOKEN" \\
        --node NODE --namespace gpu-operator --version v1.36.0

The cluster needs: gfd's RBAC from ``deploy/`` (its ServiceAccount's token as
``--gfd-token``), NFD's NodeFeature CRD, the Node ``NODE`` (without gfd's labels and
annotations, NFD's ``nfd.node.kubernetes.io/feature-labels`` and the label
``example.com/other-writer``) and no NodeFeature ``nvidia-features-for-NODE``, and a second
identity that may only ``get`` nodes (``--reader-token``), for the denials. The admission policies of ``deploy/`` must not
be installed for this run: the script probes the API server's own answers, and the
emulator models no admission (``tests/deploy/admission_model.py`` judges the policies).

``--built`` says, for the record's header, how the server was built and run (its source
commit, Go and etcd versions). A re-record keeps each case's ``note`` (why the server answers
so, for a reader) while that case's request and answer are unchanged, and drops it otherwise.

``--emulator`` runs the script against the project's emulator instead and compares every
answer with the record (what CI does, ``tests/emulator/test_recorded_answers.py``); it
exits 1 naming each case that differs. With ``--out`` it writes the emulator's answers
there instead, never over the record.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.records.store import (
    RECORDS_DIR,
    Record,
    RecordError,
    inputs_sha256,
    load_record,
    today,
    write_record,
)

RECORD = RECORDS_DIR / "kube-apiserver" / "answers.json"
RERECORD = "python -m tests.emulator.record_answers --server URL ... (see its docstring)"
PROGRAM = "kube-apiserver"

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
JSON = "application/json"
GROUP = "nfd.k8s-sigs.io"
FEATURES = f"/apis/{GROUP}/v1alpha1/namespaces/{{namespace}}/nodefeatures"
FEATURE = FEATURES + "/{nodefeature}"
NODE = "/api/v1/nodes/{node}"
#: RFC 6901 pointers of the node sink's guarded JSON Patches (``/`` in a key is ``~1``).
OWNERSHIP = "/metadata/annotations/nvidia.com~1gfd.labels"
NFD_OWNERSHIP = "/metadata/annotations/nfd.node.kubernetes.io~1feature-labels"
GPU_COUNT = "/metadata/labels/nvidia.com~1gpu.count"
GPU_PRODUCT = "/metadata/labels/nvidia.com~1gpu.product"


@dataclass(frozen=True)
class Step:
    """One request of the script. Paths and bodies name things by placeholder
    (``{node}``, ``{namespace}``, ``{nodefeature}``); ``{rv:LABEL}`` in a body is the
    ``resourceVersion`` that step ``LABEL`` saw; ``save`` names this step's version."""

    case: str
    what: str
    method: str
    path: str
    body: Any = None
    content_type: str = JSON
    #: ``gfd`` (gfd's ServiceAccount), ``reader`` (may only get nodes) or ``nobody``.
    identity: str = "gfd"
    save: str | None = None
    #: Compare only the start of the message, up to the first ``": "`` after the field
    #: (apimachinery's long validation texts are held by ``test_emulator.py``).
    message_prefix: bool = False

    def inputs(self) -> dict[str, Any]:
        """What determines the answer: the request and everything the script did before
        it (the hash of a step covers the steps before it, see :func:`case_inputs`)."""
        data = asdict(self)
        data.pop("what")
        return data


def feature(labels: Mapping[str, str], rv: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "{nodefeature}"}
    if rv is not None:
        metadata["resourceVersion"] = rv
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "NodeFeature",
        "metadata": metadata,
        "spec": {"labels": dict(labels)},
    }


#: The request shapes of gfd's sinks and of the emulator's tests, in order (later steps
#: build on the state earlier ones left).
#: gfd's guarded removal of gpu.count as read from a node it owns: sent once after an
#: unrelated change (it applies), then again from that now stale read (422).
GUARDED_REMOVAL = [
    {"op": "test", "path": OWNERSHIP, "value": "nvidia.com/gpu.count"},
    {"op": "test", "path": NFD_OWNERSHIP, "value": None},
    {"op": "test", "path": GPU_COUNT, "value": "8"},
    {"op": "remove", "path": GPU_COUNT},
    {"op": "remove", "path": OWNERSHIP},
]

SCRIPT: tuple[Step, ...] = (
    Step("get-node", "the node sink's fresh read", "GET", NODE, save="start"),
    Step("get-node-cached", "the node sink's cached read", "GET", NODE + "?resourceVersion=0"),
    Step("get-missing-node", "a node that is not there", "GET", "/api/v1/nodes/{missing}"),
    Step(
        "merge-patch-labels",
        "the node sink's label write",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}},
        MERGE,
        save="labelled",
    ),
    Step(
        "merge-patch-noop",
        "the same write again: the server skips a write that changes nothing",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}},
        MERGE,
    ),
    Step(
        "merge-patch-current-precondition",
        "a removal with the current resourceVersion as precondition",
        "PATCH",
        NODE,
        {
            "metadata": {
                "resourceVersion": "{rv:labelled}",
                "labels": {"nvidia.com/gpu.count": None},
            }
        },
        MERGE,
    ),
    Step(
        "stale-precondition-merge-patch",
        "a removal whose read was stale: 409",
        "PATCH",
        NODE,
        {"metadata": {"resourceVersion": "{rv:start}", "labels": {"nvidia.com/gpu.count": None}}},
        MERGE,
    ),
    Step(
        "strategic-merge-patch-labels",
        "a strategic merge patch of labels",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}},
        STRATEGIC,
    ),
    Step(
        "json-patch-test-failure",
        "a JSON Patch whose test fails: 422, the patch library's text is not returned",
        "PATCH",
        NODE,
        [
            {"op": "test", "path": "/metadata/labels/nvidia.com~1gpu.product", "value": "x"},
            {"op": "remove", "path": "/metadata/labels/nvidia.com~1gpu.product"},
        ],
        JSON_PATCH,
    ),
    Step(
        "json-patch-remove-absent",
        "a JSON Patch removing a label that is not there: 422",
        "PATCH",
        NODE,
        [{"op": "remove", "path": "/metadata/labels/nvidia.com~1no-such-label"}],
        JSON_PATCH,
    ),
    Step(
        "invalid-label-value",
        "a label value the API server refuses: 422 Invalid with causes",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/gpu.product": "not valid!"}}},
        MERGE,
        message_prefix=True,
    ),
    Step(
        "status-patch-condition",
        "the condition writer's strategic merge patch of nodes/status",
        "PATCH",
        NODE + "/status",
        {
            "status": {
                "conditions": [
                    {
                        "type": "GPUHealthy",
                        "status": "False",
                        "reason": "GPULost",
                        "message": "GPU 7 is lost",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        },
        STRATEGIC,
    ),
    Step("get-missing-nodefeature", "the NodeFeature sink's first read", "GET", FEATURE),
    Step(
        "create-nodefeature",
        "the NodeFeature sink's create",
        "POST",
        FEATURES,
        feature({"nvidia.com/gpu.count": "8"}),
        save="created",
    ),
    Step(
        "create-existing-nodefeature",
        "a create whose object exists (a retried create): 409 AlreadyExists",
        "POST",
        FEATURES,
        feature({"nvidia.com/gpu.count": "8"}),
    ),
    Step(
        "update-nodefeature",
        "the NodeFeature sink's replace with the read resourceVersion",
        "PUT",
        FEATURE,
        feature({"nvidia.com/gpu.count": "4"}, "{rv:created}"),
    ),
    Step(
        "update-nodefeature-stale",
        "a replace whose read was stale: 409 Conflict",
        "PUT",
        FEATURE,
        feature({"nvidia.com/gpu.count": "2"}, "{rv:created}"),
    ),
    Step(
        "update-nodefeature-without-resource-version",
        "a replace of a custom resource without resourceVersion: 422",
        "PUT",
        FEATURE,
        feature({"nvidia.com/gpu.count": "2"}),
    ),
    Step(
        "rbac-get-nodefeature-other-namespace",
        "gfd's Role is namespaced: a read in default is refused",
        "GET",
        FEATURE.replace("{namespace}", "default"),
    ),
    Step(
        "rbac-create-nodefeature-other-namespace",
        "gfd's Role is namespaced: a create in default is refused",
        "POST",
        FEATURES.replace("{namespace}", "default"),
        feature({"nvidia.com/gpu.count": "8"}),
    ),
    Step(
        "rbac-patch-node-denied",
        "an identity without patch on nodes",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/gpu.count": "1"}}},
        MERGE,
        identity="reader",
    ),
    Step(
        "rbac-patch-node-status-denied",
        "an identity without patch on nodes/status: RBAC names the subresource",
        "PATCH",
        NODE + "/status",
        {"status": {"conditions": [{"type": "GPUHealthy", "status": "True"}]}},
        STRATEGIC,
        identity="reader",
    ),
    Step("unauthenticated", "an unknown bearer token", "GET", NODE, identity="nobody"),
    # The node sink's guarded JSON Patches (issue 25): once a write has lost a race it is
    # conditional on exactly the keys it depends on, not on the node's resourceVersion.
    Step(
        "merge-patch-annotation",
        "the node sink's annotation write (the topology), a merge patch",
        "PATCH",
        NODE,
        {"metadata": {"annotations": {"nvidia.com/gpu.topology": "{}"}}},
        MERGE,
    ),
    Step(
        "json-patch-null-test-on-absent-key",
        "a guarded first write: a null test on the missing ownership annotation passes",
        "PATCH",
        NODE,
        [
            {"op": "test", "path": OWNERSHIP, "value": None},
            {"op": "test", "path": NFD_OWNERSHIP, "value": None},
            {"op": "add", "path": GPU_COUNT, "value": "8"},
            {
                "op": "add",
                "path": OWNERSHIP,
                "value": "nvidia.com/gpu.count,nvidia.com/gpu.product",
            },
        ],
        JSON_PATCH,
    ),
    Step(
        "json-patch-null-test-on-present-key",
        "the same write again: the annotation now exists, so the null test fails: 422",
        "PATCH",
        NODE,
        [
            {"op": "test", "path": OWNERSHIP, "value": None},
            {"op": "add", "path": OWNERSHIP, "value": "nvidia.com/gpu.count"},
        ],
        JSON_PATCH,
    ),
    Step(
        "json-patch-guarded-removal",
        "a removal and ownership rewrite guarded by the values it depends on",
        "PATCH",
        NODE,
        [
            {
                "op": "test",
                "path": OWNERSHIP,
                "value": "nvidia.com/gpu.count,nvidia.com/gpu.product",
            },
            {"op": "test", "path": NFD_OWNERSHIP, "value": None},
            {"op": "test", "path": GPU_PRODUCT, "value": "NVIDIA-H100-80GB-HBM3"},
            {"op": "remove", "path": GPU_PRODUCT},
            {"op": "add", "path": OWNERSHIP, "value": "nvidia.com/gpu.count"},
        ],
        JSON_PATCH,
    ),
    Step(
        "merge-patch-other-writer",
        "another writer's merge patch of its own label",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"example.com/other-writer": "1"}}},
        MERGE,
    ),
    Step(
        "json-patch-guarded-after-unrelated-change",
        "a guarded removal after an unrelated change (no resourceVersion in it): applies",
        "PATCH",
        NODE,
        GUARDED_REMOVAL,
        JSON_PATCH,
    ),
    Step(
        "json-patch-guarded-removal-stale",
        "the same removal again, from a read that is now stale: 422, nothing applied",
        "PATCH",
        NODE,
        GUARDED_REMOVAL,
        JSON_PATCH,
    ),
    Step(
        "json-patch-null-test-on-present-map",
        "a guard that the labels map is absent, on a node that has labels: 422",
        "PATCH",
        NODE,
        [
            {"op": "test", "path": "/metadata/labels", "value": None},
            {"op": "add", "path": "/metadata/labels", "value": {"nvidia.com/gpu.count": "8"}},
        ],
        JSON_PATCH,
    ),
    Step(
        "json-patch-invalid-label",
        "a guarded write whose label value the server refuses: 422 Invalid with causes",
        "PATCH",
        NODE,
        [
            {"op": "test", "path": OWNERSHIP, "value": None},
            {"op": "add", "path": GPU_PRODUCT, "value": "not valid!"},
        ],
        JSON_PATCH,
        message_prefix=True,
    ),
)


def case_inputs(index: int) -> dict[str, Any]:
    """A step's inputs: itself and every step before it (their state is its state)."""
    return {"steps": [step.inputs() for step in SCRIPT[: index + 1]]}


# ------------------------------------------------------------------------ targets


@dataclass
class Target:
    """An API server to run the script against, and this run's names."""

    url: str
    tokens: Mapping[str, str]
    #: Placeholder -> this run's value (``node``, ``namespace``, ``nodefeature``,
    #: ``missing``, ``gfd_user``, ``reader_user``).
    names: Mapping[str, str]
    context: ssl.SSLContext | None = None
    versions: dict[str, str] = field(default_factory=dict)

    def send(self, identity: str, method: str, path: str, body: Any, content_type: str) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.tokens.get(identity, 'no-such-token')}")
        request.add_header("Accept", JSON)
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw or b"null")
            except ValueError:
                return error.code, {"unparsed": raw.decode(errors="replace")[:500]}


def _fill(value: Any, names: Mapping[str, str], versions: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for label, version in versions.items():
            value = value.replace(f"{{rv:{label}}}", version)
        for placeholder, name in names.items():
            value = value.replace(f"{{{placeholder}}}", name)
        return value
    if isinstance(value, list):
        return [_fill(v, names, versions) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, names, versions) for k, v in value.items()}
    return value


def _unfill(value: Any, names: Mapping[str, str]) -> Any:
    """This run's names back to placeholders, longest first (a node name may contain
    another name)."""
    if isinstance(value, str):
        for placeholder, name in sorted(names.items(), key=lambda item: -len(item[1])):
            value = value.replace(name, f"{{{placeholder}}}")
        return value
    if isinstance(value, list):
        return [_unfill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _unfill(v, names) for k, v in value.items()}
    return value


def answer_shape(
    step: Step, status: int, body: Any, names: Mapping[str, str], previous_rv: str | None
) -> dict[str, Any]:
    """What of an answer a record keeps (see the module docstring)."""
    shape: dict[str, Any] = {"status": status}
    if not isinstance(body, dict):
        return shape
    if body.get("kind") == "Status":
        shape["reason"] = body.get("reason", "")
        message = _unfill(body.get("message", ""), names)
        if step.message_prefix:
            head, _, _ = message.partition('": ')
            message = head + '": ...'
        shape["message"] = message
        details = dict(body.get("details") or {})
        # Causes are kept by field and reason; their long texts are apimachinery's.
        if "causes" in details:
            details["causes"] = sorted(
                {(c.get("field", ""), c.get("reason", "")) for c in details["causes"]}
            )
            details["causes"] = [list(c) for c in details["causes"]]
        details.pop("uid", None)
        shape["details"] = _unfill(details, names)
        return shape
    metadata = body.get("metadata") or {}
    rv = metadata.get("resourceVersion")
    if isinstance(rv, str) and previous_rv is not None:
        shape["resourceVersion"] = "unchanged" if rv == previous_rv else "changed"
    return shape


def run_script(target: Target) -> dict[str, dict[str, Any]]:
    """Every step's answer shape, by case id."""
    answers: dict[str, dict[str, Any]] = {}
    known: dict[str, str] = {}  # the last resourceVersion seen, per object path
    for step in SCRIPT:
        path = _fill(step.path, target.names, target.versions)
        body = _fill(step.body, target.names, target.versions)
        status, reply = target.send(step.identity, step.method, path, body, step.content_type)
        object_path = path.split("?")[0].removesuffix("/status")
        if step.method == "POST" and isinstance(body, dict):
            object_path = f"{object_path}/{body['metadata']['name']}"
        shape = answer_shape(step, status, reply, target.names, known.get(object_path))
        answers[step.case] = shape
        metadata = reply.get("metadata") if isinstance(reply, dict) else None
        rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if status < 300 and isinstance(rv, str) and reply.get("kind") != "Status":
            known[object_path] = rv
            if step.save:
                target.versions[step.save] = rv
    return answers


def emulator_target() -> tuple[Any, Target]:
    """The project's emulator, seeded as the script needs; returns it (to stop) and
    the target."""
    from tests.emulator import GFD_RULES, ApiServerEmulator, Principal, seed_gfd_cluster

    emulator = ApiServerEmulator().start()
    namespace, node = "gpu-operator", "record-node"
    seed_gfd_cluster(emulator, node_name=node, namespace=namespace, token="gfd", rules=GFD_RULES)
    emulator.set_token("reader", Principal("record-reader", frozenset({("get", "nodes")})))
    names = {
        "node": node,
        "namespace": namespace,
        "nodefeature": f"nvidia-features-for-{node}",
        "missing": "no-such-node",
        "gfd_user": f"system:serviceaccount:{namespace}:gfd",
        "reader_user": "record-reader",
    }
    return emulator, Target(emulator.url, {"gfd": "gfd", "reader": "reader"}, names)


#: The header's notes that do not depend on the run: what an answer keeps, what the script
#: cannot ask, and what a case's ``note`` is.
HEADER_NOTES = {
    "normalised": (
        "names of the run -> {node}, {namespace}, {nodefeature}, {missing}, {gfd_user}, "
        "{reader_user}; resourceVersion values -> changed/unchanged against the last version "
        "the script saw of that object; details.causes -> [field, reason] pairs; an "
        "invalid-label message up to the value"
    ),
    "not covered": (
        "admission (ValidatingAdmissionPolicy) denials: the emulator models no admission; "
        "tests/deploy/admission_model.py and tests/realkube/test_admission.py judge the "
        "policies. Faults (429, 5xx, dropped connections) a real server cannot produce on "
        "demand."
    ),
    "case notes": (
        "a case's 'note' explains its answer for a reader, as read in the published "
        "Kubernetes source (k8s.io/apimachinery, k8s.io/apiserver, evanphx/json-patch v4); "
        "it is not where the answer came from: 'answer' is what the server sent. A re-record "
        "keeps a note while its case's request and answer are unchanged."
    ),
}


def record_of(
    answers: Mapping[str, dict[str, Any]],
    *,
    version: str,
    how: str,
    notes: Mapping[str, str],
) -> Record:
    """The record of one run: each case's answer, and ``notes[case]`` as its ``note``."""
    cases: dict[str, dict[str, Any]] = {}
    for index, step in enumerate(SCRIPT):
        case = {"inputs_sha256": inputs_sha256(case_inputs(index)), "answer": answers[step.case]}
        case["what"] = step.what
        if step.case in notes:
            case["note"] = notes[step.case]
        cases[step.case] = case
    header = {**HEADER_NOTES, "how": how, "rerecord": RERECORD}
    return Record(PROGRAM, version, today(), cases, header)


def kept_notes(previous: Record | None, answers: Mapping[str, dict[str, Any]]) -> dict[str, str]:
    """The notes of the record being replaced whose case asks and answers as before (a note
    explains one answer: a changed answer needs a new one)."""
    if previous is None:
        return {}
    kept = {}
    for index, step in enumerate(SCRIPT):
        old = previous.cases.get(step.case, {})
        if (
            "note" in old
            and old.get("inputs_sha256") == inputs_sha256(case_inputs(index))
            and old.get("answer") == answers[step.case]
        ):
            kept[step.case] = old["note"]
    return kept


def differences(answers: Mapping[str, dict[str, Any]], record: Record) -> dict[str, str]:
    """Case -> how its answer (or request) differs from what ``record`` holds; the cases
    recorded but no longer in the script too."""
    found = {}
    for index, step in enumerate(SCRIPT):
        recorded = record.cases.get(step.case)
        if recorded is None:
            found[step.case] = "not in the record"
        elif recorded.get("inputs_sha256") != inputs_sha256(case_inputs(index)):
            found[step.case] = "the request changed since the record was made"
        elif recorded.get("answer") != answers[step.case]:
            found[step.case] = (
                f"answered {json.dumps(answers[step.case], sort_keys=True)}, "
                f"recorded {json.dumps(recorded.get('answer'), sort_keys=True)}"
            )
    for case in sorted(set(record.cases) - {step.case for step in SCRIPT}):
        found[case] = "recorded, but no longer in the script"
    return found


def compare_with_record(answers: Mapping[str, dict[str, Any]], path: Path) -> int:
    """Print how ``answers`` compare with the record in ``path``; 0 when every one equals."""
    try:
        record = load_record(path)
    except RecordError as error:
        print(f"{error}; record it with: {RERECORD}", file=sys.stderr)
        return 1
    found = differences(answers, record)
    equal = sum(step.case not in found for step in SCRIPT)
    print(
        f"{equal} of {len(SCRIPT)} answers equal the record {path} "
        f"({record.program} {record.version}, {record.recorded})"
    )
    for case, how in found.items():
        print(f"  {case}: {how}")
    if found and any(how != "recorded, but no longer in the script" for how in found.values()):
        print(f"  a changed request needs a new record: {RERECORD}")
    return 1 if found else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="the API server's URL")
    where.add_argument("--emulator", action="store_true", help="the project's emulator")
    parser.add_argument("--gfd-token", default="", help="gfd's ServiceAccount token")
    parser.add_argument("--reader-token", default="", help="a token that may only get nodes")
    parser.add_argument("--reader-user", default="", help="that token's user name")
    parser.add_argument("--node", default="", help="the Node the script writes to")
    parser.add_argument("--namespace", default="gpu-operator")
    parser.add_argument("--ca", help="the API server's CA certificate")
    parser.add_argument("--insecure", action="store_true", help="skip TLS verification")
    parser.add_argument("--version", default="", help="the server's version, e.g. v1.36.0")
    parser.add_argument(
        "--built",
        default="",
        help="how the server was built and run (source commit, Go and etcd versions)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"where to write (default {RECORD}; with --emulator: compare with it instead)",
    )
    args = parser.parse_args(argv)

    stop: Callable[[], None] = lambda: None  # noqa: E731 - nothing to stop for a real server
    if args.emulator:
        emulator, target = emulator_target()
        stop = emulator.stop
        version, how = "the project's emulator", "run against tests/emulator"
    else:
        if not (args.node and args.gfd_token and args.reader_token and args.reader_user):
            parser.error("--server needs --node, --gfd-token, --reader-token, --reader-user")
        context = ssl.create_default_context(cafile=args.ca) if args.ca else None
        if args.insecure:
            context = ssl._create_unverified_context()  # a developer's local server only
        names = {
            "node": args.node,
            "namespace": args.namespace,
            "nodefeature": f"nvidia-features-for-{args.node}",
            "missing": f"{args.node}-missing",
            "gfd_user": f"system:serviceaccount:{args.namespace}:gfd",
            "reader_user": args.reader_user,
        }
        target = Target(
            args.server.rstrip("/"),
            {"gfd": args.gfd_token, "reader": args.reader_token},
            names,
            context,
        )
        version = args.version or "unknown"
        how = f"captured from a running kube-apiserver {version} by record_answers.py"
        if args.built:
            how = f"{how}: {args.built}"
    try:
        answers = run_script(target)
    finally:
        stop()
    if args.emulator and args.out is None:
        return compare_with_record(answers, RECORD)
    out = args.out or RECORD
    notes = {}
    if not args.emulator and out.exists():
        notes = kept_notes(load_record(out), answers)
    write_record(out, record_of(answers, version=version, how=how, notes=notes))
    print(f"{len(answers)} answers written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
