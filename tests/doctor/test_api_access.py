"""The API access list (:func:`gfd.app.api_access.required_access`) is what gfd really calls,
and what deploy/ really grants.

- Against the emulator, a one-shot gfd whose token holds exactly the listed access, and
  nothing more, publishes without one refusal, and every request it sends is one listed;
  the scenarios are arranged so that each listed call is made (a device plugin problem at
  once, so the condition changes and an Event is recorded; a NodeFeature created, then
  replaced).
- Each overlay of deploy/ grants every access that its workload's arguments and
  environment make gfd need (RBAC as rendered by kubectl kustomize).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gfd.app.api_access import ApiAccess, required_access
from gfd.cli import parse_command_line
from gfd.config import resolve_settings
from tests.emulator import ApiServerEmulator, Principal, RecordedRequest
from tests.host import NOT_IN_A_POD
from tests.host import gfd_main as main
from tests.kube_fixtures import NAMESPACE, NODE, POD, TOKEN

_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<namespace>[^/]+))?"
    r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<subresource>[^/]+))?)?$"
)
_VERBS = {
    (True, "GET"): "get",
    (True, "PATCH"): "patch",
    (True, "PUT"): "update",
    (True, "DELETE"): "delete",
    (False, "GET"): "list",
    (False, "POST"): "create",
}


def called(request: RecordedRequest) -> tuple[str, str, str, str]:
    """(verb, group, RBAC resource, namespace) of one request, as RBAC would judge it."""
    match = _PATH.match(request.path)
    assert match is not None, request.path
    verb = _VERBS[(match["name"] is not None, request.method)]
    resource = match["resource"]
    if match["subresource"]:
        resource += "/" + match["subresource"]
    return verb, match["group"] or "", resource, match["namespace"] or ""


def listed(access: ApiAccess) -> tuple[str, str, str, str]:
    return access.verb, access.group, access.rbac_resource, access.namespace


def rules_for(accesses: Sequence[ApiAccess]) -> frozenset[tuple[str, ...]]:
    """The emulator's rules granting exactly ``accesses``."""
    return frozenset(
        (a.verb, a.rbac_resource, a.namespace) if a.namespace else (a.verb, a.rbac_resource)
        for a in accesses
    )


def settings_of(args: Sequence[str], env: Mapping[str, str]) -> Any:
    _, explicit = parse_command_line(args)
    return resolve_settings(explicit, env, host=NOT_IN_A_POD)


def run_with_exactly_the_listed_access(
    emulator: ApiServerEmulator, kubeconfig: Path, args: list[str]
) -> tuple[set[tuple[str, str, str, str]], set[tuple[str, str, str, str]]]:
    """Run ``gfd ARGS --oneshot`` with a token granted the listed access only; return what
    was listed and what was called."""
    accesses = required_access(settings_of(args, {}))
    emulator.set_token(
        TOKEN,
        Principal("system:serviceaccount:gpu-operator:gfd", rules_for(accesses)),
    )
    emulator.clear_log()
    code = main([*args, "--oneshot"], env={}, stdout=io.StringIO())
    refused = [r for r in emulator.requests if r.status in (401, 403)]
    assert (code, refused) == (0, [])
    return {listed(a) for a in accesses}, {called(r) for r in emulator.requests}


def test_the_node_sink_calls_exactly_what_is_listed(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any]
) -> None:
    # No device plugin resources, judged at once: the check lists the ResourceSlices, the
    # condition turns False, and its change is recorded as an Event.
    args = [
        "--simulate",
        "dgx-h100",
        "--patch-node",
        "--no-output-file",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
        "--health-grace-period",
        "0",
    ]
    expected, made = run_with_exactly_the_listed_access(emulator, kubeconfig, args)
    assert made == expected
    assert emulator.node_condition(NODE, "GPUHealthy") is not None
    assert emulator.events()


def test_the_node_feature_sink_calls_exactly_what_is_listed(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any]
) -> None:
    args = [
        "--simulate",
        "dgx-h100",
        "--use-node-feature-api",
        "--no-output-file",
        "--namespace",
        NAMESPACE,
        "--pod-name",
        POD,
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
    ]
    # Created by the first run (without the timestamp), replaced by the second.
    first_expected, first = run_with_exactly_the_listed_access(
        emulator, kubeconfig, [*args, "--no-timestamp"]
    )
    expected, second = run_with_exactly_the_listed_access(emulator, kubeconfig, args)
    assert first_expected == expected
    assert first | second == expected


def test_the_feature_file_calls_nothing(tmp_path: Path) -> None:
    assert required_access(settings_of(["-o", str(tmp_path / "gfd")], {})) == ()


# --------------------------------------------------------------------------- deploy/


def rendered_grants(objects: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(verb, group, resource, namespace) each Role and ClusterRole grants; a ClusterRole
    grants in every namespace ("*")."""
    from tests.deploy.manifests import find

    grants = set()
    for role in find(objects, "ClusterRole") + find(objects, "Role"):
        scope = role["metadata"].get("namespace", "*") if role["kind"] == "Role" else "*"
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add((verb, group, resource, scope))
    return grants


def workload_environment(workload: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet fills it on a node (downward API)."""
    from tests.deploy.manifests import NAMESPACE as DEPLOY_NAMESPACE
    from tests.deploy.manifests import pod_spec

    filled = {"spec.nodeName": NODE, "metadata.name": POD, "metadata.namespace": DEPLOY_NAMESPACE}
    env = {}
    for variable in pod_spec(workload)["containers"][0].get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        elif "fieldRef" in variable.get("valueFrom", {}):
            env[variable["name"]] = filled[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def overlays() -> tuple[str, ...]:
    from tests.deploy.manifests import OVERLAYS

    return OVERLAYS


@pytest.mark.parametrize("overlay", overlays())
def test_each_overlay_grants_what_its_gfd_needs(overlay: str) -> None:
    from tests.deploy.manifests import args_of, render, workload

    objects = render(overlay)
    gfd = workload(objects)
    settings = settings_of(args_of(gfd), workload_environment(gfd))
    grants = rendered_grants(objects)
    for access in required_access(settings):
        wanted = (access.verb, access.group, access.rbac_resource)
        assert (*wanted, access.namespace or "*") in grants or (*wanted, "*") in grants, (
            overlay,
            access.describe(),
        )
