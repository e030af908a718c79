"""The uninstall cleanup's admission policy (templates/cleanup-hook.yaml), run by cel-python.

The policy narrows the cleanup's ServiceAccount to taking gfd's things off nodes. Every
write ``gfd cleanup`` makes on the API server emulator, from a node as a running gfd leaves
it, must pass; every write that adds, changes, or removes anything else must be refused.
What cel-python cannot show (the API server's own CEL environment and type checks) is
left to a real server (tests/realkube, where one is configured: there the hook's objects
get a server-side dry run).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from gfd.cleanup import clean_node
from gfd.kube_api import KubeClient
from tests.cleanup.test_cleanup import (  # noqa: F401 - fixtures are registered by import
    CLEANUP_USER,
    cleaner,
    cleanup_kubeconfig,
    leave_as_gfd_does,
    node_labels,
)
from tests.deploy.admission_model import (
    AdmissionRequest,
    CelPolicy,
    pod_bound_claims,
    service_account_user,
)
from tests.deploy.manifests import one
from tests.emulator import ApiServerEmulator
from tests.helm.chart import DEFAULT_NAMESPACE, load_chart
from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    NODE,
    client,
    cluster,
    emulator,
    kubeconfig,
    request_timeout,
    stop,
)

CHART_USER = service_account_user(DEFAULT_NAMESPACE, "gfd-cleanup")


@pytest.fixture(scope="module")
def policy() -> CelPolicy:
    objects = load_chart().template({})
    return CelPolicy(one(objects, "ValidatingAdmissionPolicy", "gfd-cleanup"))


def request(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    status: bool = False,
    user: str = CHART_USER,
    pod_bound: bool = True,
) -> AdmissionRequest:
    extra = pod_bound_claims(NODE, pod="gfd-cleanup-x7k2p") if pod_bound else {}
    return AdmissionRequest(
        "UPDATE", "", "nodes", user, new, old, extra, subresource="status" if status else ""
    )


@pytest.fixture
def cleanup_writes(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleaner: KubeClient,  # noqa: F811
    stop: threading.Event,  # noqa: F811
) -> list[tuple[dict[str, Any], dict[str, Any], bool]]:
    """``(before, after, to the status subresource)`` of each write gfd cleanup makes on a
    node as a running gfd leaves it (no other writer between them)."""
    leave_as_gfd_does(emulator, client)
    before: list[tuple[dict[str, Any], bool]] = []

    def snapshot(api: ApiServerEmulator) -> None:
        before.append((copy.deepcopy(api.node(NODE)), False))

    emulator.before(snapshot, method="PATCH", times=None, user=CLEANUP_USER)
    emulator.clear_log()
    clean_node(cleaner, NODE, stop)
    paths = [r.path for r in emulator.requests if r.method == "PATCH" and r.user == CLEANUP_USER]
    assert len(paths) == len(before) == 3
    after = [node for node, _ in before[1:]] + [emulator.node(NODE)]
    return [
        (old, new, path.endswith("/status"))
        for (old, _), new, path in zip(before, after, paths, strict=True)
    ]


def test_every_write_of_the_cleanup_is_admitted(
    policy: CelPolicy, cleanup_writes: list[tuple[dict[str, Any], dict[str, Any], bool]]
) -> None:
    assert [status for _, _, status in cleanup_writes] == [False, False, True]
    for old, new, status in cleanup_writes:
        verdict = policy.evaluate(request(old, new, status=status))
        assert verdict.applies and verdict.allowed, verdict.denials


def _node_as_gfd_leaves_it(
    cleanup_writes: list[tuple[dict[str, Any], dict[str, Any], bool]],
) -> dict[str, Any]:
    return copy.deepcopy(cleanup_writes[0][0])


def _labels(node: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = node["metadata"]["labels"]
    return labels


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    annotations: dict[str, str] = node["metadata"]["annotations"]
    return annotations


REFUSED = {
    "adds-a-label": lambda n: _labels(n).update({"nvidia.com/gpu.fake": "1"}),
    "changes-a-label": lambda n: _labels(n).update({"nvidia.com/gpu.count": "9"}),
    "removes-a-label-outside-nvidia": lambda n: _labels(n).pop("kubernetes.io/hostname"),
    "removes-an-operator-control-label": lambda n: _labels(n).pop("nvidia.com/gpu.present"),
    "adds-an-annotation": lambda n: _annotations(n).update({"example.com/x": "1"}),
    "changes-gfd-s-annotation": lambda n: _annotations(n).update(
        {"nvidia.com/gfd.labels": "nvidia.com/gpu.count"}
    ),
    "removes-another-annotation": lambda n: _annotations(n).pop("node.alpha.kubernetes.io/ttl"),
    "removes-another-taint": lambda n: n["spec"].update(
        taints=[t for t in n["spec"]["taints"] if t["key"] != "dedicated"]
    ),
    "changes-gfd-s-taint": lambda n: n["spec"]["taints"][-1].update(effect="NoExecute"),
    "adds-a-taint": lambda n: n["spec"]["taints"].append(
        {"key": "example.com/x", "effect": "NoSchedule"}
    ),
    "cordons-the-node": lambda n: n["spec"].update(unschedulable=True),
    "adds-a-finalizer": lambda n: n["metadata"].update(finalizers=["example.com/hold"]),
}

#: The rule each refusal must come from (a fragment of its message).
RULE = {
    "adds-a-label": "never add or change one",
    "changes-a-label": "never add or change one",
    "removes-a-label-outside-nvidia": "only node labels under nvidia.com/",
    "removes-an-operator-control-label": "never the GPU Operator's control labels",
    "adds-an-annotation": "gfd's own node annotations",
    "changes-gfd-s-annotation": "gfd's own node annotations",
    "removes-another-annotation": "gfd's own node annotations",
    "removes-another-taint": "only remove taints under nvidia.com/gpu.health",
    "changes-gfd-s-taint": "only remove taints under nvidia.com/gpu.health",
    "adds-a-taint": "only remove taints under nvidia.com/gpu.health",
    "cordons-the-node": "the rest of a node's spec",
    "adds-a-finalizer": "its finalizers or owners",
    "removes-ready": "only remove the GPUHealthy condition",
    "changes-gpuhealthy": "only remove the GPUHealthy condition",
    "changes-capacity": "status but for the GPUHealthy condition",
}

REFUSED_IN_STATUS = {
    "removes-ready": lambda n: n["status"].update(
        conditions=[c for c in n["status"]["conditions"] if c["type"] != "Ready"]
    ),
    "changes-gpuhealthy": lambda n: [
        c.update(status="True") for c in n["status"]["conditions"] if c["type"] == "GPUHealthy"
    ],
    "changes-capacity": lambda n: n["status"].update(capacity={"nvidia.com/gpu": "0"}),
}


@pytest.mark.parametrize("change", sorted(REFUSED))
def test_a_write_that_is_not_a_removal_of_gfd_s_is_refused(
    policy: CelPolicy,
    cleanup_writes: list[tuple[dict[str, Any], dict[str, Any], bool]],
    change: str,
) -> None:
    old = _node_as_gfd_leaves_it(cleanup_writes)
    new = copy.deepcopy(old)
    REFUSED[change](new)
    assert new != old
    verdict = policy.evaluate(request(old, new))
    assert verdict.applies
    (denial,) = verdict.denials
    assert RULE[change] in denial


@pytest.mark.parametrize("change", sorted(REFUSED_IN_STATUS))
def test_a_status_write_other_than_removing_gpuhealthy_is_refused(
    policy: CelPolicy,
    cleanup_writes: list[tuple[dict[str, Any], dict[str, Any], bool]],
    change: str,
) -> None:
    old = _node_as_gfd_leaves_it(cleanup_writes)
    new = copy.deepcopy(old)
    REFUSED_IN_STATUS[change](new)
    assert new != old
    verdict = policy.evaluate(request(old, new, status=True))
    assert verdict.applies
    (denial,) = verdict.denials
    assert RULE[change] in denial


def test_only_a_pod_bound_token_of_the_cleanup_s_account_is_judged_and_admitted(
    policy: CelPolicy, cleanup_writes: list[tuple[dict[str, Any], dict[str, Any], bool]]
) -> None:
    old, new, _ = cleanup_writes[0]
    assert not policy.evaluate(request(old, new, pod_bound=False)).allowed
    gfd = service_account_user(DEFAULT_NAMESPACE)
    assert not policy.evaluate(request(old, new, user=gfd)).applies
