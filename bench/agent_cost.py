"""What one gfd agent costs a node: start-up time and memory, and the periodic loop.

Measures, and prints as the Markdown tables quoted in ``docs/benchmarks.md``:

* **One-shot runs**, side by side and interleaved (round robin, so drift in the
  machine's load hits every command alike), medians of ``--runs`` runs: wall time,
  CPU time and peak RSS (``ru_maxrss`` from ``os.wait4``) of

  - ``python -c pass`` (the bare interpreter),
  - ``python -c "import pynvml, structlog"`` (the floor: the dependencies a one-shot run
    that logs needs),
  - ``gfd --version`` (must import next to nothing),
  - ``gfd --oneshot --no-timestamp -o FILE`` as on a real node: the ``gfd`` console
    script (the container's entry point), NVML the simulator library found through
    ``LD_LIBRARY_PATH`` exactly as the driver's would be, on a machine prepared once
    beforehand (``python -m gfd.sim``), with no ``--simulate``; the same at
    ``--log-level error`` (a run with nothing to say never imports structlog); and the
    same through ``python -m gfd``, which adds ``runpy``;
  - the same with ``--patch-node --no-output-file`` against the API server emulator
    (the node already labelled: one read, no write);
  - ``gfd --simulate dgx-h100 --oneshot ...``, which adds the simulator's set-up
    (profile parsing, a temporary sysfs tree, loading the library) that a real node
    never pays; reported separately.

* **The periodic agent**: one process with the feature file, the node sink and
  metrics on, cycling every 10 ms (``--sleep-interval 10ms``) on the prepared DGX
  H100 until it has run ``--cycles`` cycles. Cycles are counted at the emulator (one
  node read per cycle), so watching costs the agent nothing. RSS (``VmRSS``) at cycle
  10 and at the end, the growth between them (a leak check), peak RSS (``VmHWM``),
  and CPU time per cycle (``utime + stime`` from ``/proc/PID/stat`` between those
  two points, divided by the cycles run).

Every process runs in an environment laid out as an installed gfd's
(``_launcher.installed_python``: no editable install's finder, in the floor either).
Each goal is checked in the report: a missed one is printed as ``MISSED`` in a banner
and the script exits 1, so ``make bench`` fails loudly when start-up regresses (timing
is never asserted in a test: the test machines are shared and noisy).
Results also go to ``bench/results/agent_cost.json``.
Run: ``python bench/agent_cost.py [--runs N] [--cycles N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # The emulator lives in the test tree, which is not an installed package.
    sys.path.insert(0, str(ROOT))

from _launcher import (  # noqa: E402
    Launcher,
    child_environment,
    console_script,
    installed_python,
)

from gfd.sim import prepare_machine  # noqa: E402
from tests.emulator import ApiServerEmulator, seed_gfd_cluster  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "agent_cost.json"
PROFILE = "dgx-h100"
NODE = "bench-node"
TOKEN = "gfd-token"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024

#: The goals of issues 7 and 15: one-shot wall over the floor, ``--version`` over it
#: (``--version`` builds the option table, which needs ``dataclasses`` and ``typing``:
#: about 0.55 times the floor here, with ``python -c pass`` itself at 0.2).
GOAL_ONESHOT_OVER_FLOOR = 1.1
GOAL_VERSION_OVER_FLOOR = 0.6
FLOOR = "floor: import pynvml, structlog"
GOAL_PERIODIC_RSS_MIB = 60.0
GOAL_GROWTH_MIB = 1.0
#: Cycle counts at which the periodic run samples RSS (a leak grows; warm-up levels off).
CHECKPOINTS = (50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000)


def machine_description() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def oneshot_runs(runs: int, workdir: Path, api: ApiServerEmulator) -> dict[str, Any]:
    machine = prepare_machine(PROFILE, workdir / "machine")
    base_env = child_environment(workdir)
    # The simulator's variables matter only to the real-node runs; the others ignore them.
    env = {**base_env, **machine.environment()}
    kubeconfig = api.write_kubeconfig(workdir / "kubeconfig", TOKEN)
    python = str(installed_python(workdir))
    real_node = [
        "--sysfs-root", str(machine.sysfs_root),
        "--machine-type-file", str(machine.machine_type_file),
    ]  # fmt: skip
    output = str(workdir / "features.d-gfd")
    gfd = str(console_script(workdir))
    commands: dict[str, list[str]] = {
        "python -c pass": [python, "-c", "pass"],
        FLOOR: [python, "-c", "import pynvml, structlog"],
        "gfd --version": [python, gfd, "--version"],
        "gfd --oneshot, feature file": [
            python, gfd, "--oneshot", "--no-timestamp", "-o", output, *real_node,
        ],
        "gfd --oneshot, feature file, --log-level error": [
            python, gfd, "--oneshot", "--no-timestamp", "-o", output, "--log-level", "error",
            *real_node,
        ],
        "gfd --oneshot, node sink": [
            python, gfd, "--oneshot", "--no-timestamp", "--no-output-file",
            "--patch-node", "--node-name", NODE, "--kubeconfig", str(kubeconfig), *real_node,
        ],
        "python -m gfd --oneshot, feature file": [
            python, "-m", "gfd", "--oneshot", "--no-timestamp", "-o", output, *real_node,
        ],
        "gfd --simulate dgx-h100 --oneshot, feature file": [
            python, gfd, "--simulate", PROFILE, "--oneshot", "--no-timestamp", "-o", output,
        ],
    }  # fmt: skip
    launcher = Launcher(env)
    try:
        # One warm-up round fills the page cache and labels the node (later runs: read only).
        for command in commands.values():
            launcher.run(command)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                samples[name].append(launcher.run(command))
    finally:
        launcher.close()
    table = {name: medians(runs_of) for name, runs_of in samples.items()}
    floor = table[FLOOR]
    for row in table.values():
        row["wall_over_floor"] = row["wall_s"] / floor["wall_s"]
        row["rss_over_floor"] = row["peak_rss_mib"] / floor["peak_rss_mib"]
    return {"runs": runs, "medians": table, "samples": samples}


def _proc_status(pid: int) -> dict[str, float]:
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) / 1024
    return values


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _wait(predicate: Callable[[], bool], child: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if child.poll() is not None:
            raise SystemExit(f"the agent exited early with {child.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit("the periodic agent did not reach the cycle count in time")
        time.sleep(0.005)


def periodic_run(cycles: int, workdir: Path, api: ApiServerEmulator) -> dict[str, Any]:
    machine = prepare_machine(PROFILE, workdir / "machine-periodic")
    env = {**child_environment(workdir), **machine.environment()}
    kubeconfig = api.write_kubeconfig(workdir / "kubeconfig-periodic", TOKEN)
    command = [
        str(installed_python(workdir)), str(console_script(workdir)), "--sleep-interval", "10ms",
        "-o", str(workdir / "periodic-gfd"),
        "--patch-node", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
        "--metrics-address", "127.0.0.1:0",
        "--sysfs-root", str(machine.sysfs_root),
        "--machine-type-file", str(machine.machine_type_file),
    ]  # fmt: skip
    api.clear_log()

    def reads() -> int:
        """Cycles so far: each makes exactly one node read."""
        return api.count(method="GET")

    child = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait(lambda: reads() >= 10, child, timeout=60)
        at_10 = {"cycles": reads(), "cpu_s": _cpu_seconds(child.pid), **_proc_status(child.pid)}
        writes_before = api.count(writes=True)
        started = time.perf_counter()
        series = [(at_10["cycles"], at_10["VmRSS"])]
        for checkpoint in [c for c in CHECKPOINTS if 10 < c < cycles] + [cycles]:
            # The predicate runs within this iteration only, so binding late is harmless.
            _wait(lambda: reads() >= checkpoint, child, timeout=max(120.0, cycles * 0.5))  # noqa: B023
            series.append((reads(), _proc_status(child.pid)["VmRSS"]))
        elapsed = time.perf_counter() - started
        at_end = {"cycles": reads(), "cpu_s": _cpu_seconds(child.pid), **_proc_status(child.pid)}
        writes = api.count(writes=True) - writes_before
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    ran = at_end["cycles"] - at_10["cycles"]
    return {
        "cycles": at_end["cycles"],
        "rss_at_10_mib": at_10["VmRSS"],
        "rss_at_end_mib": at_end["VmRSS"],
        "growth_mib": at_end["VmRSS"] - at_10["VmRSS"],
        "peak_rss_mib": at_end["VmHWM"],
        "rss_series_mib": series,
        "cpu_ms_per_cycle": 1000 * (at_end["cpu_s"] - at_10["cpu_s"]) / ran,
        "wall_ms_per_cycle": 1000 * elapsed / ran,
        #: Writes after cycle 10 (the first cycle adds the timestamp label).
        "node_writes": writes,
    }


def print_tables(report: dict[str, Any]) -> None:
    machine = report["machine"]
    print(f"machine: {machine['nproc']} x {machine['cpu']}, Python {machine['python']}")
    oneshot = report["oneshot"]
    print(f"\none-shot runs, medians of {oneshot['runs']} interleaved runs")
    print("| command | wall | × floor | CPU | peak RSS | × floor |")
    print("|---|---|---|---|---|---|")
    for name, row in oneshot["medians"].items():
        print(
            f"| {name} | {row['wall_s'] * 1000:.0f} ms | {row['wall_over_floor']:.2f} "
            f"| {row['cpu_s'] * 1000:.0f} ms | {row['peak_rss_mib']:.1f} MiB "
            f"| {row['rss_over_floor']:.2f} |"
        )
    periodic = report["periodic"]
    print(f"\nperiodic agent (feature file + node sink + metrics), {periodic['cycles']} cycles")
    print(
        "| RSS at cycle 10 | RSS at the end | growth | peak RSS | CPU per cycle | writes after 10 |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {periodic['rss_at_10_mib']:.1f} MiB | {periodic['rss_at_end_mib']:.1f} MiB "
        f"| {periodic['growth_mib']:+.2f} MiB | {periodic['peak_rss_mib']:.1f} MiB "
        f"| {periodic['cpu_ms_per_cycle']:.1f} ms | {periodic['node_writes']} |"
    )
    print("RSS by cycle: " + ", ".join(f"{c}: {r:.1f}" for c, r in periodic["rss_series_mib"]))
    goals = report["goals"]
    print("\ngoals: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in goals.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="one-shot runs per command (≥ 10)")
    parser.add_argument("--cycles", type=int, default=1000, help="periodic cycles to run")
    args = parser.parse_args()
    with ApiServerEmulator() as api, tempfile.TemporaryDirectory(prefix="gfd-cost-") as tmp:
        seed_gfd_cluster(api, node_name=NODE, token=TOKEN)
        workdir = Path(tmp)
        oneshot = oneshot_runs(args.runs, workdir, api)
        periodic = periodic_run(args.cycles, workdir, api)
    feature_file = oneshot["medians"]["gfd --oneshot, feature file"]
    quiet = oneshot["medians"]["gfd --oneshot, feature file, --log-level error"]
    version = oneshot["medians"]["gfd --version"]
    report = {
        "machine": machine_description(),
        "command": " ".join(["python", "bench/agent_cost.py", *sys.argv[1:]]),
        "oneshot": oneshot,
        "periodic": periodic,
        "goals": {
            f"oneshot wall ≤ {GOAL_ONESHOT_OVER_FLOOR}× floor": feature_file["wall_over_floor"]
            <= GOAL_ONESHOT_OVER_FLOOR,
            f"quiet oneshot wall ≤ {GOAL_ONESHOT_OVER_FLOOR}× floor": quiet["wall_over_floor"]
            <= GOAL_ONESHOT_OVER_FLOOR,
            f"--version wall ≤ {GOAL_VERSION_OVER_FLOOR}× floor": version["wall_over_floor"]
            <= GOAL_VERSION_OVER_FLOOR,
            "periodic RSS < 60 MiB": periodic["peak_rss_mib"] < GOAL_PERIODIC_RSS_MIB,
            "growth ≤ 1 MiB": periodic["growth_mib"] <= GOAL_GROWTH_MIB,
            "0 steady-state writes": periodic["node_writes"] == 0,
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_tables(report)
    missed = [goal for goal, met in report["goals"].items() if not met]
    if missed:
        print("\n" + "!" * 72, file=sys.stderr)
        print(f"agent_cost.py: goals MISSED: {'; '.join(missed)}", file=sys.stderr)
        print("!" * 72, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
