"""What reading memory health and judging Xids and memory add to a cycle.

For the simulated DGX H100 (Hopper: remapped rows) and DGX-1 (Volta: retired pages), in
process, medians of ``--runs`` runs: :class:`gfd.nvml.reader.NvmlReader`'s steady read
and its NVML calls, first and steady, with the GPUs reporting what real drivers do
(:func:`gfd.sim.with_default_memory_health`: ECC on, rows or pages) against the same
machine whose GPUs report no memory health at all (every such call NOT_SUPPORTED, which
the reader asks once per session); and the ``xid`` and ``memory`` checks' own cost per
cycle (:meth:`gfd.health.HealthMonitor.observe` with those two on, the Xid watcher
running and drained, nothing arriving). Results go to ``bench/results/memory_health.json``.
Run: ``python bench/memory_health.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _timing import median_us  # noqa: E402

from gfd.facts import NodeFacts  # noqa: E402
from gfd.health import MEMORY, XID, EventRules, HealthMonitor  # noqa: E402
from gfd.nvml.reader import NvmlReader  # noqa: E402
from gfd.nvml.xid_events import XidWatcher  # noqa: E402
from gfd.sim import load_profile, simulate, with_default_memory_health  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "memory_health.json"


def _read(facts: NodeFacts, runs: int) -> dict[str, Any]:
    """The steady read's median and the calls of a session's first and steady reads."""
    with simulate(facts) as machine:
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        try:
            reader.read()
            first = reader.last_calls
            reader.read()
            steady = reader.last_calls
            steady_us = median_us(reader.read, runs)
        finally:
            reader.close()
    return {"first_calls": first, "steady_calls": steady, "steady_read_us": steady_us}


def _checks(facts: NodeFacts, runs: int) -> float:
    """The xid and memory checks' median per cycle, the watcher running."""
    with simulate(facts) as machine:
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        watcher = XidWatcher(library_path=machine.library_path)
        watcher.start()
        try:
            read = reader.read()
            monitor = HealthMonitor(
                sysfs_root=machine.sysfs_root,
                checks=[XID, MEMORY],
                events=EventRules(xid_events=watcher),
            )
            if not monitor.observe(read).decided:
                raise SystemExit("the checks found a problem on a healthy machine")
            return median_us(lambda: monitor.observe(read), runs)
        finally:
            watcher.close()
            reader.close()


def measure(name: str, profile: str, runs: int) -> dict[str, Any]:
    # The bundled profiles carry memory health: take it off for the machine reporting none.
    bundled = load_profile(profile).facts
    plain = dataclasses.replace(
        bundled,
        gpus=tuple(dataclasses.replace(gpu, memory_health=None) for gpu in bundled.gpus),
    )
    reporting = with_default_memory_health(plain)
    without = _read(plain, runs)
    with_health = _read(reporting, runs)
    return {
        "machine": name,
        "gpus": len(plain.gpus),
        "without": without,
        "with": with_health,
        "added_steady_calls": with_health["steady_calls"] - without["steady_calls"],
        "added_first_calls": with_health["first_calls"] - without["first_calls"],
        "added_steady_us": with_health["steady_read_us"] - without["steady_read_us"],
        "checks_us": _checks(reporting, runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=500, help="runs per median")
    args = parser.parse_args()
    rows = [
        measure("simulated DGX H100 (remapped rows)", "dgx-h100", args.runs),
        measure("simulated DGX-1 V100 (retired pages)", "dgx1-v100", args.runs),
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": args.runs, "rows": rows}, indent=2) + "\n")
    print(f"medians of {args.runs} runs, in process\n")
    print(
        "| machine | steady read, no memory health → with it | NVML calls, steady | "
        "NVML calls, first | xid + memory checks |"
    )
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        without, with_health = row["without"], row["with"]
        print(
            f"| {row['machine']} | {without['steady_read_us']:.0f} → "
            f"{with_health['steady_read_us']:.0f} µs | {without['steady_calls']} → "
            f"{with_health['steady_calls']} (+{row['added_steady_calls']}) | "
            f"{without['first_calls']} → {with_health['first_calls']} "
            f"(+{row['added_first_calls']}) | {row['checks_us']:.0f} µs |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
