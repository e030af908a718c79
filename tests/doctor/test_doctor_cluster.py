"""``gfd doctor`` against the API server emulator: the cluster, RBAC (one
SelfSubjectAccessReview per call), admission (a dry run of this cycle's write, judged by
gfd's own ValidatingAdmissionPolicy from deploy/), NFD's labels, the device plugin's
resources, and that the doctor changes nothing.

Expectations are read from what is arranged and from the published rules: the RBAC rule
taken away, the policy's own message in deploy/, NFD's annotation
``nfd.node.kubernetes.io/feature-labels`` (node-feature-discovery's master), the profile's
GPU count for ``nvidia.com/gpu``.
"""

from __future__ import annotations

import io
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from gfd.sim import load_profile
from tests.doctor.conftest import doctor
from tests.emulator import (
    GFD_RULES,
    AdmissionAttributes,
    ApiServerEmulator,
    Principal,
    ValidatingPolicy,
)
from tests.host import gfd_main as main
from tests.kube_fixtures import NAMESPACE, NODE, TOKEN

GPUS = str(len(load_profile("dgx-h100").facts.gpus))
#: What NFD's master writes on a node it labelled (node-feature-discovery, its master).
NFD_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
REVIEW_PATHS = ("/selfsubjectaccessreviews", "/selfsubjectreviews")


def standalone(kubeconfig: Path, *extra: str) -> list[str]:
    """The standalone overlay's configuration (the node sink), on a simulated DGX H100."""
    return [
        "--simulate",
        "dgx-h100",
        "--patch-node",
        "--no-output-file",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
        *extra,
    ]


@pytest.fixture
def plugin_registered(emulator: ApiServerEmulator, cluster: dict[str, Any]) -> None:
    emulator.set_node_status(NODE, allocatable={"nvidia.com/gpu": GPUS, "cpu": "64"})


def assert_nothing_written(emulator: ApiServerEmulator) -> None:
    """Every write the doctor sent was a review or a dry run."""
    for request in emulator.requests:
        if request.is_write:
            assert request.path.endswith(REVIEW_PATHS) or request.query.get("dryRun") == "All", (
                request.method,
                request.path,
            )


def test_a_healthy_standalone_node_has_no_problem(
    emulator: ApiServerEmulator, kubeconfig: Path, plugin_registered: None
) -> None:
    before = emulator.node(NODE)
    report = doctor(standalone(kubeconfig))
    assert report.problems == [], report.lines
    assert report.code == 0
    for name in ("cluster", "rbac", "admission", "device-plugin", "health"):
        assert report.state(name) == "ok", report.by_check[name]
    assert "system:serviceaccount:gpu-operator:gfd" in report.message("cluster")
    assert f"{GPUS} nvidia.com/gpu" in report.message("device-plugin")
    assert_nothing_written(emulator)
    assert emulator.node(NODE) == before
    # One review per call the configuration makes, each asked once.
    reviews = [r for r in emulator.requests if r.path.endswith("/selfsubjectaccessreviews")]
    asked = [r.body["spec"]["resourceAttributes"] for r in reviews]
    assert len(asked) == len({tuple(sorted(a.items())) for a in asked})
    assert {(a["verb"], a["resource"], a.get("subresource", "")) for a in asked} >= {
        ("get", "nodes", ""),
        ("patch", "nodes", ""),
        ("patch", "nodes", "status"),
        ("create", "events", ""),
        ("list", "resourceslices", ""),
    }


#: gfd's rules with the node sink, as the emulator grants them (verb, RBAC resource[, ns]).
NODE_SINK_RULES = sorted(
    rule for rule in GFD_RULES if rule[1] in ("nodes", "nodes/status", "events", "resourceslices")
)


@pytest.mark.parametrize("missing", NODE_SINK_RULES, ids=lambda rule: " ".join(rule))
def test_rbac_missing_one_verb_names_it(
    emulator: ApiServerEmulator,
    kubeconfig: Path,
    plugin_registered: None,
    missing: tuple[str, ...],
) -> None:
    user = "system:serviceaccount:gpu-operator:gfd"
    emulator.set_token(
        TOKEN, Principal(user, frozenset(GFD_RULES - {missing}), namespace=NAMESPACE)
    )
    report = doctor(standalone(kubeconfig))
    assert report.code == 1
    assert report.state("rbac") == "problem"
    verb, resource = missing[0], missing[1]
    named, _, subresource = resource.partition("/")
    message = report.message("rbac")
    assert f"may not: {verb} {named}" in message
    if subresource:
        assert f"{verb} {resource}" in message
    fix = report.fix("rbac")
    assert "deploy/components/node-sink/rbac.yaml" in fix
    assert f"kubectl auth can-i {verb} {named}" in fix
    # Exactly the one call is refused: each refusal says what needs it.
    assert message.count("(for ") == 1
    assert_nothing_written(emulator)


