"""Benchmark gfd's Kubernetes sinks against the API server emulator.

Measures, and prints as the Markdown table quoted in ``docs/benchmarks.md``:

* requests per steady-state cycle (reads, writes) of the node sink and the
  NodeFeature sink, counted from the emulator's request log, and the median time
  of one such cycle in this process;
* wall time and peak RSS of whole ``gfd --simulate dgx-h100 --oneshot --patch-node
  --no-output-file`` processes against the emulator (each on a fresh node, so each
  run adds all labels), medians of repeated runs, next to the same run publishing
  to a feature file only, which never imports the Kubernetes client.

Peak RSS is the child's own ``ru_maxrss``, measured from a small launcher process. Results also go to
``bench/results/kube_sinks.json``. Run: ``python bench/kube_sinks.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # The emulator lives in the test tree, which is not an installed package.
    sys.path.insert(0, str(ROOT))

from _launcher import Launcher, child_environment  # noqa: E402

from gfd.base.logs import configure_logging  # noqa: E402
from gfd.kube_api import RetryPolicy, connect_kubernetes  # noqa: E402
from gfd.sinks import Publication, Sink  # noqa: E402
from gfd.sinks.node import TOPOLOGY_ANNOTATION, NodeSink  # noqa: E402
from gfd.sinks.nodefeature import NodeFeatureSink  # noqa: E402
from tests.emulator import ApiServerEmulator, seed_gfd_cluster  # noqa: E402

NAMESPACE = "gpu-operator"
TOKEN = "gfd-token"
LABELS = {f"nvidia.com/gpu.label-{i:02d}": str(i) for i in range(40)}
TOPOLOGY = json.dumps([["X"] + ["NV18"] * 7] * 8, separators=(",", ":"))


def steady_state(cycles: int) -> list[dict[str, Any]]:
    """Requests and median time per unchanged cycle, for each Kubernetes sink."""
    rows = []
    with ApiServerEmulator() as api, tempfile.TemporaryDirectory() as tmp:
        seed_gfd_cluster(api, node_name="bench-node", namespace=NAMESPACE, token=TOKEN)
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig", TOKEN)
        client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=RetryPolicy())
        stop = threading.Event()
        sinks: dict[str, Sink] = {
            "node": NodeSink(client=client, node_name="bench-node", stop=stop),
            "nodefeature": NodeFeatureSink(
                client=client,
                node_name="bench-node",
                namespace=NAMESPACE,
                pod_name="gfd-abcde",
                stop=stop,
            ),
        }
        publication = Publication(LABELS, {TOPOLOGY_ANNOTATION: TOPOLOGY})
        for name, sink in sinks.items():
            api.clear_log()
            sink.publish(publication)
            first = api.requests
            api.clear_log()
            durations = []
            for _ in range(cycles):
                started = time.perf_counter()
                sink.publish(publication)
                durations.append(time.perf_counter() - started)
            log = api.requests
            rows.append(
                {
                    "sink": name,
                    "first_cycle_reads": sum(not r.is_write for r in first),
                    "first_cycle_writes": sum(r.is_write for r in first),
                    "reads_per_cycle": sum(not r.is_write for r in log) / cycles,
                    "writes_per_cycle": sum(r.is_write for r in log) / cycles,
                    "median_cycle_ms": statistics.median(durations) * 1000,
                }
            )
        client.close()
    return rows


def oneshot_processes(runs: int) -> list[dict[str, Any]]:
    """Whole ``--oneshot`` processes: node sink vs feature file only."""
    gfd = [sys.executable, "-m", "gfd", "--simulate", "dgx-h100", "--oneshot"]
    results: list[dict[str, Any]] = []
    with ApiServerEmulator() as api, tempfile.TemporaryDirectory() as tmp:
        env = child_environment(Path(tmp))
        seed_gfd_cluster(api, node_name="warm-up", namespace=NAMESPACE, token=TOKEN)
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig", TOKEN)
        variants: dict[str, Callable[[str], list[str]]] = {
            "node sink (--patch-node --no-output-file)": lambda node: [
                *gfd,
                "--patch-node",
                "--no-output-file",
                "--node-name",
                node,
                "--kubeconfig",
                str(kubeconfig),
            ],
            "feature file only (no Kubernetes client)": lambda node: [
                *gfd,
                "--output-file",
                str(Path(tmp) / "features.d" / node),
            ],
        }
        (Path(tmp) / "features.d").mkdir()
        # Children start from a small launcher: forked from this process (emulator and
        # kubernetes client loaded) their peak RSS would count ours too.
        launcher = Launcher(env)
        for variant, argv_for in variants.items():
            # One unmeasured run fills the bytecode cache, as an installed gfd has it.
            api.add_node(f"warm-{len(results)}")
            launcher.run(argv_for(f"warm-{len(results)}"))
            walls, peaks = [], []
            for run in range(runs):
                node = f"node-{len(results)}-{run}"
                api.add_node(node)
                api.clear_log()
                measured = launcher.run(argv_for(node))
                walls.append(measured["wall_s"])
                peaks.append(measured["peak_rss_mib"])
                requests = api.requests
            results.append(
                {
                    "variant": variant,
                    "runs": runs,
                    "median_wall_s": statistics.median(walls),
                    "median_peak_rss_mib": statistics.median(peaks),
                    "max_peak_rss_mib": max(peaks),
                    "requests_last_run": [f"{r.method} {r.status}" for r in requests],
                }
            )
        launcher.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50, help="steady-state cycles per sink")
    parser.add_argument("--runs", type=int, default=5, help="gfd processes per variant")
    parser.add_argument("--skip-process", action="store_true", help="only the in-process part")
    args = parser.parse_args()
    # The sinks log every write at info level; keep the tables readable.
    configure_logging("warning")

    results: dict[str, Any] = {"steady_state": steady_state(args.cycles)}
    print(f"### Requests per steady-state cycle ({args.cycles} unchanged cycles, 40 labels)\n")
    print(
        "| sink | first cycle (reads, writes) | per steady cycle (reads, writes) | median cycle |"
    )
    print("|---|---|---|---|")
    for row in results["steady_state"]:
        print(
            f"| {row['sink']} | {row['first_cycle_reads']}, {row['first_cycle_writes']} "
            f"| {row['reads_per_cycle']:g}, {row['writes_per_cycle']:g} "
            f"| {row['median_cycle_ms']:.2f} ms |"
        )
    status = 0
    if not args.skip_process:
        try:
            results["oneshot"] = oneshot_processes(args.runs)
        except RuntimeError as exc:
            print(f"\none-shot processes not measured: {exc}", file=sys.stderr)
            status = 1
        else:
            print(f"\n### One `--oneshot` process, dgx-h100 profile (median of {args.runs})\n")
            print("| run | wall time | peak RSS (median / max) |")
            print("|---|---|---|")
            for row in results["oneshot"]:
                print(
                    f"| {row['variant']} | {row['median_wall_s'] * 1000:.0f} ms "
                    f"| {row['median_peak_rss_mib']:.1f} / {row['max_peak_rss_mib']:.1f} MiB |"
                )
    out = ROOT / "bench" / "results" / "kube_sinks.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
