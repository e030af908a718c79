"""``gfd cleanup`` on the API server emulator: exactly what gfd put on a Node comes off.

A Node is first written by gfd's own writers, as a running agent leaves it (the node sink's
labels and annotations, the health taint, the ``GPUHealthy`` condition), beside what others
put there (the kubelet's condition and taint, an admin's label, annotation and taint under
other keys, a label NFD lists as its own). The cleanup must take off gfd's and leave every
other byte; a second cleanup, and a cleanup of a Node gfd never touched, write nothing.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gfd.cleanup import CleanupFailed, clean_node, clean_nodes, node_names, wait_for_pods_gone
from gfd.health.condition import HealthState, NodeConditionWriter, Transition, node_condition
from gfd.health.taint import NodeTaintWriter
from gfd.kube_api import JSON_PATCH, KubeClient, connect_kubernetes
from gfd.sinks import Publication
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator
from tests.emulator.server import Principal
from tests.host import gfd_main, test_host
from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    FAST_RETRIES,
    NAMESPACE,
    NODE,
    POD,
    client,
    cluster,
    emulator,
    kubeconfig,
    node_labels,
    request_timeout,
    stop,
)

#: What gfd publishes on the node (the sink adds its ownership annotation).
GFD_LABELS = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.interconnect": "nvswitch",
}
GFD_ANNOTATIONS = {
    "nvidia.com/gpu.topology": "GPU0 GPU1\nX NV18",
    "nvidia.com/gpu.devices": '{"v":1,"devices":[{"index":0,"uuid":"GPU-0"}]}',
}
#: What others put there, which must survive the cleanup.
ADMIN_LABELS = {"kubernetes.io/hostname": NODE, "nvidia.com/gpu.present": "true"}
NFD_LABEL = ("nvidia.com/gpu.family", "hopper")
OTHER_ANNOTATIONS = {
    "node.alpha.kubernetes.io/ttl": "0",
    "nfd.node.kubernetes.io/feature-labels": NFD_LABEL[0],
}
OTHER_TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
LOST = HealthState(healthy=False, reason="GPULost", message="GPU 7 (0000:df:00.0) is lost")
#: The cleanup's own ServiceAccount and rights, as the chart's uninstall hook grants them
#: (tests/helm/test_cleanup_hook.py holds the chart to this list).
CLEANUP_USER = "system:serviceaccount:gpu-operator:gfd-cleanup"
CLEANUP_RULES = frozenset(
    {
        ("get", "nodes"),
        ("list", "nodes"),
        ("patch", "nodes"),
        ("patch", "nodes/status"),
        ("list", "pods", NAMESPACE),
    }
)
CLEANUP_TOKEN = "gfd-cleanup-token"


@pytest.fixture
def cleanup_kubeconfig(
    emulator: ApiServerEmulator,  # noqa: F811
    cluster: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> Path:
    emulator.set_token(CLEANUP_TOKEN, Principal(CLEANUP_USER, CLEANUP_RULES))
    return emulator.write_kubeconfig(tmp_path / "cleanup-kubeconfig", CLEANUP_TOKEN)


@pytest.fixture
def cleaner(cleanup_kubeconfig: Path) -> Iterator[KubeClient]:
    """A client with the cleanup's rights only (gfd's own client leaves the node as it runs)."""
    kube = connect_kubernetes(
        kubeconfig=str(cleanup_kubeconfig), request_timeout=1.0, retry_policy=FAST_RETRIES
    )
    yield kube
    kube.close()


@pytest.fixture
def node_labels() -> Mapping[str, str]:  # noqa: F811 - the fixture, for this module
    return {**ADMIN_LABELS, NFD_LABEL[0]: NFD_LABEL[1]}


def leave_as_gfd_does(emulator: ApiServerEmulator, client: KubeClient, name: str = NODE) -> None:  # noqa: F811
    """The Node as a running gfd with the node sink, the condition and the taint leaves it."""
    emulator.change_node_metadata(name, annotations=OTHER_ANNOTATIONS)
    emulator.edit_object("nodes", name, mutate=lambda n: n["spec"].update(taints=[OTHER_TAINT]))
    emulator.set_node_status(name, conditions=[READY])
    running = threading.Event()
    sink = NodeSink(client=client, node_name=name, stop=running)
    sink.publish(Publication({**GFD_LABELS, NFD_LABEL[0]: "hopper"}, GFD_ANNOTATIONS))
    node = sink.read_ahead()
    condition = NodeConditionWriter(client=client, node_sink=sink, stop=running)
    taint = NodeTaintWriter(client=client, node_sink=sink, stop=running, effect="NoSchedule")
    for writer in (condition, taint):
        writer.saw(node)
        writer.write(LOST, Transition(previous=None, state=LOST))
    written = emulator.node(name)
    assert {k: written["metadata"]["labels"][k] for k in GFD_LABELS} == GFD_LABELS
    assert node_condition(written) is not None
    assert len(written["spec"]["taints"]) == 2


def without_volatile(node: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in node["metadata"].items() if k not in ("resourceVersion",)}
    return {**node, "metadata": metadata}


def test_cleanup_takes_off_exactly_what_gfd_put_on_the_node(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    leave_as_gfd_does(emulator, client)
    emulator.clear_log()

    result = clean_node(cleaner, NODE, stop)

    node = emulator.node(NODE)
    assert node["metadata"]["labels"] == {**ADMIN_LABELS, NFD_LABEL[0]: NFD_LABEL[1]}
    assert node["metadata"]["annotations"] == OTHER_ANNOTATIONS
    assert node["spec"]["taints"] == [OTHER_TAINT]
    assert node["status"]["conditions"] == [READY]
    assert result.labels == tuple(sorted(GFD_LABELS))
    assert result.annotations == (
        "nvidia.com/gfd.labels",
        "nvidia.com/gpu.devices",
        "nvidia.com/gpu.topology",
    )
    assert result.taint == "nvidia.com/gpu.health=GPULost:NoSchedule"
    assert result.condition is True
    assert result.describe() == (
        f"{NODE}: removed 3 labels; 3 annotations (nvidia.com/gfd.labels, "
        "nvidia.com/gpu.devices, nvidia.com/gpu.topology); the taint nvidia.com/gpu.health=GPULost:NoSchedule; "
        "the GPUHealthy condition"
    )
    # Three writes (metadata, taint, condition), each with the cleanup's own rights.
    assert [r.user for r in emulator.requests if r.is_write] == [CLEANUP_USER] * 3


def test_a_second_cleanup_and_a_node_gfd_never_wrote_cost_no_write(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    leave_as_gfd_does(emulator, client)
    clean_node(cleaner, NODE, stop)
    emulator.add_node("cpu-node-1", labels={"kubernetes.io/hostname": "cpu-node-1"})
    before = {name: without_volatile(emulator.node(name)) for name in (NODE, "cpu-node-1")}
    emulator.clear_log()

    report = clean_nodes(cleaner, [NODE, "cpu-node-1"], stop)

    assert emulator.count(writes=True) == 0
    assert {name: without_volatile(emulator.node(name)) for name in before} == before
    assert report.lines() == [
        f"{NODE}: nothing of gfd's",
        "cpu-node-1: nothing of gfd's",
        "cleanup: 2 nodes, 0 cleaned, 2 with nothing of gfd's",
    ]


def test_a_condition_that_moved_since_the_read_is_found_again(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    leave_as_gfd_does(emulator, client)
    pressure = {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"}

    def kubelet_inserts_a_condition(api: ApiServerEmulator) -> None:
        api.edit_object(
            "nodes", NODE, mutate=lambda n: n["status"]["conditions"].insert(0, pressure)
        )

    emulator.before(kubelet_inserts_a_condition, method="PATCH", path_contains="/status")
    emulator.clear_log()

    assert clean_node(cleaner, NODE, stop).condition is True

    conditions = emulator.node(NODE)["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["MemoryPressure", "Ready"]
    assert emulator.count(method="PATCH", path_contains="/status") == 2


def test_a_node_deleted_after_the_list_is_passed_over(
    emulator: ApiServerEmulator,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    report = clean_nodes(cleaner, [NODE, "deleted-node"], stop)
    assert report.failed == ()
    assert [result.node for result in report.cleaned] == [NODE]


def test_every_node_is_listed_and_cleaned_through_the_command_line(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleaner: KubeClient,
    cleanup_kubeconfig: Path,
    stop: threading.Event,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    emulator.add_node("gpu-node-2", labels={"kubernetes.io/hostname": "gpu-node-2"})
    emulator.add_node("cpu-node-1", labels={"kubernetes.io/hostname": "cpu-node-1"})
    leave_as_gfd_does(emulator, client)
    leave_as_gfd_does(emulator, client, "gpu-node-2")
    assert node_names(cleaner, stop) == ["cpu-node-1", NODE, "gpu-node-2"]
    capsys.readouterr()

    code = gfd_main(["cleanup", "--all-nodes", "--kubeconfig", str(cleanup_kubeconfig)], env={})

    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == "cpu-node-1: nothing of gfd's"
    assert out[1].startswith(f"{NODE}: removed 3 labels;")
    assert out[2].startswith("gpu-node-2: removed 3 labels;")
    assert out[3] == "cleanup: 3 nodes, 2 cleaned, 1 with nothing of gfd's"
    for name in (NODE, "gpu-node-2"):
        assert node_condition(emulator.node(name)) is None


def test_one_node_by_name_and_a_missing_choice_is_a_usage_error(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleanup_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    leave_as_gfd_does(emulator, client)
    capsys.readouterr()
    assert gfd_main(["cleanup", "--kubeconfig", str(cleanup_kubeconfig)], env={}) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "gfd: error: cleanup: name the node (--node-name NODE or NODE_NAME) or --all-nodes"
    )
    code = gfd_main(["cleanup", "--kubeconfig", str(cleanup_kubeconfig)], env={"NODE_NAME": NODE})
    assert code == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "cleanup: 1 node, 1 cleaned, 0 with nothing of gfd's"


def test_a_refused_write_fails_the_run_with_one_line_and_the_rest_is_done(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleanup_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    leave_as_gfd_does(emulator, client)
    capsys.readouterr()
    without_status = frozenset(rule for rule in CLEANUP_RULES if rule[1] != "nodes/status")
    emulator.set_token(CLEANUP_TOKEN, Principal(CLEANUP_USER, without_status))

    code = gfd_main(["cleanup", "--all-nodes", "--kubeconfig", str(cleanup_kubeconfig)], env={})

    captured = capsys.readouterr()
    assert code == 1
    errors = [line for line in captured.err.splitlines() if line.startswith("gfd: error: ")]
    assert len(errors) == 1
    assert errors[0].startswith(
        f"gfd: error: cleanup: 1 of 1 nodes failed; {NODE}: Kubernetes API PATCH "
        f"/api/v1/nodes/{NODE}/status: HTTP 403"
    )
    labels = emulator.node_labels(NODE)
    assert not set(GFD_LABELS) & set(labels), "the labels went before the condition failed"
    assert captured.out.splitlines() == [
        "cleanup: 1 node, 0 cleaned, 0 with nothing of gfd's, 1 failed"
    ]


AGENTS = "app.kubernetes.io/instance=gfd,app.kubernetes.io/component=agent"


def test_the_cleanup_waits_for_gfd_s_pods_to_go_first(
    emulator: ApiServerEmulator,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    # The emulator filters no label selector: gfd's pod is the namespace's only one.
    timer = threading.Timer(0.3, emulator.delete_object, ("pods", POD, NAMESPACE))
    timer.start()
    try:
        wait_for_pods_gone(cleaner, NAMESPACE, AGENTS, stop, timeout=10, poll_interval=0.05)
    finally:
        timer.cancel()
    assert emulator.get("pods", POD, NAMESPACE) is None
    lists = [r for r in emulator.requests if r.method == "GET" and r.path.endswith("/pods")]
    assert len(lists) >= 2


def test_pods_that_stay_fail_the_wait_with_one_line_naming_them(
    emulator: ApiServerEmulator,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    with pytest.raises(CleanupFailed) as failure:
        wait_for_pods_gone(cleaner, NAMESPACE, AGENTS, stop, timeout=0.3, poll_interval=0.05)
    message = str(failure.value)
    assert message.startswith(f"cleanup: 1 pod matching {AGENTS} in {NAMESPACE} still there")
    assert POD in message and "\n" not in message


def test_the_command_line_waits_in_the_namespace_it_is_given(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleanup_kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    leave_as_gfd_does(emulator, client)
    emulator.delete_object("pods", POD, NAMESPACE)
    command = ["cleanup", "--all-nodes", "--kubeconfig", str(cleanup_kubeconfig)]
    capsys.readouterr()
    if not Path(test_host().namespace_file).exists():  # outside a pod: no namespace known
        assert gfd_main([*command, "--wait-for-pods", AGENTS], env={}) == 2
        assert capsys.readouterr().err == (
            "gfd: error: cleanup: --wait-for-pods needs the pods' namespace: --namespace\n"
        )
    code = gfd_main([*command, "--wait-for-pods", AGENTS, "--namespace", NAMESPACE], env={})
    assert code == 0
    assert node_condition(emulator.node(NODE)) is None


def documented_condition_patch(index: int) -> list[dict[str, Any]]:
    """docs/deploy.md's kubectl JSON Patch for the condition, as its shell would pass it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    section = text.split("### Removing it by hand", 1)[1]
    (argument,) = re.findall(r'^  -p "(.+)"$', section, re.MULTILINE)
    return list(json.loads(argument.replace('\\"', '"').replace("$((i-1))", str(index))))


def test_the_documented_kubectl_patch_removes_the_condition_and_only_it(
    emulator: ApiServerEmulator,  # noqa: F811
    client: KubeClient,  # noqa: F811
    cleaner: KubeClient,
    stop: threading.Event,  # noqa: F811
) -> None:
    leave_as_gfd_does(emulator, client)
    conditions = emulator.node(NODE)["status"]["conditions"]
    index = [c["type"] for c in conditions].index("GPUHealthy")  # grep -n's line, less one
    path = f"/api/v1/nodes/{NODE}/status"
    stale = documented_condition_patch(index + 1)  # the list moved: the test fails, no change
    refused = cleaner.request(
        "PATCH", path, stop=stop, deadline=cleaner.deadline(), body=stale,
        content_type=JSON_PATCH, accept_statuses=(422,),
    )  # fmt: skip
    assert refused.status == 422
    assert emulator.node(NODE)["status"]["conditions"] == conditions
    cleaner.request(
        "PATCH", path, stop=stop, deadline=cleaner.deadline(),
        body=documented_condition_patch(index), content_type=JSON_PATCH,
    )  # fmt: skip
    assert emulator.node(NODE)["status"]["conditions"] == [READY]
