"""The pod that every overlay runs: least privilege, probes, scheduling, environment.

Each rule is asserted for every container of every overlay; the two documented
exceptions (uid 0 without capabilities for the nfd feature file, CAP_SYS_ADMIN for
vGPU detection) are asserted exactly, so no other overlay can drift into them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gfd.metrics import DEFAULT_METRICS_PORT
from tests.deploy.manifests import OVERLAYS, args_of, containers, pod_spec, render, workload

FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
#: Overlays whose process runs as uid 0, and why (see the components' comments).
ROOT_OVERLAYS = {"nfd": "writes into root's features.d", "vgpu": "needs CAP_SYS_ADMIN"}
#: The reference's node affinity: any one of these labels schedules the pod.
REFERENCE_AFFINITY_KEYS = [
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
    "nvidia.com/gpu.present",
]


def pod(overlay: str) -> dict[str, Any]:
    return pod_spec(workload(render(overlay)))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down(overlay: str) -> None:
    spec = pod(overlay)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"):
        assert not spec.get(key, False), key
    for container in containers(workload(render(overlay))):
        context = container["securityContext"]
        assert context["privileged"] is False
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        added = context["capabilities"].get("add", [])
        assert added == (["SYS_ADMIN"] if overlay == "vgpu" else []), overlay
        assert "procMount" not in context and "windowsOptions" not in context


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runs_as_non_root_except_where_documented(overlay: str) -> None:
    context = pod(overlay)["securityContext"]
    if overlay in ROOT_OVERLAYS:
        assert (context["runAsNonRoot"], context["runAsUser"]) == (False, 0), ROOT_OVERLAYS[overlay]
    else:
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == context["runAsGroup"] == 65532


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_host_paths_are_sys_read_only_and_features_d_only_for_nfd(overlay: str) -> None:
    spec = pod(overlay)
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    expected = {"host-sys": "/sys"}
    if overlay == "nfd":
        expected["features-d"] = FEATURES_D
    assert host_paths == expected
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["host-sys"]["mountPath"] == "/sys"
    assert mounts["host-sys"]["readOnly"] is True
    if overlay == "nfd":
        assert mounts["features-d"]["mountPath"] == FEATURES_D
        assert not mounts["features-d"].get("readOnly", False)
        assert f"--output-file={FEATURES_D}/gfd" in args_of(workload(render(overlay)))
    # Scratch space exists only in memory and is small.
    tmp = next(v for v in spec["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Mi"}


#: The overlays that run gfd periodically: a one-shot Job has no metrics endpoint to probe.
PERIODIC_OVERLAYS = tuple(overlay for overlay in OVERLAYS if overlay != "oneshot-job")


@pytest.mark.parametrize("overlay", PERIODIC_OVERLAYS)
def test_probes_use_the_metrics_endpoints(overlay: str) -> None:
    obj = workload(render(overlay))
    container = pod_spec(obj)["containers"][0]
    assert f"--metrics-address=:{DEFAULT_METRICS_PORT}" in args_of(obj)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": DEFAULT_METRICS_PORT}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # Liveness must not fire before gfd's own window (2 x 60 s + 30 s) could expire.
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_downward_api_and_nvidia_runtime_environment(overlay: str) -> None:
    env = {e["name"]: e for e in pod(overlay)["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scheduling_follows_the_reference(overlay: str) -> None:
    spec = pod(overlay)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"] for t in terms] == [
        [{"key": key, "operator": "In", "values": ["true"]}] for key in REFERENCE_AFFINITY_KEYS
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["priorityClassName"] == "system-node-critical"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_resources_have_requests_and_a_memory_limit(overlay: str) -> None:
    resources = pod(overlay)["containers"][0]["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    # A memory limit bounds a leak; no CPU limit, so a cycle is never throttled.
    assert set(resources["limits"]) == {"memory"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_token_is_mounted_only_with_a_kubernetes_sink(overlay: str) -> None:
    obj = workload(render(overlay))
    args = args_of(obj)
    talks_to_api = "--patch-node" in args or "--use-node-feature-api" in args
    assert pod_spec(obj)["automountServiceAccountToken"] is talks_to_api
    assert pod_spec(obj)["serviceAccountName"] == "gfd"


@pytest.mark.parametrize(
    ("overlay", "sink_args"),
    [
        ("standalone", {"--patch-node", "--no-output-file"}),
        ("nfd", {f"--output-file={FEATURES_D}/gfd"}),
        ("node-feature-api", {"--use-node-feature-api", "--no-output-file"}),
        ("oneshot-job", {"--patch-node", "--no-output-file", "--oneshot"}),
        ("vgpu", {"--patch-node", "--no-output-file"}),
        ("dra", {"--patch-node", "--no-output-file", "--label-mode=auto"}),
    ],
)
def test_each_overlay_turns_on_exactly_its_sink(overlay: str, sink_args: set[str]) -> None:
    periodic = {"--sleep-interval=60s", f"--metrics-address=:{DEFAULT_METRICS_PORT}"}
    common = {"--no-timestamp"} | (periodic if overlay != "oneshot-job" else set())
    args = args_of(workload(render(overlay)))
    assert len(args) == len(set(args))
    assert set(args) == common | sink_args


def test_oneshot_job_is_pinned_and_finite() -> None:
    job = workload(render("oneshot-job"))
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert "selector" not in job["spec"]
    assert job["spec"]["activeDeadlineSeconds"] > 0
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeName"]
    # Nothing of the periodic agent's: no metrics port, no probes of it.
    container = spec["containers"][0]
    assert not {"ports", "livenessProbe", "readinessProbe"} & container.keys()


def test_daemonset_rolls_out_gradually() -> None:
    daemonset = workload(render("standalone"))
    assert daemonset["kind"] == "DaemonSet"
    assert daemonset["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


def test_the_kernel_log_component_adds_exactly_what_reading_dev_kmsg_needs(
    tmp_path: Path,
) -> None:
    """deploy/components/kernel-log: the only component that makes gfd privileged, and
    only for /dev/kmsg (the device cgroup; uid 0 for CAP_SYSLOG); everything else of the
    pod stays as the overlay has it."""
    from tests.helm.chart import render_with_components

    plain = pod_spec(workload(render("standalone")))
    spec = pod_spec(workload(render_with_components(tmp_path, "standalone", ("kernel-log",))))
    context = spec["containers"][0]["securityContext"]
    assert (context["privileged"], context["allowPrivilegeEscalation"]) == (True, True)
    assert (spec["securityContext"]["runAsNonRoot"], spec["securityContext"]["runAsUser"]) == (
        False,
        0,
    )
    assert {"name": "kernel-log", "mountPath": "/dev/kmsg", "readOnly": True} in spec["containers"][
        0
    ]["volumeMounts"]
    assert {"name": "kernel-log", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}} in spec[
        "volumes"
    ]
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key, False), key
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == plain["containers"][0]["securityContext"]["capabilities"]
    assert args_of(workload(render("standalone"))) == spec["containers"][0]["args"]
