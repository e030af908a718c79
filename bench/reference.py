"""gfd side by side with NVIDIA's GPU Feature Discovery on the same simulated machines.

Both programs run as on a real node: the simulated ``libnvidia-ml.so.1`` of the machine's
driver branch from ``LD_LIBRARY_PATH``, the machine's PCI tree bind-mounted at
``/sys/bus/pci/devices`` in a private mount namespace (the reference reads that fixed
path; gfd is also given ``--sysfs-root`` but runs under the same wrapper, so both pay the
same ``unshare``/``mount`` start-up), no ``--simulate``. The machines are A100 40GB nodes
with every GPU split into seven ``1g.5gb`` MIG devices (the layout every MIG strategy can
label) with 1, 8 and 16 GPUs, each under ``--mig-strategy`` none, single and mixed.

* **One-shot**: ``--oneshot --no-timestamp`` writing a feature file, runs interleaved
  (gfd, reference, gfd, ...) so drift in the machine's load hits both alike; medians of
  ``--runs`` of wall time and peak RSS (``ru_maxrss`` via ``os.wait4`` from a small
  launcher process).
* **Periodic**: each program alone with ``--sleep-interval`` ``--interval`` (1 s: the
  steady state of a DaemonSet, faster than any real one); cycles are counted from each
  one's own per-cycle log line (the reference's "Writing labels to output file", gfd's
  debug "cycle done"); CPU time per cycle (the threads' ``schedstat``, in nanoseconds,
  between cycle 10 and cycle 10 + ``--cycles``) and RSS (``VmRSS``) at those two points.
* **Growth**: gfd alone at a 10 ms interval for ``--growth-cycles`` cycles (1,000):
  its RSS after 10 cycles and after the rest.
* **The reference without the PCI tree**: on the 8-GPU machine, the reference once more
  with nothing at ``/sys/bus/pci/devices``, as a run outside the mount namespace sees
  it. Its GPU-mode and vGPU labelers then fail early, which skips its per-GPU parse of
  the PCI ID database (about 25 ms per GPU here): the cheapest the reference gets, and
  what a comparison that forgets the PCI tree measures.

Ratios are gfd / reference: below 1 means gfd costs less. Needs ``GFD_REFERENCE_BIN`` (see
``../shared/oracles/README.md``) and root (for the private mount namespace); without
them it prints one line saying so and exits 0. Results go to
``bench/results/reference.json``. Run:
``python bench/reference.py [--runs N] [--cycles N] [--interval D] [--growth-cycles N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _launcher import Launcher, child_environment  # noqa: E402

from gfd.config import parse_duration  # noqa: E402
from gfd.facts import Gpu, NodeFacts, PciPair  # noqa: E402
from gfd.sim import SimulatedMachine, load_profile, prepare_machine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "reference.json"
GPU_COUNTS = (1, 8, 16)
STRATEGIES = ("none", "single", "mixed")
WARM_UP_CYCLES = 10
#: The per-cycle log line of each program.
CYCLE_LINE = {"reference": "Writing labels to output file", "gfd": '"cycle done"'}


def mig_machine(gpus: int) -> NodeFacts:
    """An A100 node of ``gpus`` GPUs, each in seven 1g.5gb MIG devices.

    Up to 8 GPUs are the bundled DGX A100's first ones; 16 adds a second board's worth,
    copies of the first eight on PCI domain 1 with their own UUIDs, SYS to the first.
    """
    base = load_profile("dgx-a100-mig-single").facts
    if gpus <= len(base.gpus):
        kept = base.gpus[:gpus]
        pairs = tuple(p for p in base.pci_pairs if p.b < gpus)
        return dataclasses.replace(base, gpus=kept, pci_pairs=pairs)
    copies = []
    for gpu in base.gpus[: gpus - len(base.gpus)]:
        migs = tuple(dataclasses.replace(m, uuid=m.uuid[:-4] + "b0ff") for m in gpu.mig_devices)  # type: tuple[MigDevice, ...]
        copies.append(
            dataclasses.replace(
                gpu,
                index=gpu.index + len(base.gpus),
                uuid=gpu.uuid[:-4] + "b0ff",
                bus_id="00000001" + gpu.bus_id[8:],
                mig_devices=migs,
            )
        )
    all_gpus: tuple[Gpu, ...] = (*base.gpus, *copies)
    n = len(base.gpus)
    pairs = list(base.pci_pairs)
    pairs += [PciPair(p.a + n, p.b + n, p.level) for p in base.pci_pairs if p.b + n < gpus]
    pairs += [PciPair(a, b, "system") for a in range(n) for b in range(n, gpus)]
    return dataclasses.replace(
        base, gpus=all_gpus, pci_pairs=tuple(sorted(pairs, key=lambda p: (p.a, p.b)))
    )


def gfd_command() -> str:
    """The ``gfd`` console script of this interpreter's environment (the container's entry)."""
    script = Path(sys.executable).with_name("gfd")
    if not script.exists():
        raise SystemExit(f"{script} is missing: install gfd into this environment (make test)")
    return str(script)


def wrapped(machine: SimulatedMachine, program: list[str]) -> list[str]:
    """``program`` in a private mount namespace with the machine's PCI tree at the fixed path."""
    devices = machine.sysfs_root / "bus" / "pci" / "devices"
    unshare = shutil.which("unshare")
    assert unshare is not None
    return [
        unshare, "-m", "sh", "-c",
        f"mount --bind {devices} /sys/bus/pci/devices && exec {' '.join(program)}",
    ]  # fmt: skip


