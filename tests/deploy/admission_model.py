"""The admission policies in deploy/, evaluated two independent ways.

No API server can run here, so the ValidatingAdmissionPolicies are checked by:

* :class:`CelPolicy`: the policy's own CEL (matchConstraints, matchConditions,
  variables, validations) run by ``cel-python``, with the API server's semantics:
  a policy that does not match does not apply; a failed validation denies with its
  message; an evaluation error denies (``failurePolicy: Fail``).
* ``*_intent`` functions: the same rules written in plain Python from what the
  policies are meant to do (a pod-bound token, own node only, keys under ``nvidia.com/``
  only, never the GPU Operator's control labels, only gfd's own annotations, of spec only
  gfd's own taint, no other field manager's managedFields entry touched, no raw
  features; in a node's status only
  the GPUHealthy condition; events only about its own node, in default).

The real kube-apiserver judges the same policies in ``tests/realkube``; this model runs
everywhere, and on generated requests no server could be sent in a test's time.

The tests compare the two on hand-written and generated requests, and run both on
the requests that gfd's real sinks sent to the API server emulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
import celpy.celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
#: gfd's node annotations: the only ones its ServiceAccount may write.
GFD_ANNOTATIONS = frozenset(
    {
        "nvidia.com/gfd.labels",
        "nvidia.com/gfd.taints",
        "nvidia.com/gfd.timestamp",
        "nvidia.com/gpu.devices",
        "nvidia.com/gpu.topology",
    }
)
#: gfd's taint (``--health-taint``): the only one its ServiceAccount may add, change or
#: remove, and the effects it may have.
HEALTH_TAINT_KEY = "nvidia.com/gpu.health"
HEALTH_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: Every field of NodeSpec (up to Kubernetes 1.37) but taints: what the node policy holds
#: unchanged. tests/deploy/test_admission_policy.py checks the list against the schemas.
NODE_SPEC_FIELDS = (
    "podCIDR",
    "podCIDRs",
    "providerID",
    "unschedulable",
    "configSource",
    "externalID",
    "podPreemptionPolicy",
)
#: The GPU Operator's node controls, as the node policy lists them.
OPERATOR_CONTROL_PREFIXES = ("nvidia.com/gpu.deploy.", "nvidia.com/gpu-driver-upgrade")
OPERATOR_CONTROL_KEYS = frozenset(
    {
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.workload.config",
        "nvidia.com/mig.config",
        "nvidia.com/mig.config.state",
        "nvidia.com/device-plugin.config",
        "nvidia.com/vgpu.config",
        "nvidia.com/vgpu.config.state",
        "nvidia.com/cc.mode",
        "nvidia.com/cc.mode.state",
        "nvidia.com/cc.ready.state",
    }
)
#: The field manager name the API server derives from gfd's user agent.
GFD_FIELD_MANAGER = "gfd"
VENDOR_PREFIX = "nvidia.com/"
NODEFEATURE_NODE_LABEL = "nfd.node.kubernetes.io/node-name"
#: gfd's node condition: the only one its ServiceAccount may write.
HEALTH_CONDITION = "GPUHealthy"
#: The reasons gfd gives its condition.
HEALTH_REASONS = frozenset(
    {
        "GPUsHealthy",
        "GPULost",
        "DevicePluginMissing",
        "AllocatableMismatch",
        "FabricNotReady",
        "FabricDegraded",
        "NVLinkDegraded",
        "XidError",
        "XidStorm",
        "GPUMemoryFailure",
        "GPUResetRequired",
        "UncorrectableECC",
        "PCIeLinkDegraded",
        "PCIeReplaysRising",
    }
)
#: Every field of NodeStatus (Kubernetes 1.36) but conditions: what the health policy
#: holds unchanged. tests/realkube checks the list against the server's schema.
NODE_STATUS_FIELDS = (
    "capacity",
    "allocatable",
    "phase",
    "addresses",
    "daemonEndpoints",
    "nodeInfo",
    "images",
    "volumesInUse",
    "volumesAttached",
    "config",
    "runtimeHandlers",
    "features",
    "declaredFeatures",
)


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of an admission review that the policies read."""

    operation: str
    group: str
    resource: str
    user: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: "status" for a request to nodes/status; "" for the resource itself.
    subresource: str = ""
    #: The request's namespace ("" for cluster-scoped resources).
    namespace: str = ""


