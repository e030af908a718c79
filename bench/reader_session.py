"""What a periodic cycle's NVML read costs: a one-shot read against a steady read of one session.

For the simulated DGX H100 and a 16-GPU A100 node with seven MIG devices per GPU, in
process, medians of ``--reads`` reads: :func:`gfd.nvml.reader.read_facts` (NVML started
and shut down, everything asked), :class:`gfd.nvml.reader.NvmlReader`'s steady read (one
session, only what can change asked), the NVML calls of each, and the labels and
topology the agent skips when the facts are equal. Both reads are checked to return the
machine's facts. Results go to ``bench/results/reader_session.json``.
Run: ``python bench/reader_session.py [--reads N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reference import mig_machine  # noqa: E402

from gfd.agent import compute_labels  # noqa: E402
from gfd.facts import NodeFacts  # noqa: E402
from gfd.labels import LabelOptions  # noqa: E402
from gfd.nvml.reader import NvmlReader, read_facts  # noqa: E402
from gfd.sim import load_profile, simulate  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "reader_session.json"


def _median_ms(fn: Callable[[], object], reads: int) -> float:
    samples = []
    for _ in range(reads):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def measure(name: str, facts: NodeFacts, reads: int) -> dict[str, Any]:
    with simulate(facts) as machine:
        where = {
            "library_path": machine.library_path,
            "sysfs_root": machine.sysfs_root,
            "machine_type_file": machine.machine_type_file,
        }
        reader = NvmlReader(**where)
        try:
            if reader.read() != facts or read_facts(**where) != facts:
                raise SystemExit(f"{name}: a read did not return the machine's facts")
            fresh = NvmlReader(**where)
            fresh.read()
            first_calls = fresh.last_calls
            fresh.close()
            reader.read()
            one_shot = _median_ms(lambda: read_facts(**where), reads)
            steady = _median_ms(reader.read, reads)
            steady_calls = reader.last_calls
        finally:
            reader.close()
    labels = _median_ms(lambda: compute_labels(facts, LabelOptions()), reads)
    return {
        "machine": name,
        "one_shot_read_ms": one_shot,
        "steady_read_ms": steady,
        "first_calls": first_calls,
        "steady_calls": steady_calls,
        "labels_and_topology_ms": labels,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reads", type=int, default=200, help="reads per median")
    args = parser.parse_args()
    rows = [
        measure("simulated DGX H100", load_profile("dgx-h100").facts, args.reads),
        measure("16 A100s, 7 MIG devices each", mig_machine(16), args.reads),
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"reads": args.reads, "rows": rows}, indent=2) + "\n")
    print(f"medians of {args.reads} reads, in process\n")
    print(
        "| machine | one-shot read | steady read of a session | NVML calls, first → steady | labels and topology |"
    )
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['machine']} | {row['one_shot_read_ms']:.2f} ms | {row['steady_read_ms']:.2f} ms "
            f"| {row['first_calls']} → {row['steady_calls']} | {row['labels_and_topology_ms']:.2f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