def test_rbac_names_the_rule_deploy_grants_it_by(
    emulator: ApiServerEmulator, kubeconfig: Path, plugin_registered: None
) -> None:
    from tests.deploy.manifests import find, render

    # The role of the standalone overlay that grants patch on nodes/status.
    granting = [
        role["metadata"]["name"]
        for role in find(render("standalone"), "ClusterRole") + find(render("standalone"), "Role")
        for rule in role["rules"]
        if "nodes/status" in rule["resources"] and "patch" in rule["verbs"]
    ]
    assert len(granting) == 1
    emulator.set_token(
        TOKEN,
        Principal(
            "system:serviceaccount:gpu-operator:gfd",
            frozenset(GFD_RULES - {("patch", "nodes/status")}),
            namespace=NAMESPACE,
        ),
    )
    report = doctor(standalone(kubeconfig))
    assert granting[0] in report.fix("rbac")


# --------------------------------------------------------------------------- admission


def policy_of(name: str, overlay: str) -> Any:
    from tests.deploy.manifests import one, render

    return one(render(overlay), "ValidatingAdmissionPolicy", name)


def cel_judge(policy: Any) -> ValidatingPolicy:
    """gfd's policy from deploy/, run by cel-python (tests/deploy/admission_model.py)."""
    from tests.deploy.admission_model import AdmissionRequest, CelPolicy

    compiled = CelPolicy(policy)

    def judge(request: AdmissionAttributes) -> str | None:
        verdict = compiled.evaluate(
            AdmissionRequest(
                operation=request.operation,
                group=request.group,
                resource=request.resource,
                user=request.user,
                object=request.object,
                old_object=request.old_object,
                extra={k: list(v) for k, v in request.extra.items()},
                subresource=request.subresource,
                namespace=request.namespace,
            )
        )
        return verdict.denials[0] if verdict.denials else None

    return ValidatingPolicy(policy["metadata"]["name"], judge)


#: The ServiceAccount the rendered policies name (deploy/base's namespace).
DEPLOY_USER = "system:serviceaccount:gpu-feature-discovery:gfd"


def test_an_admission_refusal_on_the_dry_run_is_named(
    emulator: ApiServerEmulator, kubeconfig: Path, plugin_registered: None
) -> None:
    from tests.deploy.admission_model import pod_bound_claims

    policy = policy_of("gfd-node-labeler", "standalone")
    emulator.add_validating_policy(cel_judge(policy))
    rules = frozenset(GFD_RULES | {("get", "validatingadmissionpolicies")})
    # A token that is not bound to gfd's Pod (a kubeconfig user's, say): the policy refuses.
    emulator.set_token(TOKEN, Principal(DEPLOY_USER, rules, namespace=NAMESPACE))
    report = doctor(standalone(kubeconfig))
    assert report.code == 1
    assert report.state("admission") == "problem"
    message = report.message("admission")
    pod_bound = next(
        rule["message"]
        for rule in policy["spec"]["validations"]
        if "podNameClaim" in rule["expression"]
    )
    assert pod_bound in message
    assert "ValidatingAdmissionPolicy 'gfd-node-labeler'" in message
    assert "pod-bound token" in report.fix("admission")
    # The same write with the token of gfd's Pod on this node: admitted.
    claims = {k: tuple(v) for k, v in pod_bound_claims(NODE).items()}
    emulator.set_token(TOKEN, Principal(DEPLOY_USER, rules, namespace=NAMESPACE, extra=claims))
    admitted = doctor(standalone(kubeconfig))
    assert admitted.state("admission") == "ok", admitted.by_check["admission"]
    assert "gfd's policy gfd-node-labeler installed" in admitted.message("admission")
    assert emulator.node_labels(NODE) == {}
    assert_nothing_written(emulator)


def test_the_node_feature_sink_is_reviewed_and_dry_run(
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
        "gfd-abcde",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
    ]
    report = doctor(args)
    assert report.state("rbac") == "ok"
    for verb in ("get", "create", "update"):
        assert f"{verb} nodefeatures.nfd.k8s-sigs.io in {NAMESPACE}" in report.message("rbac")
    assert report.state("admission") == "ok"
    # The dry run created nothing; NFD cannot be judged before gfd's first write.
    assert emulator.nodefeature(NAMESPACE, f"nvidia-features-for-{NODE}") is None
    assert report.state("nfd") == "problem"  # the node carries no NFD annotation
    assert_nothing_written(emulator)


# --------------------------------------------------------------------------- the cluster


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_api_server_is_one_problem_and_nothing_more(
    emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        emulator.write_kubeconfig(tmp_path / "k", TOKEN)
        .read_text()
        .replace(emulator.url, f"http://127.0.0.1:{closed_port()}")
    )
    report = doctor(standalone(kubeconfig))
    assert report.code == 1
    assert report.state("cluster") == "problem"
    assert "does not answer" in report.message("cluster")
    for name in ("rbac", "admission", "nfd", "device-plugin"):
        assert report.state(name) in ("cannot tell", "ok"), report.by_check[name]
    assert report.state("rbac") == "cannot tell"


def test_rejected_credentials_are_a_problem(
    emulator: ApiServerEmulator, cluster: dict[str, Any], tmp_path: Path
) -> None:
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", "no-such-token")
    report = doctor(standalone(kubeconfig))
    assert report.state("cluster") == "problem"
    assert "refuses the credentials" in report.message("cluster")