@dataclass(frozen=True)
class Verdict:
    """``applies``: the policy matched the request; ``denials``: messages of failed rules."""

    applies: bool
    denials: tuple[str, ...] = ()
    #: What the failed rules' messageExpressions said (CEL model only).
    details: tuple[str, ...] = field(default=(), compare=False)

    @property
    def allowed(self) -> bool:
        return not self.denials


NOT_APPLICABLE = Verdict(applies=False)


def service_account_user(namespace: str, name: str = "gfd") -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _node_claim(request: AdmissionRequest) -> str | None:
    values = list(request.extra.get(NODE_NAME_CLAIM, ()))
    return values[0] if len(values) == 1 else None


def pod_bound_claims(node: str, pod: str = "gfd-abcde", uid: str = "0f0f") -> dict[str, list[str]]:
    """The extra claims of a token bound to Pod ``pod`` on ``node``."""
    return {NODE_NAME_CLAIM: [node], POD_NAME_CLAIM: [pod], POD_UID_CLAIM: [uid]}


def _pod_bound(request: AdmissionRequest) -> bool:
    return all(
        len(list(request.extra.get(claim, ()))) == 1
        for claim in (POD_NAME_CLAIM, POD_UID_CLAIM, NODE_NAME_CLAIM)
    )


def _changed(old: Mapping[str, str], new: Mapping[str, str]) -> set[str]:
    return {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}


def _operator_control(key: str) -> bool:
    return key.startswith(OPERATOR_CONTROL_PREFIXES) or key in OPERATOR_CONTROL_KEYS


def _other_managers(metadata: Mapping[str, Any], *, kept_only: bool = False) -> set[str]:
    """Identities of other managers' managedFields entries; with ``kept_only``, only of
    those that must stay (any that owns more than nvidia.com/ labels)."""
    return {
        f"{e.get('manager', '')}|{e.get('operation', '')}|{e.get('subresource', '')}"
        for e in metadata.get("managedFields") or []
        if e.get("manager") != GFD_FIELD_MANAGER and not (kept_only and _owns_only_vendor_labels(e))
    }


def _owns_only_vendor_labels(entry: Mapping[str, Any]) -> bool:
    fields = entry.get("fieldsV1")
    if not isinstance(fields, dict) or set(fields) - {"f:metadata"}:
        return False
    metadata = fields.get("f:metadata") or {}
    if set(metadata) - {"f:labels"}:
        return False
    labels = metadata.get("f:labels") or {}
    return all(key == "." or key.startswith("f:" + VENDOR_PREFIX) for key in labels)


def _metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


