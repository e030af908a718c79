"""Node selector, affinity operators and tolerations, as
``k8s.io/component-helpers/scheduling/corev1`` and ``labels.Requirement`` define them
(the cases below are the documented semantics; tests/records/kube-scheduler/ holds the
real scheduler's answers on a corpus)."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.scheduling.rules import affinity_misses, expression_matches, taint_misses, tolerates

LABELS = {"a": "1", "big": "9223372036854775807", "neg": "-5", "word": "hopper", "zero": "08"}


@pytest.mark.parametrize(
    ("key", "operator", "values", "matches"),
    [
        ("a", "In", ["1", "2"], True),
        ("a", "In", ["2"], False),
        ("missing", "In", ["1"], False),
        ("a", "NotIn", ["2"], True),
        ("a", "NotIn", ["1"], False),
        ("missing", "NotIn", ["1"], True),  # absent matches NotIn
        ("a", "Exists", [], True),
        ("missing", "Exists", [], False),
        ("missing", "DoesNotExist", [], True),
        ("a", "DoesNotExist", [], False),
        ("a", "Gt", ["0"], True),
        ("a", "Gt", ["1"], False),
        ("neg", "Gt", ["-6"], True),
        ("neg", "Lt", ["-4"], True),
        ("zero", "Gt", ["7"], True),  # base 10, leading zero allowed
        ("word", "Gt", ["0"], False),  # not an integer: no match either way
        ("word", "Lt", ["0"], False),
        ("missing", "Lt", ["100"], False),
        ("big", "Gt", ["9223372036854775806"], True),
        ("a", "Gt", ["x"], False),
        ("a", "Gt", ["1", "2"], False),
        ("a", "Unknown", ["1"], False),
    ],
)
def test_operators(key: str, operator: str, values: list[str], matches: bool) -> None:
    assert (
        expression_matches({"key": key, "operator": operator, "values": values}, LABELS) is matches
    )


def _node(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "gpu-1", "labels": labels}, "spec": spec, "status": {}}


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def test_terms_are_ored_and_expressions_anded_and_an_empty_term_matches_nothing() -> None:
    node = _node({"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.count": "8"})
    hopper = {"key": "nvidia.com/gpu.family", "operator": "In", "values": ["hopper"]}
    many = {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["8"]}
    assert not affinity_misses(
        _affinity({"matchExpressions": [many]}, {"matchExpressions": [hopper]}), node
    )
    (miss,) = affinity_misses(_affinity({"matchExpressions": [hopper, many]}), node)
    assert (
        miss.detail
        == "required node affinity: nvidia.com/gpu.count Gt 8 (node: nvidia.com/gpu.count=8)"
    )
    assert affinity_misses(_affinity({}), node)


def test_match_fields_name_the_node() -> None:
    node = _node({})
    field = {"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}
    assert not affinity_misses(_affinity({"matchFields": [field]}), node)
    other = dict(field, values=["gpu-2"])
    (miss,) = affinity_misses(_affinity({"matchFields": [other]}), node)
    assert "field metadata.name In [gpu-2] (node: metadata.name=gpu-1)" in miss.detail


def test_a_node_selector_names_each_key_it_misses_with_the_nodes_value() -> None:
    node = _node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
    misses = affinity_misses(
        {"nodeSelector": {"nvidia.com/gpu.product": "H100", "zone": "a"}}, node
    )
    assert [m.detail for m in misses] == [
        "nodeSelector nvidia.com/gpu.product=H100 (node: nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3)",
        "nodeSelector zone=a (node: no label zone)",
    ]


TAINT = {"key": "nvidia.com/gpu.health", "value": "XidCritical", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"operator": "Exists"}, True),  # no key: every taint
        ({"key": "nvidia.com/gpu.health", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu.health", "value": "XidCritical"}, True),  # Equal by default
        ({"key": "nvidia.com/gpu.health", "operator": "Equal", "value": "Other"}, False),
        ({"key": "nvidia.com/gpu.health", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu.health", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_forms(toleration: dict[str, str], tolerated: bool) -> None:
    assert tolerates(toleration, TAINT) is tolerated


def test_only_noschedule_and_noexecute_block_and_gfds_taint_quotes_the_condition() -> None:
    node = _node(
        {},
        taints=[TAINT, {"key": "soft", "effect": "PreferNoSchedule"}],
        unschedulable=True,
    )
    misses = taint_misses(
        {}, node, health_taint="nvidia.com/gpu.health", why="XidCritical: GPU 3: Xid 79"
    )
    assert [m.reason for m in misses] == [
        "node(s) were unschedulable",
        "node(s) had untolerated taint(s)",
    ]
    assert "GPUHealthy says 'XidCritical: GPU 3: Xid 79'" in misses[1].detail
    cordon_tolerated = {
        "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    }
    assert len(taint_misses(cordon_tolerated, node, health_taint="x", why=None)) == 1