def programs(
    machine: SimulatedMachine, reference: str, strategy: str, out: Path, extra: list[str]
) -> dict[str, list[str]]:
    dmi = str(machine.machine_type_file)
    return {
        "gfd": [
            gfd_command(), "--no-timestamp", "--mig-strategy", strategy,
            "--output-file", str(out / "gfd"), "--sysfs-root", str(machine.sysfs_root),
            "--machine-type-file", dmi, *extra,
        ],
        "reference": [
            reference, "--no-timestamp", "--mig-strategy", strategy,
            "--use-node-feature-api=false", "--output-file", str(out / "reference"),
            "--machine-type-file", dmi, *extra,
        ],
    }  # fmt: skip


def oneshot(launcher: Launcher, commands: dict[str, list[str]], runs: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            samples[name].append(launcher.run(command))
    return {
        name: {
            key: statistics.median(s[key] for s in runs_of) for key in ("wall_s", "peak_rss_mib")
        }
        for name, runs_of in samples.items()
    }


def _cpu_seconds(pid: int) -> float:
    """CPU time of all of ``pid``'s threads, in nanoseconds' resolution.

    ``/proc/PID/stat`` counts in clock ticks (10 ms): over 20 cycles of 2 ms that is a
    quarter of the figure. Each thread's ``schedstat`` counts nanoseconds on the CPU;
    both programs keep their threads for the whole run, so the sum over live threads is
    the process's CPU time between two samples.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text(encoding="utf-8").split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between listing and reading
    return total / 1e9


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


def periodic(
    command: list[str],
    env: dict[str, str],
    log: Path,
    marker: str,
    cycles: int,
    interval_s: float = 0.01,
) -> dict[str, float]:
    with log.open("wb") as sink:
        child = subprocess.Popen(command, env=env, cwd=ROOT, stdout=sink, stderr=sink)
    try:

        def count() -> int:
            return log.read_bytes().count(marker.encode())

        def wait_for(target: int) -> None:
            deadline = time.monotonic() + 30 + target * (interval_s + 0.5)
            while count() < target:
                if child.poll() is not None:
                    raise SystemExit(f"{command[-1]} exited early; see {log}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"{' '.join(command)} did not reach {target} cycles")
                time.sleep(0.01)

        wait_for(WARM_UP_CYCLES)
        start_cycles, start_cpu, start_rss = count(), _cpu_seconds(child.pid), _rss_mib(child.pid)
        wait_for(start_cycles + cycles)
        end_cycles, end_cpu, end_rss = count(), _cpu_seconds(child.pid), _rss_mib(child.pid)
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return {
        "cpu_ms_per_cycle": (end_cpu - start_cpu) / (end_cycles - start_cycles) * 1000,
        "rss_start_mib": start_rss,
        "rss_end_mib": end_rss,
    }


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=9, help="one-shot runs per program (median)")
    parser.add_argument("--cycles", type=int, default=20, help="periodic cycles measured")
    parser.add_argument("--interval", default="1s", help="periodic --sleep-interval")
    parser.add_argument(
        "--growth-cycles", type=int, default=1000, help="gfd cycles at 10 ms for RSS growth"
    )
    parser.add_argument("--gpus", type=int, nargs="*", default=list(GPU_COUNTS))
    args = parser.parse_args()
    reference = os.environ.get("GFD_REFERENCE_BIN", "")
    if not reference or not Path(reference).is_file():
        print("reference.py: skipped: GFD_REFERENCE_BIN is unset (see ../shared/oracles/README.md)")
        return 0
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("reference.py: skipped: needs root and unshare for the reference's fixed /sys path")
        return 0
    interval_s = parse_duration(args.interval, "--interval") or 1.0
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gfd-bench-ref-") as tmp:
        work = Path(tmp)
        env_base = child_environment(work)
        for gpus in args.gpus:
            machine = prepare_machine(mig_machine(gpus), work / f"machine-{gpus}")
            env = {**env_base, **machine.environment()}
            launcher = Launcher(env)
            try:
                for strategy in STRATEGIES:
                    out = work / f"out-{gpus}-{strategy}"
                    out.mkdir()
                    oneshot_commands = {
                        name: wrapped(machine, command)
                        for name, command in programs(
                            machine, reference, strategy, out, ["--oneshot"]
                        ).items()
                    }
                    # A first, unmeasured run of each warms the page cache and the bytecode.
                    for command in oneshot_commands.values():
                        launcher.run(command)
                    once = oneshot(launcher, oneshot_commands, args.runs)
                    loops = {}
                    looping = programs(
                        machine, reference, strategy, out, ["--sleep-interval", args.interval]
                    )
                    for name, command in looping.items():
                        if name == "gfd":
                            command = [*command, "--log-level", "debug"]
                        loops[name] = periodic(
                            wrapped(machine, command), env, out / f"{name}.log", CYCLE_LINE[name],
                            args.cycles, interval_s,
                        )  # fmt: skip
                    fast = programs(machine, reference, strategy, out, ["--sleep-interval", "10ms"])
                    growth = periodic(
                        wrapped(machine, [*fast["gfd"], "--log-level", "debug"]), env,
                        out / "gfd-growth.log", CYCLE_LINE["gfd"], args.growth_cycles,
                    )  # fmt: skip
                    row: dict[str, Any] = {
                        "gpus": gpus, "strategy": strategy, "oneshot": once, "periodic": loops,
                        "growth": growth,
                    }  # fmt: skip
                    if gpus == 8 and strategy == "none":
                        bare = programs(machine, reference, strategy, out, ["--oneshot"])
                        row["reference_without_pci_tree"] = {
                            "oneshot": oneshot(launcher, {"reference": bare["reference"]}, args.runs)[
                                "reference"
                            ],
                            "periodic": periodic(
                                looping["reference"], env, out / "bare.log",
                                CYCLE_LINE["reference"], args.cycles, interval_s,
                            ),
                        }  # fmt: skip
                    rows.append(row)
                    print(f"measured {gpus} GPUs, --mig-strategy {strategy}", file=sys.stderr)
            finally:
                launcher.close()
    report = {
        "runs": args.runs, "cycles": args.cycles, "interval": args.interval,
        "growth_cycles": args.growth_cycles, "rows": rows,
    }  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_tables(report)
    return 0


def print_tables(report: dict[str, Any]) -> None:
    print(f"\nOne-shot, medians of {report['runs']} interleaved runs (gfd / reference):\n")
    print(
        "| GPUs | MIG strategy | gfd wall ms | reference wall ms | ratio | gfd peak MiB | reference peak MiB | ratio |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in report["rows"]:
        ours, theirs = row["oneshot"]["gfd"], row["oneshot"]["reference"]
        print(
            f"| {row['gpus']} | {row['strategy']} | {ours['wall_s'] * 1000:.0f} | "
            f"{theirs['wall_s'] * 1000:.0f} | {_ratio(ours['wall_s'], theirs['wall_s']):.2f} | "
            f"{ours['peak_rss_mib']:.1f} | {theirs['peak_rss_mib']:.1f} | "
            f"{_ratio(ours['peak_rss_mib'], theirs['peak_rss_mib']):.2f} |"
        )
    print(
        f"\nPeriodic, {report['interval']} interval, {report['cycles']} cycles after "
        f"{WARM_UP_CYCLES} (gfd / reference):\n"
    )
    print(
        "| GPUs | MIG strategy | gfd CPU ms/cycle | reference CPU ms/cycle | ratio | gfd RSS MiB | reference RSS MiB | RSS ratio |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in report["rows"]:
        ours, theirs = row["periodic"]["gfd"], row["periodic"]["reference"]
        print(
            f"| {row['gpus']} | {row['strategy']} | {ours['cpu_ms_per_cycle']:.2f} | "
            f"{theirs['cpu_ms_per_cycle']:.2f} | "
            f"{_ratio(ours['cpu_ms_per_cycle'], theirs['cpu_ms_per_cycle']):.3f} | "
            f"{ours['rss_end_mib']:.1f} | {theirs['rss_end_mib']:.1f} | "
            f"{_ratio(ours['rss_end_mib'], theirs['rss_end_mib']):.2f} |"
        )
    print(
        f"\ngfd's RSS growth, 10 ms interval, {report['growth_cycles']} cycles after {WARM_UP_CYCLES}:\n"
    )
    print("| GPUs | MIG strategy | RSS at cycle 10 | RSS at the end | growth | CPU ms/cycle |")
    print("|---:|---|---:|---:|---:|---:|")
    for row in report["rows"]:
        grown = row["growth"]
        print(
            f"| {row['gpus']} | {row['strategy']} | {grown['rss_start_mib']:.1f} MiB | "
            f"{grown['rss_end_mib']:.1f} MiB | {grown['rss_end_mib'] - grown['rss_start_mib']:+.2f} MiB | "
            f"{grown['cpu_ms_per_cycle']:.2f} |"
        )
    for row in report["rows"]:
        bare = row.get("reference_without_pci_tree")
        if bare is None:
            continue
        ours = row["oneshot"]["gfd"]
        loop = row["periodic"]["gfd"]
        print(
            f"\nThe reference without the PCI tree, {row['gpus']} GPUs, --mig-strategy {row['strategy']}:\n"
        )
        print("| | reference | gfd (with the tree) | gfd / reference |")
        print("|---|---:|---:|---:|")
        print(
            f"| one-shot wall | {bare['oneshot']['wall_s'] * 1000:.0f} ms | {ours['wall_s'] * 1000:.0f} ms | "
            f"{_ratio(ours['wall_s'], bare['oneshot']['wall_s']):.2f} |"
        )
        print(
            f"| one-shot peak RSS | {bare['oneshot']['peak_rss_mib']:.1f} MiB | {ours['peak_rss_mib']:.1f} MiB | "
            f"{_ratio(ours['peak_rss_mib'], bare['oneshot']['peak_rss_mib']):.2f} |"
        )
        print(
            f"| CPU per cycle | {bare['periodic']['cpu_ms_per_cycle']:.2f} ms | {loop['cpu_ms_per_cycle']:.2f} ms | "
            f"{_ratio(loop['cpu_ms_per_cycle'], bare['periodic']['cpu_ms_per_cycle']):.2f} |"
        )
        print(
            f"| RSS in the loop | {bare['periodic']['rss_end_mib']:.1f} MiB | {loop['rss_end_mib']:.1f} MiB | "
            f"{_ratio(loop['rss_end_mib'], bare['periodic']['rss_end_mib']):.2f} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