# Messages, as in the policies (the CEL twin reports the policy's own text).
NODE_OPERATION = "gfd may update its node, never create or delete nodes"
NODE_POD_BOUND = (
    "gfd may change a node only with a token bound to its Pod "
    "(pod-name, pod-uid and node-name claims)"
)
NODE_OWN = "gfd may change only the node it runs on (named in its pod-bound token)"
NODE_LABELS = "gfd may add, change or remove only node labels under nvidia.com/"
NODE_OPERATOR = "gfd may not add, change or remove the GPU Operator's control labels"
NODE_ANNOTATIONS = (
    "gfd may add, change or remove only its own node annotations (nvidia.com/gfd.labels, "
    "nvidia.com/gfd.taints, nvidia.com/gfd.timestamp, nvidia.com/gpu.devices, "
    "nvidia.com/gpu.topology)"
)
NODE_FOREIGN_TAINTS = (
    "gfd may add, change or remove only its own taint nvidia.com/gpu.health; "
    "every other taint must stay as it is"
)
NODE_TAINT_SHAPE = (
    "gfd's taint nvidia.com/gpu.health must be one entry with effect NoSchedule or NoExecute"
)
NODE_OTHER_FIELDS = (
    "gfd may change only node labels, annotations and its own taint, "
    "never the rest of spec, finalizers or owners"
)
NODE_MANAGED_FIELDS = "gfd may not rewrite the managedFields entries of other field managers"
NODEFEATURE_POD_BOUND = (
    "gfd may write its NodeFeature only with a token bound to its Pod "
    "(pod-name, pod-uid and node-name claims)"
)
NODEFEATURE_IDENTITY = (
    "gfd may write only the NodeFeature nvidia-features-for-<node> of its own node"
)
NODEFEATURE_LABELS = "gfd may publish only labels under nvidia.com/ in its NodeFeature"
NODEFEATURE_FEATURES = (
    "gfd may publish no raw features (spec.features must be empty) in its NodeFeature"
)
HEALTH_POD_BOUND = (
    "gfd may change a node's status only with a token bound to its Pod "
    "(pod-name, pod-uid and node-name claims)"
)
HEALTH_OWN = "gfd may change the status only of the node it runs on (named in its pod-bound token)"
HEALTH_FOREIGN_CONDITIONS = (
    "gfd may add, change or remove only the node condition GPUHealthy; "
    "every other condition must stay as it is"
)
HEALTH_CONDITION_SHAPE = (
    "gfd's GPUHealthy condition must be one entry with status True or False and one "
    "of gfd's reasons (GPUsHealthy, GPULost, DevicePluginMissing, "
    "AllocatableMismatch, FabricNotReady, FabricDegraded, NVLinkDegraded, XidError, "
    "XidStorm, GPUMemoryFailure, GPUResetRequired, UncorrectableECC, PCIeLinkDegraded, "
    "PCIeReplaysRising)"
)
HEALTH_STATUS_FIELDS = (
    "gfd may change only the GPUHealthy condition of a node's status, no other status field"
)
HEALTH_METADATA = (
    "gfd may not change a node's labels, annotations, finalizers, owners or spec through its status"
)
EVENTS_OPERATION = "gfd may create events, never change or delete them"
EVENTS_POD_BOUND = (
    "gfd may create events only with a token bound to its Pod "
    "(pod-name, pod-uid and node-name claims)"
)
EVENTS_NAMESPACE = "gfd may create events only in default, where Events about Nodes go"
EVENTS_OWN_NODE = (
    "gfd may create events only about the node it runs on (named in its pod-bound token)"
)
EVENTS_IDENTITY = (
    "gfd's events must be named <node>.<suffix> and report from its own node "
    "(source.host, reportingInstance)"
)


def node_policy_intent(request: AdmissionRequest, *, namespace: str) -> Verdict:
    """What gfd-node-labeler means: gfd's ServiceAccount, with a pod-bound token, may only
    update its own node (the token's node-name claim), changing only nvidia.com/ labels
    that are not the GPU Operator's controls, only its own annotations and, of spec, only
    its own taint (at most one, NoSchedule or NoExecute; every other taint as it was),
    leaving other field managers' entries alone. Denials carry the policy's message for
    each broken rule."""
    if (request.group, request.resource, request.subresource) != ("", "nodes", ""):
        return NOT_APPLICABLE
    if request.operation not in ("CREATE", "UPDATE", "DELETE"):
        return NOT_APPLICABLE
    if request.user != service_account_user(namespace):
        return NOT_APPLICABLE
    if request.operation != "UPDATE" or request.object is None or request.old_object is None:
        return Verdict(True, (NODE_OPERATION,))
    denials: list[str] = []
    if not _pod_bound(request):
        denials.append(NODE_POD_BOUND)
    claim = _node_claim(request)
    if claim is None or claim != _metadata(request.object).get("name"):
        denials.append(NODE_OWN)
    old_meta, new_meta = _metadata(request.old_object), _metadata(request.object)
    labels = _changed(old_meta.get("labels") or {}, new_meta.get("labels") or {})
    if not all(key.startswith(VENDOR_PREFIX) for key in labels):
        denials.append(NODE_LABELS)
    if any(_operator_control(key) for key in labels):
        denials.append(NODE_OPERATOR)
    annotations = _changed(old_meta.get("annotations") or {}, new_meta.get("annotations") or {})
    if not annotations <= GFD_ANNOTATIONS:
        denials.append(NODE_ANNOTATIONS)
    # Every stored Node has a spec (the API server always serialises it); reading a
    # missing one is an evaluation error in CEL, hence a denial of each rule on spec.
    if "spec" not in request.object or "spec" not in request.old_object:
        denials += [NODE_FOREIGN_TAINTS, NODE_TAINT_SHAPE, NODE_OTHER_FIELDS]
    else:
        old_spec, new_spec = request.old_object["spec"], request.object["spec"]
        old_taints, new_taints = old_spec.get("taints") or [], new_spec.get("taints") or []
        if _foreign_taints(new_taints) != _foreign_taints(old_taints):
            denials.append(NODE_FOREIGN_TAINTS)
        mine = _health_taints(new_taints)
        if mine != _health_taints(old_taints) and (
            len(mine) > 1 or any(t.get("effect") not in HEALTH_TAINT_EFFECTS for t in mine)
        ):
            denials.append(NODE_TAINT_SHAPE)
        unchanged = (
            all(
                (name in new_spec) == (name in old_spec)
                and new_spec.get(name) == old_spec.get(name)
                for name in NODE_SPEC_FIELDS
            )
            and (new_meta.get("finalizers") or []) == (old_meta.get("finalizers") or [])
            and (new_meta.get("ownerReferences") or []) == (old_meta.get("ownerReferences") or [])
        )
        if not unchanged:
            denials.append(NODE_OTHER_FIELDS)
    new_managers = _other_managers(new_meta)
    if not (
        _other_managers(old_meta, kept_only=True) <= new_managers
        and new_managers <= _other_managers(old_meta)
    ):
        denials.append(NODE_MANAGED_FIELDS)
    return Verdict(True, tuple(denials))


