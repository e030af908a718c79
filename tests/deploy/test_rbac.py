"""Least privilege per overlay: exactly the API access its sink needs, bound to gfd's
ServiceAccount, and an admission policy wherever RBAC alone grants too much."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import NAMESPACE, OVERLAYS, args_of, find, render, workload

#: (kind of role, API group, resource, verbs) each overlay must grant, and nothing else.
NODE_SINK = {
    ("ClusterRole", "", "nodes", frozenset({"get", "patch"})),
    # The GPUHealthy condition, and an Event per change of it, in default.
    ("ClusterRole", "", "nodes/status", frozenset({"patch"})),
    ("Role", "", "events", frozenset({"create"})),
    # The device-plugin check on DRA nodes: its node's ResourceSlices, read only.
    ("ClusterRole", "resource.k8s.io", "resourceslices", frozenset({"list"})),
}
NODE_SINK_POLICIES = {"gfd-node-labeler", "gfd-node-health", "gfd-node-events"}
NODE_FEATURE_SINK = {
    ("Role", "nfd.k8s-sigs.io", "nodefeatures", frozenset({"get", "create", "update"})),
    ("Role", "", "pods", frozenset({"get"})),
}
EXPECTED_GRANTS: dict[str, set[tuple[str, str, str, frozenset[str]]]] = {
    "standalone": NODE_SINK,
    "nfd": set(),
    "node-feature-api": NODE_FEATURE_SINK,
    "oneshot-job": NODE_SINK,
    "vgpu": NODE_SINK,
    # The node sink's grants already hold what --label-mode auto reads: the Node and
    # the DRA driver's ResourceSlices (list).
    "dra": NODE_SINK,
}
EXPECTED_POLICIES = {
    "standalone": NODE_SINK_POLICIES,
    "nfd": set(),
    "node-feature-api": {"gfd-node-feature-writer"},
    "oneshot-job": NODE_SINK_POLICIES,
    "vgpu": NODE_SINK_POLICIES,
    "dra": NODE_SINK_POLICIES,
}
#: What each policy matches: (API group, resource, operations). RBAC's "nodes" does not
#: cover nodes/status, nor does a policy's: each request meets exactly one policy.
POLICY_MATCHES = {
    "gfd-node-labeler": {("", "nodes", frozenset({"CREATE", "UPDATE", "DELETE"}))},
    "gfd-node-health": {("", "nodes/status", frozenset({"UPDATE"}))},
    "gfd-node-events": {("", "events", frozenset({"CREATE", "UPDATE", "DELETE"}))},
    "gfd-node-feature-writer": {
        ("nfd.k8s-sigs.io", "nodefeatures", frozenset({"CREATE", "UPDATE"}))
    },
}


def grants(objects: list[dict[str, Any]]) -> set[tuple[str, str, str, frozenset[str]]]:
    found = set()
    for role in find(objects, "ClusterRole") + find(objects, "Role"):
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    found.add((role["kind"], group, resource, frozenset(rule["verbs"])))
    return found


def test_every_overlay_has_an_expectation() -> None:
    assert set(EXPECTED_GRANTS) == set(OVERLAYS) == set(EXPECTED_POLICIES)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grants_are_exactly_what_the_sink_needs(overlay: str) -> None:
    assert grants(render(overlay)) == EXPECTED_GRANTS[overlay]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_wildcards_anywhere(overlay: str) -> None:
    for role in find(render(overlay), "ClusterRole") + find(render(overlay), "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: {field}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_role_is_bound_to_gfd_only(overlay: str) -> None:
    objects = render(overlay)
    roles = {(r["kind"], r["metadata"]["name"]) for r in find(objects, "ClusterRole")}
    roles |= {(r["kind"], r["metadata"]["name"]) for r in find(objects, "Role")}
    bindings = find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")
    bound = set()
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gfd", "namespace": NAMESPACE}
        ]
        ref = binding["roleRef"]
        bound.add((ref["kind"], ref["name"]))
        # A RoleBinding may reference only a Role of its own namespace, never a ClusterRole
        # (that would still grant cluster-wide verbs inside the namespace).
        if binding["kind"] == "RoleBinding":
            assert ref["kind"] == "Role"
    assert bound == roles


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_sink_flags_match_the_grants(overlay: str) -> None:
    objects = render(overlay)
    args = args_of(workload(objects))
    resources = {resource for _, _, resource, _ in grants(objects)}
    assert ("--patch-node" in args) == ("nodes" in resources)
    assert ("--use-node-feature-api" in args) == ("nodefeatures" in resources)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_admission_policies_where_rbac_is_too_broad(overlay: str) -> None:
    objects = render(overlay)
    policies = {p["metadata"]["name"] for p in find(objects, "ValidatingAdmissionPolicy")}
    assert policies == EXPECTED_POLICIES[overlay]
    bindings = find(objects, "ValidatingAdmissionPolicyBinding")
    assert {b["spec"]["policyName"] for b in bindings} == policies
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
    for policy in find(objects, "ValidatingAdmissionPolicy"):
        assert policy["spec"]["failurePolicy"] == "Fail"
        matches = {
            (group, resource, frozenset(rule["operations"]))
            for rule in policy["spec"]["matchConstraints"]["resourceRules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        }
        assert matches == POLICY_MATCHES[policy["metadata"]["name"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_granted_write_meets_a_policy(overlay: str) -> None:
    # Each resource gfd may write is matched by a policy that names it exactly (a
    # policy on "nodes" never sees "nodes/status").
    objects = render(overlay)
    matched = {
        (group, resource)
        for policy in find(objects, "ValidatingAdmissionPolicy")
        for group, resource, _ in POLICY_MATCHES[policy["metadata"]["name"]]
    }
    written = {
        (group, resource)
        for _, group, resource, verbs in grants(objects)
        if verbs - {"get", "list", "watch"}
    }
    assert written <= matched


def test_emulator_grants_what_the_manifests_grant() -> None:
    # The API server emulator authorises gfd with a rule set of its own; it must be
    # the union of what the overlays grant, or sink tests would pass against
    # permissions no cluster gives.
    # A Role outside gfd's own namespace is a three-part rule there (the events Role in
    # default); a ClusterRole's and one in gfd's namespace are two-part.
    server = pytest.importorskip("tests.emulator.server")
    manifests: set[tuple[str, ...]] = set()
    for overlay in OVERLAYS:
        objects = render(overlay)
        for role in find(objects, "ClusterRole") + find(objects, "Role"):
            namespace = role["metadata"].get("namespace")
            scope = () if role["kind"] == "ClusterRole" or namespace == NAMESPACE else (namespace,)
            for rule in role["rules"]:
                for resource in rule["resources"]:
                    manifests.update((verb, resource, *scope) for verb in rule["verbs"])
    assert manifests == set(server.GFD_RULES)
