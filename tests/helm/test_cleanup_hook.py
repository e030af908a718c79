"""The chart's uninstall cleanup (templates/cleanup-hook.yaml), judged by Helm's engine.

With the node sink, ``helm uninstall`` runs a post-delete Job: ``gfd cleanup --all-nodes``,
waiting first for the pods of the DaemonSet's own selector, under a ServiceAccount whose
rights are exactly those the cleanup was tested with on the API server emulator
(tests/cleanup/test_cleanup.py) and exist only while the hook runs. gfd's own parser must accept
the Job's arguments as that cleanup.
"""

from __future__ import annotations

from typing import Any

import pytest

from gfd.cli import parse_command_line
from tests.cleanup.test_cleanup import CLEANUP_RULES
from tests.deploy.manifests import find, one, pod_spec
from tests.helm.chart import MATRIX, Helm, is_hook, load_chart
from tests.kube_fixtures import NAMESPACE

HOOK_KINDS = ["ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"]
POLICY_KINDS = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


@pytest.fixture(scope="module")
def helm() -> Helm:
    return load_chart()


def hooks(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [obj for obj in objects if is_hook(obj)]


def test_with_the_node_sink_uninstall_runs_the_cleanup_after_the_release_is_deleted(
    helm: Helm,
) -> None:
    found = hooks(helm.template({}))
    assert sorted(obj["kind"] for obj in found) == sorted(HOOK_KINDS + POLICY_KINDS)
    for obj in found:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-delete"
        policy = annotations["helm.sh/hook-delete-policy"].split(",")
        assert {"before-hook-creation", "hook-succeeded"} <= set(policy)
        # The account and its rights: made before the Job, gone whatever its outcome.
        if obj["kind"] != "Job":
            assert int(annotations["helm.sh/hook-weight"]) < 0
            assert "hook-failed" in policy
    (job,) = find(found, "Job")
    assert int(job["metadata"]["annotations"]["helm.sh/hook-weight"]) == 0
    # The policy narrowing the account is in force before the rights are granted.
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in found}
    assert weights["ValidatingAdmissionPolicy"] < weights["ClusterRoleBinding"] < weights["Job"]


def test_without_admission_policies_the_hook_has_none(helm: Helm) -> None:
    kinds = sorted(obj["kind"] for obj in hooks(helm.template(MATRIX["no-admission-policies"])))
    assert kinds == HOOK_KINDS


def test_the_policy_names_the_cleanup_s_account_of_the_release(helm: Helm) -> None:
    found = hooks(helm.template({}, release="gpu-labels", namespace="gpu-ops"))
    policy = one(found, "ValidatingAdmissionPolicy")
    (condition,) = policy["spec"]["matchConditions"]
    user = "system:serviceaccount:gpu-ops:gpu-labels-gfd-cleanup"
    assert condition["expression"] == f"request.userInfo.username == '{user}'"
    assert one(found, "ValidatingAdmissionPolicyBinding")["spec"] == {
        "policyName": "gpu-labels-gfd-cleanup",
        "validationActions": ["Deny"],
    }


@pytest.mark.parametrize(
    "values",
    [MATRIX["nfd"], MATRIX["node-feature-api"], {"cleanup": {"onUninstall": False}}],
    ids=["nfd", "node-feature-api", "off"],
)
def test_without_the_node_sink_or_switched_off_there_is_no_hook(
    helm: Helm, values: dict[str, Any]
) -> None:
    assert hooks(helm.template(values)) == []


def _rules(role: dict[str, Any], namespace: str | None = None) -> set[tuple[str, ...]]:
    return {
        (verb, resource, *((namespace,) if namespace else ()))
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if rule["apiGroups"] == [""]
    }


def test_the_cleanup_has_exactly_the_rights_it_was_tested_with(helm: Helm) -> None:
    found = hooks(helm.template({}, release="gpu-labels", namespace="gpu-ops"))
    (cluster_role,) = find(found, "ClusterRole")
    (role,) = find(found, "Role")
    # The Role grants in the release's namespace; the emulator's cluster has gfd in NAMESPACE.
    granted = _rules(cluster_role) | _rules(role, NAMESPACE)
    assert granted == set(CLEANUP_RULES)
    account = {"kind": "ServiceAccount", "name": "gpu-labels-gfd-cleanup", "namespace": "gpu-ops"}
    for binding in find(found, "ClusterRoleBinding") + find(found, "RoleBinding"):
        assert binding["subjects"] == [account]
        assert binding["roleRef"]["name"] == "gpu-labels-gfd-cleanup"
    pod = pod_spec(one(found, "Job"))
    assert pod["serviceAccountName"] == "gpu-labels-gfd-cleanup"


def test_the_job_is_gfd_s_cleanup_of_every_node_after_the_agents_pods(helm: Helm) -> None:
    objects = helm.template({}, release="gpu-labels", namespace="gpu-ops")
    job = one(hooks(objects), "Job")
    container = pod_spec(job)["containers"][0]
    daemonset = one(objects, "DaemonSet")
    assert container["image"] == daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
    namespace, _ = parse_command_line(container["args"])
    assert (namespace.command, namespace.all_nodes) == ("cleanup", True)
    waited = dict(part.split("=", 1) for part in namespace.wait_for_pods.split(","))
    assert waited == daemonset["spec"]["selector"]["matchLabels"]
    assert "--namespace=gpu-ops" in container["args"]
    # The Job's own pod is not one it waits for.
    own = job["spec"]["template"]["metadata"]["labels"]
    assert not all(own.get(key) == value for key, value in waited.items())


def test_the_job_runs_hardened_with_no_host_access(helm: Helm) -> None:
    pod = pod_spec(one(hooks(helm.template({})), "Job"))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert all("hostPath" not in volume for volume in pod["volumes"])
    assert not pod.get("hostNetwork") and not pod.get("hostPID")


def test_the_timeout_value_bounds_the_job(helm: Helm) -> None:
    job = one(hooks(helm.template({"cleanup": {"timeoutSeconds": 900}})), "Job")
    assert job["spec"]["activeDeadlineSeconds"] == 900