def test_an_unknown_node_name_is_a_problem(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any]
) -> None:
    args = standalone(kubeconfig)
    args[args.index(NODE)] = "not-this-node"
    report = doctor(args)
    assert report.state("cluster") == "problem"
    assert "not-this-node" in report.message("cluster")
    assert "--node-name" in report.fix("cluster")


def test_without_a_sink_that_needs_it_the_cluster_is_cannot_tell(tmp_path: Path) -> None:
    report = doctor(["--simulate", "t4-single", "-o", str(tmp_path / "gfd")])
    assert report.state("cluster") == "cannot tell"
    assert "--kubeconfig" in report.fix("cluster")


def test_the_node_sink_without_credentials_is_a_problem(tmp_path: Path) -> None:
    report = doctor(["--simulate", "t4-single", "--patch-node", "--node-name", NODE])
    assert report.state("cluster") == "problem"
    assert report.state("rbac") == "cannot tell"


# --------------------------------------------------------------------------- device plugin


def test_a_missing_device_plugin_is_a_problem(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any]
) -> None:
    report = doctor(standalone(kubeconfig))
    assert report.state("device-plugin") == "problem"
    assert f"nvidia.com/gpu (expected {GPUS})" in report.message("device-plugin")
    assert "device plugin" in report.fix("device-plugin")


def test_gpus_of_the_dra_driver_are_offered(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any]
) -> None:
    facts = load_profile("dgx-h100").facts
    devices = [
        {
            "name": f"gpu-{gpu.index}",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid}},
        }
        for gpu in facts.gpus
    ]
    emulator.add_resource_slice("slice-1", node_name=NODE, driver="gpu.nvidia.com", devices=devices)
    report = doctor(standalone(kubeconfig))
    assert report.state("device-plugin") == "ok", report.by_check["device-plugin"]
    assert "gpu.nvidia.com" in report.message("device-plugin")


# --------------------------------------------------------------------------- NFD


def write_feature_file(path: Path) -> dict[str, str]:
    """gfd's own feature file for the simulated DGX H100, as a one-shot run writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    code = main(
        ["--simulate", "dgx-h100", "--oneshot", "-o", str(path)], env={}, stdout=io.StringIO()
    )
    assert code == 0
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def nfd_args(kubeconfig: Path, feature_file: Path) -> list[str]:
    """The nfd overlay's configuration (the feature file), with a kubeconfig to look."""
    return [
        "--simulate",
        "dgx-h100",
        "-o",
        str(feature_file),
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
    ]


def nfd_labels_node(emulator: ApiServerEmulator, labels: dict[str, str]) -> None:
    """What nfd-master does: the labels, and its annotation listing their keys."""
    emulator.change_node_metadata(
        NODE,
        labels={"feature.node.kubernetes.io/cpu-model.vendor_id": "Intel", **labels},
        annotations={NFD_ANNOTATION: ",".join(sorted(["cpu-model.vendor_id", *labels]))},
    )


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_nfd_missing_is_a_problem(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any], tmp_path: Path
) -> None:
    feature_file = tmp_path / "features.d" / "gfd"
    write_feature_file(feature_file)
    report = doctor(nfd_args(kubeconfig, feature_file))
    assert report.state("nfd") == "problem"
    assert NFD_ANNOTATION in report.message("nfd")
    assert "node-feature-discovery" in report.fix("nfd")
    assert report.code == 1


def test_nfd_publishing_the_file_is_ok(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any], tmp_path: Path
) -> None:
    feature_file = tmp_path / "features.d" / "gfd"
    nfd_labels_node(emulator, write_feature_file(feature_file))
    report = doctor(nfd_args(kubeconfig, feature_file))
    assert report.state("nfd") == "ok", report.by_check["nfd"]
    assert report.state("feature-file") == "ok"


def test_nfd_that_never_read_the_file_is_a_problem_once_it_had_time(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any], tmp_path: Path
) -> None:
    feature_file = tmp_path / "features.d" / "gfd"
    write_feature_file(feature_file)
    nfd_labels_node(emulator, {})
    # Just written: NFD's worker may not have re-read it yet.
    fresh = doctor(nfd_args(kubeconfig, feature_file))
    assert fresh.state("nfd") == "cannot tell"
    age(feature_file, 600)
    late = doctor(nfd_args(kubeconfig, feature_file))
    assert late.state("nfd") == "problem"
    assert "none of" in late.message("nfd")
    assert "features.d" in late.fix("nfd")


def test_nfd_stale_values_are_a_problem(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: dict[str, Any], tmp_path: Path
) -> None:
    feature_file = tmp_path / "features.d" / "gfd"
    labels = write_feature_file(feature_file)
    nfd_labels_node(emulator, {**labels, "nvidia.com/gpu.count": "7"})
    age(feature_file, 600)
    report = doctor(nfd_args(kubeconfig, feature_file))
    assert report.state("nfd") == "problem"
    assert "nvidia.com/gpu.count (7 on the node, 8 in gfd's)" in report.message("nfd")
