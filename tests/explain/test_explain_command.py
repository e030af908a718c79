"""``gfd explain`` and ``gfd select`` as a person runs them: a manifest against a saved
cluster or a simulated node, the verdict per node with the node's values and the fix, the
summary line naming the nodes, JSON with the same facts, and one line for bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.host import gfd_main

GPU_LABELS = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "2",
    "nvidia.com/cuda.driver-version.full": "535.183.01",
}


def _node(
    name: str, *, labels: dict[str, str] | None = None, gpus: str | None = "8", **spec: Any
) -> dict[str, Any]:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": GPU_LABELS if labels is None else labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _bound(name: str, node: str, gpus: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": "Running"},
    }


CLUSTER = {
    "kind": "List",
    "apiVersion": "v1",
    "items": [
        _node("gpu-free"),
        _node("gpu-busy"),
        _bound("other-0", "gpu-busy", "6"),
        {**_bound("done", "gpu-busy", "8"), "status": {"phase": "Succeeded"}},
        _node(
            "gpu-sick",
            taints=[
                {"key": "nvidia.com/gpu.health", "value": "XidCritical", "effect": "NoSchedule"}
            ],
        ),
        _node("gpu-noplugin", gpus=None),
        _node("gpu-cordoned", unschedulable=True),
        _node("cpu-1", labels={}, gpus=None),
    ],
}

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "env": [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.8"}],
                "resources": {"limits": {"nvidia.com/gpu": "4"}},
            }
        ]
    },
}


def _explain(
    tmp_path: Path, *arguments: str, pod: dict[str, Any] = POD, cluster: dict[str, Any] = CLUSTER
) -> tuple[int, str]:
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    out = io.StringIO()
    code = gfd_main(
        [
            "explain",
            "-f",
            str(tmp_path / "pod.yaml"),
            "--cluster-file",
            str(tmp_path / "cluster.json"),
            *arguments,
        ],
        env={},
        stdout=out,
    )
    return code, out.getvalue()


def test_each_gpu_node_gets_its_verdict_and_the_summary_names_the_nodes(tmp_path: Path) -> None:
    code, text = _explain(tmp_path)
    assert code == 1  # it runs nowhere: it fits gpu-free, whose driver is too old
    assert "gpu-free: fits, but the container would not start" in text
    assert "driver 535.183.01 supports only 12.2" in text
    assert (
        "asks 4 nvidia.com/gpu; the node has 8, pods bound there request 6 (ml/other-0: 6): 2 free"
        in text
    )
    assert "gfd's health taint {nvidia.com/gpu.health: XidCritical} (NoSchedule)" in text
    assert "the node has GPUs (gfd's labels) but offers no nvidia.com/gpu: no device plugin" in text
    assert "the node is cordoned" in text
    assert "cpu-1" not in text.split("\n\n")[1]  # not a GPU node: counted, not shown
    summary, cuda = text.rstrip().splitlines()[-2:]
    assert (
        cuda == "It would start on no node: where it fits (gpu-free), the driver lacks CUDA 12.8."
    )
    assert summary == (
        "1/6 nodes are available (gpu-free): 1 node(s) had untolerated taint(s) "
        "(gpu-sick), 1 node(s) were unschedulable "
        "(gpu-cordoned), 2 Insufficient nvidia.com/gpu (gpu-busy, gpu-noplugin), "
        "1 not GPU nodes (not shown; --all-nodes shows them)."
    )


def test_json_has_the_same_facts(tmp_path: Path) -> None:
    code, text = _explain(tmp_path, "--format", "json", "--all-nodes", "--require-cuda", "12.2")
    assert code == 0
    (found,) = json.loads(text)
    by_node = {node["name"]: node for node in found["nodes"]}
    assert by_node["gpu-free"]["runs"] is True
    assert by_node["cpu-1"]["reasons"][0]["reason"] == "Insufficient nvidia.com/gpu"
    assert found["needsCuda"] == "12.2" and found["requests"] == {"nvidia.com/gpu": 4}


def test_a_mig_node_says_which_resource_to_ask_for(tmp_path: Path) -> None:
    mig = _node("gpu-mig", gpus=None)
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "14"
    cluster = {"kind": "List", "items": [mig]}
    _, text = _explain(tmp_path, cluster=cluster)
    assert "its GPUs are MIG-partitioned" in text
    assert "request one of nvidia.com/mig-1g.10gb instead of nvidia.com/gpu" in text


def test_a_simulated_dgx_h100_takes_an_8_gpu_pod(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(POD))
    out = io.StringIO()
    code = gfd_main(
        ["explain", "-f", str(tmp_path / "pod.yaml"), "--simulate", "dgx-h100"], env={}, stdout=out
    )
    assert code == 0, out.getvalue()
    assert "simulated-dgx-h100: fits" in out.getvalue()


def test_select_prints_the_affinity_and_the_nodes_that_match_now(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    out = io.StringIO()
    code = gfd_main(
        [
            "select",
            "--family",
            "hopper",
            "--cuda",
            ">=12.2",
            "--cluster-file",
            str(tmp_path / "cluster.json"),
        ],
        env={},
        stdout=out,
    )
    assert code == 0
    text = out.getvalue()
    assert "# bundled products it matches: NVIDIA-H100-80GB-HBM3 (dgx-h100)" in text
    assert "gpu-free (8), gpu-busy (2)" in text
    placement = yaml.safe_load(text)
    assert (
        len(
            placement["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
        )
        == 2
    )


@pytest.mark.parametrize(
    ("arguments", "files", "message"),
    [
        (
            ["explain", "-f", "{tmp}/svc.yaml", "--simulate", "t4-single"],
            {"svc.yaml": "kind: Service\nmetadata: {name: s}\n"},
            "has no pod template",
        ),
        (
            ["explain", "-f", "{tmp}/pod.yaml", "--cluster-file", "{tmp}/c.json"],
            {"pod.yaml": yaml.safe_dump(POD), "c.json": '{"kind": "Node"}'},
            "not a Kubernetes List with items",
        ),
        (
            ["explain", "-f", "{tmp}/pod.yaml", "--simulate", "t4-single"],
            {"pod.yaml": "a: [1\n"},
            "not valid YAML (line 2)",
        ),
        (["explain", "--simulate", "t4-single"], {}, "gfd explain needs the pod"),
        (["select", "--cuda", "12.8"], {}, "--cuda '12.8': start with an operator"),
        (["select", "--family", "hoper"], {}, "--family 'hoper': unknown family"),
        (["select", "--min-count", "0"], {}, "--min-count 0: at least 1"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    files: dict[str, str],
    message: str,
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code = gfd_main([a.format(tmp=tmp_path) for a in arguments], env={}, stdout=io.StringIO())
    error = capsys.readouterr().err
    assert code == 2
    assert len(error.strip().splitlines()) == 1 and message in error, error
