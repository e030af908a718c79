"""Topology benchmark: the C path against the pure-Python one, end to end, and NVML's cost.

Part 1 times, in one process, the whole topology path on generated machines
(``gfd.topology.synthetic``) of 8, 64, 256 and 1024 GPUs, NVSwitch and cube-mesh
wiring: facts → compact input → builder → labels, node annotation and JSON
(``topology_labels``, ``to_annotation``, ``topology_to_json``), once with every step in
C (``implementation="c"``, what the agent and the CLI run) and once with every step
in Python. Each is the median of repeated runs, the two timed in alternating rounds
so that a change in machine load affects both alike; so is each stage (encode, build,
outputs) on its own. Before timing, the two paths must give equal outputs.

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

from gfd.facts import NodeFacts  # noqa: E402
from gfd.labels.topology import topology_labels  # noqa: E402
from gfd.topology import (  # noqa: E402
    Implementation,
    Topology,
    TopologyInput,
    build_from_input,
    build_topology,
    to_annotation,
    topology_input,
    topology_to_json,
)
from gfd.topology.synthetic import Wiring, generated_machine  # noqa: E402

SIZES = (8, 64, 256, 1024)
STAGES = ("encode", "build", "outputs")
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


def outputs(topology: Topology, implementation: Implementation) -> tuple[object, ...]:
    """What the agent and the CLI make of a topology: labels, annotation, JSON."""
    return (
        topology_labels(topology),
        to_annotation(topology, implementation=implementation),
        topology_to_json(topology, implementation=implementation),
    )


def end_to_end(facts: NodeFacts, implementation: Implementation) -> tuple[object, ...]:
    return outputs(build_topology(facts, implementation=implementation), implementation)


def stage_actions(
    facts: NodeFacts, compact: TopologyInput, topology: Topology, implementation: Implementation
) -> dict[str, Callable[[], object]]:
    return {
        "encode": partial(topology_input, facts, implementation=implementation),
        "build": partial(build_from_input, compact, implementation=implementation),
        "outputs": partial(outputs, topology, implementation),
    }


def bench_end_to_end(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    budget = 0.2 if quick else 1.0
    rounds = 3 if quick else 7
    for wiring in WIRINGS:
        for n in SIZES:
            facts = generated_machine(n, wiring=wiring)
            if end_to_end(facts, "c") != end_to_end(facts, "python"):
                raise SystemExit(f"the C and Python paths disagree on {n} GPUs ({wiring})")
            compact = topology_input(facts)
            topology = build_from_input(compact)
            c_s, python_s, c_runs, python_runs = interleaved_medians(
                partial(end_to_end, facts, "c"),
                partial(end_to_end, facts, "python"),
                rounds=rounds,
                budget_s=budget,
            )
            c_stages = stage_actions(facts, compact, topology, "c")
            python_stages = stage_actions(facts, compact, topology, "python")
            stages: dict[str, dict[str, float]] = {}
            for stage in STAGES:
                c_stage_s, python_stage_s, _, _ = interleaved_medians(
                    c_stages[stage], python_stages[stage], rounds=rounds, budget_s=budget
                )
                stages[stage] = {"c_ms": c_stage_s * 1e3, "python_ms": python_stage_s * 1e3}
            rows.append(
                {
                    "gpus": n,
                    "wiring": wiring,
                    "interconnect": topology.summary.interconnect,
                    "c_ms": c_s * 1e3,
                    "python_ms": python_s * 1e3,
                    "ratio": python_s / c_s,
                    "stages": stages,
                    "runs": {"c": c_runs, "python": python_runs},
                }
            )
    return rows


def bench_nvml(quick: bool) -> dict[str, Any]:
    """Reader pass and topology NVML calls on the simulated dgx-h100."""
    import pynvml

    from gfd.nvml.device import CPU_AFFINITY_WORDS
    from gfd.nvml.nvlink import FIELD_NVLINK_LINK_COUNT
    from gfd.nvml.reader import read_facts
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


def print_report(paths: list[dict[str, Any]], nvml: dict[str, Any] | None) -> None:
    print("Topology end to end (facts -> labels, annotation, JSON), median ms (same process)")
    print(
        f"{'GPUs':>5} {'wiring':<9} {'C':>8} {'Python':>9} {'ratio':>7}   "
        + "  ".join(f"{stage + ' C/Py':>17}" for stage in STAGES)
    )
    for row in paths:
        stages = "  ".join(
            f"{row['stages'][stage]['c_ms']:>8.3f}/{row['stages'][stage]['python_ms']:<8.2f}"
            for stage in STAGES
        )
        print(
            f"{row['gpus']:>5} {row['wiring']:<9} {row['c_ms']:>8.3f} {row['python_ms']:>9.2f} "
            f"{row['ratio']:>6.1f}x   {stages}"
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
    print(
        f"{'build_topology (C encoder + C builder)':<45} {'':>6} {nvml['build_topology_ms']:>9.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument(
        "--no-nvml", action="store_true", help="skip the simulated NVML part (part 2)"
    )
    args = parser.parse_args(argv)
    paths = bench_end_to_end(args.quick)
    nvml = None if args.no_nvml else bench_nvml(args.quick)
    print_report(paths, nvml)
    results = {
        "benchmark": "topology",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "end_to_end": paths,
        "nvml": nvml,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nresults written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
