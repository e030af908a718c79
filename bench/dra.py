"""What reading NVIDIA's DRA driver's ResourceSlices adds to a cycle of the device-plugin check.

On a node whose GPUs ``gpu.nvidia.com`` publishes (no ``nvidia.com/gpu`` allocatable), the
check lists the node's ResourceSlices at most once every ``--interval`` cycles. This
measures, medians of ``--runs`` runs:

* one list through gfd's client against the API server emulator on loopback
  (:class:`gfd.health.resource_slices.ResourceSliceReader`: ``fieldSelector`` on the node,
  ``resourceVersion=0``), in a cluster of one GPU node and of ``--nodes`` GPU nodes,
  each with one slice (8 full GPUs) and a slice of another driver beside it, and the
  answer's size; the per-cycle figure uses the larger cluster's;
* reading the devices out of the answer (:func:`published_devices`, once per list) and
  holding the facts to them (:func:`dra_problems`, every cycle), for the simulated DGX
  H100 (8 GPUs) and 16 A100s with seven MIG devices each (112 devices);
* the requests per cycle over ``--cycles`` cycles of the check, counted, on a DRA node and
  on a node whose device plugin is registered (which must read nothing).

The emulator is Python and filters every stored slice per list, so the list time is an
upper bound for a node's share of a real API server's work, not a model of it.
Results go to ``bench/results/dra.json``. Run: ``python bench/dra.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # The emulator lives in the test tree, which is not an installed package.
    sys.path.insert(0, str(ROOT))

from _timing import median_us  # noqa: E402
from reference import mig_machine  # noqa: E402

from gfd.facts import NodeFacts  # noqa: E402
from gfd.health import DEVICE_PLUGIN, HealthMonitor  # noqa: E402
from gfd.health.checks.device_plugin import dra_problems  # noqa: E402
from gfd.health.dra_node import DRA_DRIVER, DraNodeWatch, published_devices  # noqa: E402
from gfd.health.resource_slices import ResourceSliceReader  # noqa: E402
from gfd.kube_api import RetryPolicy, connect_kubernetes  # noqa: E402
from gfd.sim import load_profile  # noqa: E402
from tests.emulator import ApiServerEmulator, seed_gfd_cluster  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "dra.json"
NODE = "gpu-node-0000"
TOKEN = "gfd-token"


def devices_of(facts: NodeFacts) -> list[dict[str, Any]]:
    """The devices the driver publishes for ``facts``: full GPUs, or each MIG device."""
    devices: list[dict[str, Any]] = []
    for gpu in facts.gpus:
        common = {
            "productName": {"string": gpu.name},
            "driverVersion": {"version": "580.95.5"},
            "cudaComputeCapability": {"version": "9.0.0"},
        }
        if not gpu.mig_mode_current:
            attributes = {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid}, **common}
            devices.append({"name": f"gpu-{gpu.index}", "attributes": attributes})
            continue
        for mig in gpu.mig_devices:
            attributes = {
                "type": {"string": "mig"},
                "uuid": {"string": mig.uuid},
                "parentUUID": {"string": gpu.uuid},
                "profile": {"string": "1g.5gb"},
                **common,
            }
            devices.append({"name": f"gpu-{gpu.index}-mig-{mig.index}", "attributes": attributes})
    return devices


def list_cost(nodes: int, runs: int) -> dict[str, Any]:
    facts = load_profile("dgx-h100").facts
    with ApiServerEmulator() as api, tempfile.TemporaryDirectory() as tmp:
        seed_gfd_cluster(api, node_name=NODE, namespace="gpu-operator", token=TOKEN)
        for n in range(nodes):
            name = f"gpu-node-{n:04d}"
            api.add_resource_slice(
                f"{name}-gpu", node_name=name, driver=DRA_DRIVER, devices=devices_of(facts)
            )
            api.add_resource_slice(f"{name}-nic", node_name=name, driver="dra.net", devices=[])
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig", TOKEN)
        client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=RetryPolicy())
        try:
            reader = ResourceSliceReader(client=client, node_name=NODE, stop=threading.Event())
            slices = reader.list()
            assert len(slices) == 1, "the node's own slice, and only it"
            answer = client.request(
                "GET",
                "/apis/resource.k8s.io/v1/resourceslices",
                stop=threading.Event(),
                deadline=client.deadline(),
                query={"fieldSelector": f"spec.nodeName={NODE}", "resourceVersion": "0"},
            )
            list_us = median_us(reader.list, runs)
        finally:
            client.close()
    return {"nodes": nodes, "list_us": list_us, "answer_bytes": len(answer.body)}


def compare_cost(name: str, facts: NodeFacts, runs: int) -> dict[str, Any]:
    slices: list[Mapping[str, Any]] = [
        {"spec": {"driver": DRA_DRIVER, "nodeName": NODE, "devices": devices_of(facts)}}
    ]

    found = published_devices(slices)
    assert found is not None
    if dra_problems(facts, found):
        raise SystemExit(f"{name}: the comparison found a problem with every device published")
    return {
        "machine": name,
        "devices": len(found),
        "parse_us": median_us(lambda: published_devices(slices), runs),
        "compare_us": median_us(lambda: dra_problems(facts, found), runs),
    }


def lists_per_cycle(cycles: int, interval: int, allocatable: Mapping[str, str]) -> float:
    facts = load_profile("dgx-h100").facts
    slices = [{"spec": {"driver": DRA_DRIVER, "nodeName": NODE, "devices": devices_of(facts)}}]
    calls = 0

    def listed() -> list[Mapping[str, Any]]:
        nonlocal calls
        calls += 1
        return slices

    monitor = HealthMonitor(
        sysfs_root=Path("/nonexistent"),
        checks=(DEVICE_PLUGIN,),
        dra_node=DraNodeWatch(listed, interval=interval),
    )
    node = {"metadata": {"name": NODE}, "status": {"allocatable": dict(allocatable)}}
    for _ in range(cycles):
        if not monitor.observe(facts, node=node).decided:
            raise SystemExit("the device-plugin check found a problem on a healthy node")
    return calls / cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per median")
    parser.add_argument("--nodes", type=int, default=1000, help="GPU nodes in the cluster")
    parser.add_argument("--interval", type=int, default=5, help="cycles between two lists")
    parser.add_argument("--cycles", type=int, default=1000, help="cycles counted")
    args = parser.parse_args()
    alone = list_cost(1, args.runs)
    listing = list_cost(args.nodes, args.runs)
    compares = [
        compare_cost("simulated DGX H100", load_profile("dgx-h100").facts, args.runs),
        compare_cost("16 A100s, 7 MIG devices each", mig_machine(16), args.runs),
    ]
    dra_node = lists_per_cycle(args.cycles, args.interval, {"cpu": "224"})
    plugin_node = lists_per_cycle(args.cycles, args.interval, {"nvidia.com/gpu": "8"})
    results = {
        "runs": args.runs,
        "interval": args.interval,
        "list": listing,
        "list_alone": alone,
        "compare": compares,
        "lists_per_cycle": {"dra_node": dra_node, "plugin_node": plugin_node},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"medians of {args.runs} runs\n")
    for row in (alone, listing):
        print(
            f"one list among {row['nodes']} nodes' slices (emulator, loopback): "
            f"{row['list_us']:.0f} µs, {row['answer_bytes']} bytes answered"
        )
    print(f"lists per cycle: DRA node {dra_node:.3f}, plugin node {plugin_node:.3f}\n")
    print("| machine | devices | read out (per list) | comparison (per cycle) | per cycle |")
    print("|---|---:|---:|---:|---:|")
    for row in compares:
        per_cycle = (listing["list_us"] + row["parse_us"]) / args.interval + row["compare_us"]
        row["per_cycle_us"] = per_cycle
        print(
            f"| {row['machine']} | {row['devices']} | {row['parse_us']:.0f} µs "
            f"| {row['compare_us']:.0f} µs | {per_cycle:.0f} µs |"
        )
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
