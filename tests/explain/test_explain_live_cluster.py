"""``gfd explain --pod`` and ``gfd select`` against an API server (the emulator): the pod
read from the cluster, its own requests not counted against its node, the Nodes and the
bound pods of every namespace read a page at a time, finished pods left out by the
server's field selector."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.emulator import ApiServerEmulator
from tests.emulator.server import Principal
from tests.host import gfd_main

TOKEN = "explain-reader"
LABELS = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.family": "hopper",
}
#: More bound pods than one page holds (gfd reads 500 a page).
BOUND = 700


def _pod(
    namespace: str, name: str, node: str | None, gpus: int, phase: str = "Running"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


@pytest.fixture
def api(tmp_path: Path) -> Any:
    with ApiServerEmulator() as emulator:
        emulator.set_token(TOKEN, Principal("alice"))
        for name in ("gpu-a", "gpu-b"):
            emulator.add_node(name, labels=LABELS)
            emulator.set_node_status(
                name,
                allocatable={"cpu": "64", "memory": "512Gi", "pods": "1000", "nvidia.com/gpu": "8"},
                conditions=[{"type": "Ready", "status": "True"}],
            )
        # gpu-a: 7 of 8 GPUs held by pods of two namespaces (0 GPU pods fill the pages).
        emulator.add_object("pods", "ml", _pod("ml", "holder", "gpu-a", 6))
        emulator.add_object("pods", "batch", _pod("batch", "other", "gpu-a", 1))
        for number in range(BOUND):
            emulator.add_object("pods", "web", _pod("web", f"w-{number}", "gpu-b", 0))
        # Finished: holds nothing, and the server does not send it.
        emulator.add_object("pods", "ml", _pod("ml", "done", "gpu-b", 8, phase="Succeeded"))
        # The pod to explain, already bound to gpu-a: its own 2 GPUs are not held against it.
        emulator.add_object("pods", "ml", _pod("ml", "train", "gpu-a", 2))
        emulator.kubeconfig_path = emulator.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
        yield emulator


def test_explain_a_pod_of_the_cluster_reading_every_page(api: Any) -> None:
    out = io.StringIO()
    code = gfd_main(
        [
            "explain",
            "--pod",
            "ml/train",
            "--kubeconfig",
            str(api.kubeconfig_path),
            "--format",
            "json",
        ],
        env={},
        stdout=out,
    )
    assert code == 0, out.getvalue()
    (found,) = json.loads(out.getvalue())
    nodes = {node["name"]: node for node in found["nodes"]}
    assert nodes["gpu-b"]["fits"] is True  # its 8 GPUs are free: the Succeeded pod holds none
    assert nodes["gpu-a"]["fits"] is False
    assert nodes["gpu-a"]["reasons"][0]["detail"] == (
        "asks 2 nvidia.com/gpu; the node has 8, pods bound there request 7 "
        "(ml/holder: 6, batch/other: 1): 1 free"
    )
    pod_lists = [r for r in api.requests if r.method == "GET" and r.path == "/api/v1/pods"]
    assert len(pod_lists) == 2, "700 bound pods are two pages of 500"
    assert all(r.query["limit"] == "500" for r in pod_lists)
    assert (
        pod_lists[0].query["fieldSelector"]
        == "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    )
    assert api.count(writes=True) == 0


def test_a_pod_that_is_not_there_is_one_line(api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code = gfd_main(
        ["explain", "--pod", "ml/nope", "--kubeconfig", str(api.kubeconfig_path)],
        env={},
        stdout=io.StringIO(),
    )
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == "gfd: error: --pod ml/nope: no such pod (kubectl get pods -n ml)"
    )


def test_select_names_the_nodes_that_match_now_with_their_free_gpus(api: Any) -> None:
    out = io.StringIO()
    code = gfd_main(
        ["select", "--family", "hopper", "--kubeconfig", str(api.kubeconfig_path)],
        env={},
        stdout=out,
    )
    assert code == 0
    assert "that match now (free nvidia.com/gpu): gpu-a (0), gpu-b (8)" in out.getvalue()
