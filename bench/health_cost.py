"""CPU per cycle of the periodic agent with every health check, side by side with another gfd.

The agent runs as ``bench/agent_cost.py`` runs it (the ``gfd`` console script on the
prepared simulated DGX H100, as on a real node; the feature file, the node sink against
the API server emulator and metrics on; ``--sleep-interval 10ms``), with gfd's default
health checks, all of them, and its default kernel log (``/dev/kmsg``, read where this
host lets it be read). CPU per cycle is ``utime + stime`` between cycle 10 and the last,
over ``--cycles`` cycles; the agents are run interleaved, ``--rounds`` times each, and the
medians are reported.

Side by side with ``--baseline DIR``: DIR is a checkout of another gfd (the commit before
a change) with its C parts built in place (``python setup.py build_ext --inplace`` there);
its agent runs from that tree, on a machine its own simulator prepared. Without it, the
agent with every check runs beside the same agent with ``--health-checks none``. The
ratio to the baseline is checked against :data:`GOAL_RATIO` (issue 33: within 10 %); a
miss prints ``MISSED`` and exits 1. Results go to ``bench/results/health_cost.json``.
Run: ``python bench/health_cost.py [--baseline DIR] [--rounds N] [--cycles N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _launcher import child_environment  # noqa: E402
from agent_cost import (  # noqa: E402
    NODE,
    PROFILE,
    TOKEN,
    _cpu_seconds,
    _wait,
    console_script,
    machine_description,
)

from tests.emulator import ApiServerEmulator, seed_gfd_cluster  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "health_cost.json"
#: Issue 33: CPU per cycle with every check within 10 % of what it was.
GOAL_RATIO = 1.10


def prepared_machine(tree: Path, directory: Path, env: dict[str, str]) -> dict[str, str]:
    """Prepare the DGX H100 with ``tree``'s own simulator (its machine file format):
    the variables and paths ``python -m gfd.sim`` prints."""
    out = subprocess.run(
        [sys.executable, "-m", "gfd.sim", PROFILE, str(directory)],
        env={**env, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            found[name] = value.strip("'")
        elif line.startswith("# sysfs root: "):
            found["sysfs_root"] = line.removeprefix("# sysfs root: ")
        elif line.startswith("# machine type file: "):
            found["machine_type_file"] = line.removeprefix("# machine type file: ")
    return found


def cpu_per_cycle(
    tree: Path,
    extra: list[str],
    cycles: int,
    workdir: Path,
    api: ApiServerEmulator,
) -> float:
    """One periodic agent from ``tree``: CPU milliseconds per cycle after cycle 10."""
    base = {**child_environment(workdir), "PYTHONPATH": str(tree)}
    machine = prepared_machine(tree, workdir / "machine", base)
    env = {
        **base,
        **{k: v for k, v in machine.items() if k not in ("sysfs_root", "machine_type_file")},
    }
    kubeconfig = api.write_kubeconfig(workdir / "kubeconfig", TOKEN)
    command = [
        sys.executable, str(console_script(workdir)), "--sleep-interval", "10ms",
        "-o", str(workdir / "features"),
        "--patch-node", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
        "--metrics-address", "127.0.0.1:0",
        "--sysfs-root", machine["sysfs_root"],
        "--machine-type-file", machine["machine_type_file"],
        *extra,
    ]  # fmt: skip
    api.clear_log()

    def reads() -> int:
        return api.count(method="GET")

    child = subprocess.Popen(
        command, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait(lambda: reads() >= 10, child, timeout=60)
        start_cycles, start_cpu = reads(), _cpu_seconds(child.pid)
        _wait(lambda: reads() >= cycles, child, timeout=max(120.0, cycles * 0.5))
        end_cycles, end_cpu = reads(), _cpu_seconds(child.pid)
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 1000 * (end_cpu - start_cpu) / (end_cycles - start_cycles)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", type=Path, help="a built checkout of the other gfd")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each agent")
    parser.add_argument("--cycles", type=int, default=500, help="cycles per run")
    args = parser.parse_args()
    if args.baseline is not None:
        agents = {
            "baseline": (args.baseline.resolve(), []),
            "this checkout": (ROOT, []),
        }
    else:
        agents = {
            "this checkout, --health-checks none": (ROOT, ["--health-checks", "none"]),
            "this checkout": (ROOT, []),
        }
    samples: dict[str, list[float]] = {name: [] for name in agents}
    with ApiServerEmulator() as api, tempfile.TemporaryDirectory(prefix="gfd-health-") as tmp:
        seed_gfd_cluster(api, node_name=NODE, token=TOKEN)
        for round_ in range(args.rounds):
            for n, (name, (tree, extra)) in enumerate(agents.items()):
                run = Path(tmp) / f"round-{round_}-agent-{n}"
                run.mkdir()
                samples[name].append(cpu_per_cycle(tree, extra, args.cycles, run, api))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    before, after = medians.values()
    ratio = after / before
    report: dict[str, Any] = {
        "machine": machine_description(),
        "rounds": args.rounds,
        "cycles": args.cycles,
        "samples_ms": samples,
        "medians_ms": medians,
        "ratio": ratio,
        "goal_ratio": GOAL_RATIO,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"CPU per cycle, medians of {args.rounds} runs of {args.cycles} cycles each\n")
    print("| agent | CPU per cycle | runs |")
    print("|---|---:|---|")
    for name, value in medians.items():
        runs = ", ".join(f"{v:.2f}" for v in samples[name])
        print(f"| {name} | {value:.2f} ms | {runs} |")
    if args.baseline is None:
        # The checks' own cost: no goal (the goal is against the gfd before a change).
        print(f"\nratio {ratio:.3f}: what every check costs a cycle")
        return 0
    met = ratio <= GOAL_RATIO
    print(f"\nratio {ratio:.3f} (goal <= {GOAL_RATIO}): {'met' if met else 'MISSED'}")
    if not met:
        print("=" * 60 + "\nMISSED: CPU per cycle with every health check\n" + "=" * 60)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
