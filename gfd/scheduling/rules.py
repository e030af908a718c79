"""The placement rules a node either meets or not: node selector, required node affinity,
taints and tolerations, and the cordon.

Each is kube-scheduler's (``NodeAffinity``, ``TaintToleration`` and ``NodeUnschedulable``
filters, ``k8s.io/component-helpers/scheduling/corev1``): a node selector matches when
every key has its value; required node affinity when any one term matches, a term when
all its expressions and fields do (a term with neither matches nothing); ``NotIn`` and
``DoesNotExist`` match a node without the label; ``Gt`` and ``Lt`` compare base-10 64-bit
integers and match nothing that is not one. A ``NoSchedule`` or ``NoExecute`` taint must
be tolerated (``PreferNoSchedule`` never blocks); a toleration with no effect tolerates
every effect, one with ``Exists`` and no key tolerates every taint.

Each failing rule is a :class:`Miss`: what the pod asks, what the node has, and what to
do about it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gfd.base.frozen import frozen_dataclass

#: The taint a cordoned node is judged by (the scheduler's NodeUnschedulable filter).
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: What the node lifecycle controller puts on a node whose kubelet is not Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
#: What the API server's DefaultTolerationSeconds admission plugin adds to every pod that
#: has none for them: a manifest is judged as the pod it will become.
DEFAULT_TOLERATIONS = (
    {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {
        "key": UNREACHABLE_TAINT,
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)
#: The NodeAffinity PreFilter's words when the terms name nodes that no term can share,
#: and for a node outside the names they share.
NAMES_CONFLICT = "pod affinity terms conflict"
NOT_NAMED = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
_INTEGER = re.compile(r"^[+-]?\d+$")
_INT64 = (-(2**63), 2**63 - 1)


@frozen_dataclass
class Miss:
    """One rule the node fails: ``filter`` names the scheduler's filter, ``reason`` is the
    scheduler's own words for it, ``detail`` says what was asked and found, ``fix`` what to
    do."""

    filter: str
    reason: str
    detail: str
    fix: str


def _int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: leading zeros and a sign allowed."""
    if len(text) > 100 or not _INTEGER.match(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One ``matchExpressions`` (or, with the node's fields as ``labels``, ``matchFields``)
    entry against the node."""
    key = str(expression.get("key", ""))
    operator = expression.get("operator")
    values = [str(value) for value in expression.get("values") or []]
    present = key in labels
    value = labels.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, bound = _int64(value), _int64(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def show_expression(expression: Mapping[str, Any]) -> str:
    """``key In [a, b]``, as a person reads it."""
    key = expression.get("key", "")
    operator = expression.get("operator", "?")
    values = expression.get("values") or []
    if operator in ("Exists", "DoesNotExist"):
        return f"{key} {operator}"
    if operator in ("Gt", "Lt"):
        return f"{key} {operator} {values[0] if values else '?'}"
    return f"{key} {operator} [{', '.join(str(v) for v in values)}]"


def _found(key: str, labels: Mapping[str, str], what: str = "label") -> str:
    return f"{key}={labels[key]}" if key in labels else f"no {what} {key}"


def term_misses(
    term: Mapping[str, Any], labels: Mapping[str, str], fields: Mapping[str, str]
) -> list[str]:
    """The expressions and fields of one node selector term the node fails, each with
    what the node has; an empty term fails as a whole."""
    misses: list[str] = []
    expressions = term.get("matchExpressions") or []
    field_terms = term.get("matchFields") or []
    if not expressions and not field_terms:
        return ["an empty term matches no node"]
    for expression in expressions:
        if not expression_matches(expression, labels):
            key = str(expression.get("key", ""))
            misses.append(f"{show_expression(expression)} (node: {_found(key, labels)})")
    for field in field_terms:
        if not expression_matches(field, fields):
            key = str(field.get("key", ""))
            misses.append(f"field {show_expression(field)} (node: {_found(key, fields, 'field')})")
    return misses


def named_nodes(spec: Mapping[str, Any]) -> set[str] | None:
    """The NodeAffinity PreFilter: when every required term names nodes (``matchFields``
    ``metadata.name In``), only the nodes they name are considered (per term the names
    all its fields share, then the union over terms); None when any term names none, so
    every node is considered. An empty set: the terms conflict, no node is."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        shared: set[str] | None = None
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                values = {str(v) for v in field.get("values") or []}
                shared = values if shared is None else shared & values
        if shared is None:
            return None
        names |= shared
    return names


def prefilter_misses(named: set[str] | None, node_name: str) -> list[Miss]:
    """A node the pod's affinity does not name (see :func:`named_nodes`)."""
    if named is None or node_name in named:
        return []
    if not named:
        return [
            Miss(
                "PreFilter",
                NAMES_CONFLICT,
                "every required node affinity term names nodes by metadata.name, and no name "
                "is shared by all the fields of any term",
                "name the node in each term once (matchFields metadata.name In [...])",
            )
        ]
    return [
        Miss(
            "PreFilter",
            NOT_NAMED,
            f"the pod's affinity names only {', '.join(sorted(named))} (matchFields metadata.name)",
            "name this node in the affinity, or drop the names",
        )
    ]


def node_fields(node: Mapping[str, Any]) -> dict[str, str]:
    """The fields ``matchFields`` may name: only ``metadata.name``."""
    return {"metadata.name": str((node.get("metadata") or {}).get("name", ""))}


def affinity_misses(spec: Mapping[str, Any], node: Mapping[str, Any]) -> list[Miss]:
    """The pod's node selector and required node affinity against the node."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    misses: list[Miss] = []
    selector = spec.get("nodeSelector") or {}
    for key, want in sorted(selector.items()):
        if labels.get(key) != want:
            misses.append(
                Miss(
                    "NodeAffinity",
                    "node(s) didn't match Pod's node affinity/selector",
                    f"nodeSelector {key}={want} (node: {_found(key, labels)})",
                    _label_fix(key, labels),
                )
            )
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if terms is not None:
        fields = node_fields(node)
        failing = [term_misses(term, labels, fields) for term in terms]
        if not terms or all(failing):
            if len(terms) <= 1:
                detail = "required node affinity: " + (
                    "; ".join(failing[0]) if failing else "no nodeSelectorTerms: matches no node"
                )
            else:
                detail = "required node affinity, no term matches: " + " | ".join(
                    f"term {number}: {'; '.join(miss)}" for number, miss in enumerate(failing, 1)
                )
            misses.append(
                Miss(
                    "NodeAffinity",
                    "node(s) didn't match Pod's node affinity/selector",
                    detail,
                    "change the affinity (gfd select writes one from requirements), or "
                    "label the node",
                )
            )
    return misses


def _label_fix(key: str, labels: Mapping[str, str]) -> str:
    if key.startswith("nvidia.com/") and "nvidia.com/gpu.count" not in labels:
        return "this node has no gfd GPU labels: not a GPU node, or gfd is not running on it"
    return "ask for a value a node has (gfd select lists them), or label the node"


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def show_taint(taint: Mapping[str, Any]) -> str:
    """A taint as ``{key: value}``."""
    return f"{{{taint.get('key', '')}: {taint.get('value') or ''}}}"


def taint_misses(
    spec: Mapping[str, Any], node: Mapping[str, Any], *, health_taint: str, why: str | None
) -> list[Miss]:
    """The node's NoSchedule and NoExecute taints the pod does not tolerate, and a cordon
    it does not tolerate. ``why``: the ``GPUHealthy`` condition's message, quoted for gfd's
    own health taint (``health_taint``)."""
    tolerations: Sequence[Mapping[str, Any]] = [
        t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)
    ] + list(DEFAULT_TOLERATIONS)
    node_spec = node.get("spec") or {}
    misses: list[Miss] = []
    if node_spec.get("unschedulable"):
        cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        if not any(tolerates(t, cordon) for t in tolerations):
            misses.append(
                Miss(
                    "NodeUnschedulable",
                    "node(s) were unschedulable",
                    "the node is cordoned (spec.unschedulable: true)",
                    "kubectl uncordon the node once it is fit again",
                )
            )
    for taint in node_spec.get("taints") or []:
        if not isinstance(taint, Mapping) or taint.get("effect") not in BLOCKING_EFFECTS:
            continue
        if any(tolerates(t, taint) for t in tolerations):
            continue
        key = taint.get("key")
        shown = f"{show_taint(taint)} ({taint.get('effect')})"
        if key == health_taint:
            detail = f"gfd's health taint {shown}" + (f": GPUHealthy says {why!r}" if why else "")
            fix = (
                "the GPUs are unhealthy: see docs/health.md for the reason "
                f"{taint.get('value')}; the taint goes when gfd finds them healthy"
            )
        elif key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
            detail = f"taint {shown}: the node is not Ready"
            fix = "the kubelet is not reporting Ready: look at the node (kubectl describe node)"
        else:
            detail = f"taint {shown}"
            fix = f"add a toleration for {key} if the pod may run there"
        # kube-scheduler v1.36's words; before 1.33 or so it named the taint,
        # "untolerated taint {key: value}", which the detail still does.
        misses.append(Miss("TaintToleration", "node(s) had untolerated taint(s)", detail, fix))
    return misses
