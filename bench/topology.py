"""Topology benchmark: the C builder against its Python twin, and the NVML cost of topology.

Part 1 times, in one process, the three stages of
``build_topology`` on generated machines (``gfd.topology.synthetic``) of 8, 72, 576
and 1024 GPUs: encoding facts into the compact input (shared by both builders), the
C builder and the Python builder, each as the median of repeated runs; the two
builders are timed side by side, in alternating rounds, so that a change in machine
load affects both alike.

Part 2 serves the bundled ``dgx-h100`` profile through the NVML simulator and times
the whole reader pass, then each NVML call the reader makes to gather topology
(NVLink count, state, remote PCI and type per link; CPU affinity and NUMA id per
GPU; the common ancestor per pair), called through pynvml against the same library.

Usage: ``python bench/topology.py [--json PATH] [--quick]``; ``make bench`` runs it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gfd.topology import build_from_input, build_topology, topology_input  # noqa: E402
from gfd.topology.synthetic import Wiring, generated_machine  # noqa: E402

SIZES = (8, 72, 576, 1024)
WIRINGS: tuple[Wiring, ...] = ("nvswitch", "mesh")
DEFAULT_JSON = ROOT / "bench" / "results" / "topology.json"


def median_seconds(
    action: Callable[[], object], *, min_runs: int, max_runs: int, budget_s: float
) -> tuple[float, int]:
    """Median wall time of ``action`` over at least ``min_runs`` runs, more while in budget."""
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < max_runs and (
        len(times) < min_runs or time.perf_counter() - started < budget_s
    ):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(times)


def interleaved_medians(
    fast: Callable[[], object], slow: Callable[[], object], *, rounds: int, budget_s: float
) -> tuple[float, float, int, int]:
    """Medians of two actions timed in alternating rounds, so load changes hit both alike.

    Each round runs ``slow`` once and ``fast`` for about as long (at least 3 times).
    """
    fast_times: list[float] = []
    slow_times: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        slow()
        slow_times.append(time.perf_counter() - start)
        round_started = time.perf_counter()
        runs = 0
        while runs < 3 or (
            time.perf_counter() - round_started < min(slow_times[-1], budget_s / rounds)
            and runs < 500
        ):
            start = time.perf_counter()
            fast()
            fast_times.append(time.perf_counter() - start)
            runs += 1
    return (
        statistics.median(fast_times),
        statistics.median(slow_times),
        len(fast_times),
        len(slow_times),
    )


def bench_builders(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    budget = 0.2 if quick else 1.0
    for wiring in WIRINGS:
        for n in SIZES:
            facts = generated_machine(n, wiring=wiring)
            compact = topology_input(facts)
            c_result = build_from_input(compact, implementation="c")
            if c_result != build_from_input(compact, implementation="python"):
                raise SystemExit(f"C and Python builders disagree on {n} GPUs ({wiring})")
            encode_s, encode_runs = median_seconds(
                partial(topology_input, facts), min_runs=3, max_runs=50, budget_s=budget
            )
            c_s, python_s, c_runs, python_runs = interleaved_medians(
                partial(build_from_input, compact, implementation="c"),
                partial(build_from_input, compact, implementation="python"),
                rounds=3 if quick else 7,
                budget_s=budget,
            )
            rows.append(
                {
                    "gpus": n,
                    "wiring": wiring,
                    "interconnect": c_result.summary.interconnect,
                    "encode_ms": encode_s * 1e3,
                    "c_ms": c_s * 1e3,
                    "python_ms": python_s * 1e3,
                    "ratio": python_s / c_s,
                    "runs": {"encode": encode_runs, "c": c_runs, "python": python_runs},
                }
            )
    return rows


def bench_nvml(quick: bool) -> dict[str, Any]:
    """Reader pass and topology NVML calls on the simulated dgx-h100."""
    import pynvml

    from gfd.facts import NodeFacts
    from gfd.nvml.reader import CPU_AFFINITY_WORDS, FIELD_NVLINK_LINK_COUNT, read_facts
    from gfd.sim import simulate

    runs = 5 if quick else 20
    with simulate("dgx-h100") as machine:

        def read() -> NodeFacts:
            return read_facts(
                library_path=machine.library_path,
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
            )

        facts = read()  # also loads the simulated library into pynvml
        read_s, read_runs = median_seconds(read, min_runs=runs, max_runs=runs, budget_s=0)
        n = len(facts.gpus)
        pynvml.nvmlInit()
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            link_counts = [
                int(pynvml.nvmlDeviceGetFieldValues(h, [FIELD_NVLINK_LINK_COUNT])[0].value.uiVal)
                for h in handles
            ]
            per_gpu: dict[str, Callable[[Any], object]] = {
                "nvmlDeviceGetFieldValues(NVLINK_LINK_COUNT)": lambda h: (
                    pynvml.nvmlDeviceGetFieldValues(h, [FIELD_NVLINK_LINK_COUNT])
                ),
                "nvmlDeviceGetCpuAffinity": lambda h: pynvml.nvmlDeviceGetCpuAffinity(
                    h, CPU_AFFINITY_WORDS
                ),
                "nvmlDeviceGetNumaNodeId": lambda h: _optional(pynvml.nvmlDeviceGetNumaNodeId, h),
            }
            per_link: dict[str, Callable[[Any, int], object]] = {
                "nvmlDeviceGetNvLinkState": pynvml.nvmlDeviceGetNvLinkState,
                "nvmlDeviceGetNvLinkRemotePciInfo": pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                "nvmlDeviceGetNvLinkRemoteDeviceType": pynvml.nvmlDeviceGetNvLinkRemoteDeviceType,
            }
            calls: list[dict[str, Any]] = []
            for name, gpu_call in per_gpu.items():
                seconds, _ = median_seconds(
                    partial(_each_gpu, gpu_call, handles),
                    min_runs=runs,
                    max_runs=runs,
                    budget_s=0,
                )
                calls.append(_call_row(name, n, seconds))
            total_links = sum(link_counts)
            for name, link_call in per_link.items():
                seconds, _ = median_seconds(
                    partial(_each_link, link_call, handles, link_counts),
                    min_runs=runs,
                    max_runs=runs,
                    budget_s=0,
                )
                calls.append(_call_row(name, total_links, seconds))
            pairs = [(handles[a], handles[b]) for a in range(n) for b in range(a + 1, n)]
            seconds, _ = median_seconds(
                lambda: [pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b) for a, b in pairs],
                min_runs=runs,
                max_runs=runs,
                budget_s=0,
            )
            calls.append(_call_row("nvmlDeviceGetTopologyCommonAncestor", len(pairs), seconds))
        finally:
            pynvml.nvmlShutdown()
        build_s, _ = median_seconds(
            partial(build_topology, facts),
            min_runs=runs,
            max_runs=runs * 10,
            budget_s=0.2,
        )
    topology_ms = sum(call["total_ms"] for call in calls)
    return {
        "profile": "dgx-h100",
        "gpus": n,
        "read_facts_ms": read_s * 1e3,
        "read_facts_runs": read_runs,
        "topology_calls": calls,
        "topology_calls_ms": topology_ms,
        "build_topology_ms": build_s * 1e3,
    }


def _each_gpu(call: Callable[[Any], object], handles: list[Any]) -> None:
    for handle in handles:
        call(handle)


def _each_link(
    call: Callable[[Any, int], object], handles: list[Any], link_counts: list[int]
) -> None:
    for handle, count in zip(handles, link_counts, strict=True):
        for link in range(count):
            call(handle, link)


def _optional(call: Callable[[Any], object], handle: Any) -> object:
    import pynvml

    try:
        return call(handle)
    except pynvml.NVMLError_NotSupported:
        return None


def _call_row(name: str, count: int, seconds: float) -> dict[str, Any]:
    return {
        "call": name,
        "count": count,
        "total_ms": seconds * 1e3,
        "per_call_us": seconds * 1e6 / count if count else 0.0,
    }


def print_report(builders: list[dict[str, Any]], nvml: dict[str, Any] | None) -> None:
    print("Topology build, median of repeated runs (same process)")
    print(f"{'GPUs':>5} {'wiring':<9} {'encode ms':>10} {'C ms':>9} {'Python ms':>10} {'ratio':>7}")
    for row in builders:
        print(
            f"{row['gpus']:>5} {row['wiring']:<9} {row['encode_ms']:>10.3f} "
            f"{row['c_ms']:>9.3f} {row['python_ms']:>10.2f} {row['ratio']:>6.1f}x"
        )
    if nvml is None:
        return
    print()
    print(f"NVML cost of topology on the simulated {nvml['profile']} ({nvml['gpus']} GPUs)")
    print(f"{'call':<45} {'count':>6} {'total ms':>9} {'us/call':>8}")
    for call in nvml["topology_calls"]:
        print(
            f"{call['call']:<45} {call['count']:>6} {call['total_ms']:>9.3f} "
            f"{call['per_call_us']:>8.2f}"
        )
    print(f"{'topology calls, total':<45} {'':>6} {nvml['topology_calls_ms']:>9.3f}")
    print(f"{'whole reader pass (read_facts)':<45} {'':>6} {nvml['read_facts_ms']:>9.3f}")
    print(f"{'build_topology (encode + C builder)':<45} {'':>6} {nvml['build_topology_ms']:>9.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument(
        "--no-nvml", action="store_true", help="skip the simulated NVML part (part 2)"
    )
    args = parser.parse_args(argv)
    builders = bench_builders(args.quick)
    nvml = None if args.no_nvml else bench_nvml(args.quick)
    print_report(builders, nvml)
    results = {
        "benchmark": "topology",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "builders": builders,
        "nvml": nvml,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
