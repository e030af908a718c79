"""``gfd fleet``: one row per GPU node and the fleet's summary, from a saved cluster and
from an API server read a page at a time."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gfd.fleet import Fleet, fleet_from_list, summarise, table
from tests.emulator import ApiServerEmulator
from tests.emulator.server import Principal
from tests.host import gfd_main

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _labels(
    product: str = "NVIDIA-H100-80GB-HBM3",
    driver: str = "570.148.08",
    cuda: str = "12.8",
    **more: str,
) -> dict[str, str]:
    return {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/gpu.interconnect": "nvswitch",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gfd.timestamp": "1796644800",  # 2026-12-07T12:00:00Z... minus a little
        **more,
    }


def _node(
    name: str,
    labels: dict[str, str],
    health: tuple[str, str, str] | None = ("True", "GPUsHealthy", ""),
) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True"}]
    if health is not None:
        conditions.append(
            {
                "type": "GPUHealthy",
                "status": health[0],
                "reason": health[1],
                "message": health[2],
                "lastTransitionTime": "2026-12-07T09:00:00Z",
            }
        )
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": conditions},
    }


def _gfd_pod(
    node: str, *, ready: bool = True, version: str = "0.1.0", started: str = "2026-12-07T08:00:00Z"
) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": f"gfd-{node}",
            "namespace": "gpu-feature-discovery",
            "labels": {"app.kubernetes.io/name": "gfd", "app.kubernetes.io/version": version},
        },
        "spec": {"nodeName": node, "containers": [{"name": "gfd", "image": f"gfd:{version}"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {"name": "gfd", "restartCount": 2, "state": {"running": {"startedAt": started}}}
            ],
        },
    }


CLUSTER = {
    "kind": "List",
    "items": [
        _node("a", _labels(**{"nvidia.com/gfd.timestamp": "1796633650"})),
        _node("b", _labels(**{"nvidia.com/gfd.timestamp": "1796633650"})),
        _node(
            "c",
            _labels(driver="535.183.01", cuda="12.2", **{"nvidia.com/gfd.timestamp": "1796633650"}),
            health=("False", "XidCritical", "GPU 3 (0000:61:00.0): Xid 79"),
        ),
        # gfd's labels are from before its pod started: the agent there never published.
        _node("d", _labels(**{"nvidia.com/gfd.timestamp": "1700000000"})),
        # A GPU node (the device plugin offers GPUs) that gfd never labelled.
        {
            "kind": "Node",
            "metadata": {"name": "e", "labels": {}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}},
        },
        {
            "kind": "Node",
            "metadata": {"name": "cpu-1", "labels": {}},
            "status": {"allocatable": {"cpu": "8"}},
        },
        _gfd_pod("a", started="2026-12-07T08:54:00Z"),
        _gfd_pod("b", version="0.0.9", started="2026-12-07T08:54:00Z"),
        _gfd_pod("c", ready=False, started="2026-12-07T08:54:00Z"),
        _gfd_pod("d", started="2026-12-07T08:54:00Z"),
    ],
}


def _fleet() -> Fleet:
    return fleet_from_list(CLUSTER, "cluster.json", "app.kubernetes.io/name=gfd")


def test_one_row_per_gpu_node_with_what_the_operator_reads() -> None:
    fleet = _fleet()
    assert [row.node for row in fleet.rows] == ["a", "b", "c", "d", "e"]
    assert fleet.nodes_read == 6
    c = fleet.rows[2]
    assert (c.product, c.gpus, c.driver, c.cuda, c.health, c.label_mode) == (
        "NVIDIA-H100-80GB-HBM3", 8, "535.183.01", "12.2", "XidCritical", "device-plugin",
    )  # fmt: skip
    text = table(fleet, NOW, wide=True)
    assert text.splitlines()[3].split()[7:11] == ["XidCritical", "3h", "NotReady", "nvswitch"]


def test_the_summary_names_drift_missing_gfd_and_labels_not_refreshed() -> None:
    summary = summarise(_fleet())
    assert dict(summary.gpus_by_product) == {"NVIDIA-H100-80GB-HBM3": 32, "-": 0}
    assert dict(summary.nodes_by_health)["XidCritical"] == ("c",)
    drift = {d.what: d for d in summary.drift}
    assert (drift["driver"].common, drift["driver"].others) == (
        "570.148.08",
        (("535.183.01", ("c",)),),
    )
    assert drift["gfd"].others == (("0.0.9", ("b",)),)
    assert summary.without_ready_gfd == ("c", "e")
    assert summary.labels_missing == ("e",)
    assert summary.labels_stale == ("d",)


def test_the_command_on_a_saved_cluster_with_a_selector_and_json(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CLUSTER))
    out = io.StringIO()
    assert (
        gfd_main(["fleet", "--cluster-file", str(path), "--format", "json"], env={}, stdout=out)
        == 0
    )
    document = json.loads(out.getvalue())
    assert document["summary"]["labelsStale"] == ["d"]
    out = io.StringIO()
    assert (
        gfd_main(
            [
                "fleet",
                "--cluster-file",
                str(path),
                "-l",
                "nvidia.com/cuda.runtime-version.full=12.2",
            ],
            env={},
            stdout=out,
        )
        == 0
    )
    assert out.getvalue().splitlines()[1].startswith("c ")
    assert "1 GPU nodes of 1 nodes read." in out.getvalue()


def test_a_cluster_file_that_is_not_a_list_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.json"
    path.write_text('{"kind": "Node"}')
    assert gfd_main(["fleet", "--cluster-file", str(path)], env={}, stdout=io.StringIO()) == 2
    assert "not a Kubernetes List with items" in capsys.readouterr().err


def test_the_api_server_is_read_a_page_at_a_time_and_only_gfds_pods(tmp_path: Path) -> None:
    with ApiServerEmulator() as api:
        api.set_token("reader", Principal("alice"))
        for number in range(1200):
            api.add_node(f"n{number:04d}", labels=_labels())
        api.add_object(
            "pods",
            "gpu-feature-discovery",
            {k: v for k, v in _gfd_pod("n0001").items() if k != "kind"},
        )
        api.add_object(
            "pods",
            "web",
            {"metadata": {"name": "web"}, "spec": {"nodeName": "n0002", "containers": []}},
        )
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", "reader")
        out = io.StringIO()
        assert (
            gfd_main(
                ["fleet", "--kubeconfig", str(kubeconfig), "--format", "json"], env={}, stdout=out
            )
            == 0
        )
        node_pages = [r for r in api.requests if r.path == "/api/v1/nodes"]
        pod_lists = [r for r in api.requests if r.path == "/api/v1/pods"]
    document = json.loads(out.getvalue())
    assert len(document["nodes"]) == 1200
    assert len(node_pages) == 3 and all(r.query["limit"] == "500" for r in node_pages)
    assert pod_lists[0].query["labelSelector"] == "app.kubernetes.io/name=gfd"
    assert [n["node"] for n in document["nodes"] if n["gfdPod"]] == ["n0001"]