def _health_taints(taints: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [taint for taint in taints if taint.get("key") == HEALTH_TAINT_KEY]


def _foreign_taints(taints: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every taint but gfd's, in order (the policy compares them as lists)."""
    return [taint for taint in taints if taint.get("key") != HEALTH_TAINT_KEY]


def _health_entry_only(entry: Mapping[str, Any]) -> bool:
    """Whether a managedFields entry owns nothing but the GPUHealthy condition."""
    fields = entry.get("fieldsV1")
    if not isinstance(fields, dict) or set(fields) - {"f:status"}:
        return False
    status = fields.get("f:status") or {}
    if set(status) - {"f:conditions"}:
        return False
    conditions = status.get("f:conditions") or {}
    return set(conditions) <= {".", 'k:{"type":"GPUHealthy"}'}


def _managers(metadata: Mapping[str, Any], *, kept_only: bool = False) -> list[str]:
    """Identities of the managedFields entries not gfd's; with ``kept_only``, of those
    that must stay (all but the ones owning only the GPUHealthy condition)."""
    return [
        f"{e.get('manager', '')}|{e.get('operation', '')}|{e.get('subresource', '')}"
        for e in metadata.get("managedFields") or []
        if e.get("manager") != GFD_FIELD_MANAGER and not (kept_only and _health_entry_only(e))
    ]


def node_health_policy_intent(request: AdmissionRequest, *, namespace: str) -> Verdict:
    """What gfd-node-health means: gfd's ServiceAccount, with a pod-bound token, may change
    in the status of its own node only the GPUHealthy condition (add, change, remove; one
    entry, status True or False, one of gfd's reasons), leaving every other condition as
    it was (their order among themselves included), every other status field, the
    node's metadata and spec, and other field managers' entries."""
    if (request.group, request.resource, request.subresource) != ("", "nodes", "status"):
        return NOT_APPLICABLE
    if request.operation != "UPDATE" or request.user != service_account_user(namespace):
        return NOT_APPLICABLE
    new, old = request.object or {}, request.old_object or {}
    denials: list[str] = []
    if not _pod_bound(request):
        denials.append(HEALTH_POD_BOUND)
    claim = _node_claim(request)
    if claim is None or claim != _metadata(new).get("name"):
        denials.append(HEALTH_OWN)
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    old_conditions = old_status.get("conditions") or []
    new_conditions = new_status.get("conditions") or []

    def foreign(conditions: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [c for c in conditions if c.get("type") != HEALTH_CONDITION]

    if foreign(new_conditions) != foreign(old_conditions):
        denials.append(HEALTH_FOREIGN_CONDITIONS)
    mine = [c for c in new_conditions if c.get("type") == HEALTH_CONDITION]
    if len(mine) > 1 or any(
        c.get("status") not in ("True", "False") or c.get("reason") not in HEALTH_REASONS
        for c in mine
    ):
        denials.append(HEALTH_CONDITION_SHAPE)
    if any(
        (name in new_status) != (name in old_status) or new_status.get(name) != old_status.get(name)
        for name in NODE_STATUS_FIELDS
    ):
        denials.append(HEALTH_STATUS_FIELDS)
    old_meta, new_meta = _metadata(old), _metadata(new)
    # As in the node policy: a stored Node always has a spec, and a missing one is an
    # evaluation error (a denial) in CEL.
    unchanged = (
        "spec" in new
        and "spec" in old
        and new["spec"] == old["spec"]
        and all(
            (new_meta.get(key) or {}) == (old_meta.get(key) or {})
            for key in ("labels", "annotations")
        )
        and all(
            (new_meta.get(key) or []) == (old_meta.get(key) or [])
            for key in ("finalizers", "ownerReferences")
        )
    )
    if not unchanged:
        denials.append(HEALTH_METADATA)
    new_managers = set(_managers(new_meta))
    if not (
        set(_managers(old_meta, kept_only=True)) <= new_managers
        and new_managers <= set(_managers(old_meta))
    ):
        denials.append(NODE_MANAGED_FIELDS)
    return Verdict(True, tuple(denials))


def node_events_policy_intent(request: AdmissionRequest, *, namespace: str) -> Verdict:
    """What gfd-node-events means: gfd's ServiceAccount, with a pod-bound token, may only
    create events, in default, about the Node in its token (no related object),
    named ``<node>.<suffix>`` and reporting from that node."""
    if (request.group, request.resource, request.subresource) != ("", "events", ""):
        return NOT_APPLICABLE
    if request.operation not in ("CREATE", "UPDATE", "DELETE"):
        return NOT_APPLICABLE
    if request.user != service_account_user(namespace):
        return NOT_APPLICABLE
    if request.operation != "CREATE" or request.object is None:
        return Verdict(True, (EVENTS_OPERATION,))
    denials: list[str] = []
    if not _pod_bound(request):
        denials.append(EVENTS_POD_BOUND)
    if request.namespace != "default":
        denials.append(EVENTS_NAMESPACE)
    node = _node_claim(request)
    event = request.object
    involved = event.get("involvedObject") or {}
    if (
        node is None
        or involved.get("kind") != "Node"
        or involved.get("name") != node
        or involved.get("apiVersion", "v1") != "v1"
        or involved.get("namespace", "") != ""
        or "related" in event
    ):
        denials.append(EVENTS_OWN_NODE)
    if (
        node is None
        or not str(_metadata(event).get("name", "")).startswith(node + ".")
        or (event.get("source") or {}).get("host", node) != node
        or event.get("reportingInstance", node) != node
    ):
        denials.append(EVENTS_IDENTITY)
    return Verdict(True, tuple(denials))


def node_feature_policy_intent(request: AdmissionRequest, *, namespace: str) -> Verdict:
    """What gfd-node-feature-writer means: gfd's ServiceAccount, with a pod-bound token,
    may create or update only ``nvidia-features-for-<its node>``, labelled with its node,
    publishing only nvidia.com/ labels and no raw features."""
    if (request.group, request.resource) != ("nfd.k8s-sigs.io", "nodefeatures"):
        return NOT_APPLICABLE
    if request.operation not in ("CREATE", "UPDATE"):
        return NOT_APPLICABLE
    if request.user != service_account_user(namespace):
        return NOT_APPLICABLE
    denials: list[str] = []
    if not _pod_bound(request):
        denials.append(NODEFEATURE_POD_BOUND)
    claim = _node_claim(request)
    metadata = _metadata(request.object)
    if (
        claim is None
        or metadata.get("name") != f"nvidia-features-for-{claim}"
        or (metadata.get("labels") or {}).get(NODEFEATURE_NODE_LABEL) != claim
    ):
        denials.append(NODEFEATURE_IDENTITY)
    spec = (request.object or {}).get("spec") or {}
    spec_labels = spec.get("labels") or {}
    if not all(key.startswith(VENDOR_PREFIX) for key in spec_labels):
        denials.append(NODEFEATURE_LABELS)
    features = spec.get("features") or {}
    if any(features.get(part) for part in ("flags", "attributes", "instances")):
        denials.append(NODEFEATURE_FEATURES)
    return Verdict(True, tuple(denials))


class CelPolicy:
    """A rendered ValidatingAdmissionPolicy, evaluated by cel-python."""

    def __init__(self, policy: Mapping[str, Any]) -> None:
        self.name: str = policy["metadata"]["name"]
        spec = policy["spec"]
        if spec.get("failurePolicy", "Fail") != "Fail":
            raise ValueError(f"{self.name}: this model implements failurePolicy Fail only")
        self._rules = spec["matchConstraints"]["resourceRules"]
        self._env = celpy.Environment()
        self._conditions = [
            (c["name"], self._compile(c["expression"])) for c in spec.get("matchConditions", [])
        ]
        self._variables = [
            (v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])
        ]
        self._validations = [
            (
                self._compile(v["expression"]),
                v.get("message") or v["expression"],
                self._compile(v["messageExpression"]) if "messageExpression" in v else None,
            )
            for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> celpy.Runner:
        return self._env.program(self._env.compile(expression))

    def _matches(self, request: AdmissionRequest) -> bool:
        for rule in self._rules:
            groups, resources, operations = (
                rule["apiGroups"],
                rule["resources"],
                rule["operations"],
            )
            if (
                (request.group in groups or "*" in groups)
                and any(_resource_matches(pattern, request) for pattern in resources)
                and (request.operation in operations or "*" in operations)
            ):
                return True
        return False

    def evaluate(self, request: AdmissionRequest) -> Verdict:
        if not self._matches(request):
            return NOT_APPLICABLE
        activation: dict[str, Any] = {
            "request": json_to_cel(
                {
                    "operation": request.operation,
                    "namespace": request.namespace,
                    "userInfo": {
                        "username": request.user,
                        "extra": {k: list(v) for k, v in request.extra.items()},
                    },
                }
            ),
            "object": json_to_cel(_plain(request.object)),
            "oldObject": json_to_cel(_plain(request.old_object)),
        }
        for name, condition in self._conditions:
            result = _run(condition, activation)
            if isinstance(result, CELEvalError):
                # An erroring match condition fails the request under failurePolicy Fail.
                return Verdict(True, (f"matchCondition {name}: {result}",))
            if not _is_true(result):
                return NOT_APPLICABLE
        variables: dict[str, Any] = {}
        activation["variables"] = variables
        for name, program in self._variables:
            # A variable that errors only matters if a validation reads it; CEL's
            # error values propagate through the expressions that do.
            variables[name] = _run(program, {**activation, "variables": _cel_map(variables)})
        activation["variables"] = _cel_map(variables)
        denials: list[str] = []
        details: list[str] = []
        for program, message, message_program in self._validations:
            if not _is_true(_run(program, activation)):
                denials.append(message)
                if message_program is not None:
                    detail = _run(message_program, activation)
                    if isinstance(detail, str):
                        details.append(str(detail))
        return Verdict(True, tuple(denials), tuple(details))


def _resource_matches(pattern: str, request: AdmissionRequest) -> bool:
    """A rule's resource against the request's, as the API server matches them:
    ``nodes`` is the resource alone, ``nodes/status`` its subresource, ``*`` every
    resource (no subresource), ``nodes/*`` and ``*/status`` and ``*/*`` as they read."""
    resource, _, subresource = pattern.partition("/")
    if resource not in ("*", request.resource):
        return False
    return subresource in ("*", request.subresource) if subresource else not request.subresource


def _cel_map(values: Mapping[str, Any]) -> celpy.celtypes.MapType:
    return celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})


def _run(program: celpy.Runner, activation: Mapping[str, Any]) -> Any:
    try:
        return program.evaluate(dict(activation))
    except CELEvalError as error:
        return error


def _is_true(result: Any) -> bool:
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


def _plain(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if obj is None else dict(obj)
