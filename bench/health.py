"""What the GPU health checks add to a cycle, beside the steady NVML read they follow.

For the simulated DGX H100 and a 16-GPU A100 node with seven MIG devices per GPU, in
process, medians of ``--runs`` runs, measured side by side in one process:
:class:`gfd.nvml.reader.NvmlReader`'s steady read, and
:meth:`gfd.health.HealthMonitor.observe` with every check on (gpu-lost, device-plugin
against a Node whose allocatable matches, nvlink). The simulator's sysfs tree holds only
the GPUs; a real host has a few hundred PCI functions, so ``--other-devices`` more
(vendor 0x8086, bridges and controllers) are added beside them, which the scan must list
and skip. Results go to ``bench/results/health.json``.
Run: ``python bench/health.py [--runs N] [--other-devices N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _timing import median_us  # noqa: E402
from reference import mig_machine  # noqa: E402

from gfd.facts import NodeFacts  # noqa: E402
from gfd.health import HealthMonitor, expected_resources  # noqa: E402
from gfd.nvml.reader import NvmlReader  # noqa: E402
from gfd.sim import load_profile, simulate  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "health.json"


def _add_other_devices(sysfs_root: Path, count: int) -> None:
    devices = sysfs_root / "bus" / "pci" / "devices"
    for n in range(count):
        device = devices / f"0000:{0xE0 + n // 32:02x}:{n % 32:02x}.{n % 8}"
        device.mkdir(parents=True, exist_ok=True)
        (device / "vendor").write_text("0x8086\n")
        (device / "class").write_text("0x060400\n" if n % 3 else "0x088000\n")


def measure(
    name: str, facts: NodeFacts, mig_strategy: str, runs: int, others: int
) -> dict[str, Any]:
    with simulate(facts) as machine:
        _add_other_devices(machine.sysfs_root, others)
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        try:
            read = reader.read()
            allocatable = {
                k: str(v) for k, v in expected_resources(read, mig_strategy, None).items()
            }
            node = {"metadata": {"name": "bench"}, "status": {"allocatable": allocatable}}
            monitor = HealthMonitor(sysfs_root=machine.sysfs_root, mig_strategy=mig_strategy)
            verdict = monitor.observe(read, node=node)
            if not verdict.decided:
                raise SystemExit(f"{name}: the checks found a problem on a healthy machine")
            steady_read = median_us(reader.read, runs)
            checks = median_us(lambda: monitor.observe(read, node=node), runs)
        finally:
            reader.close()
    return {
        "machine": name,
        "pci_devices": len(facts.gpus) + others,
        "steady_read_us": steady_read,
        "health_checks_us": checks,
        "ratio": checks / steady_read,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=500, help="runs per median")
    parser.add_argument("--other-devices", type=int, default=300, help="non-GPU PCI functions")
    args = parser.parse_args()
    rows = [
        measure(
            "simulated DGX H100",
            load_profile("dgx-h100").facts,
            "none",
            args.runs,
            args.other_devices,
        ),
        measure(
            "16 A100s, 7 MIG devices each", mig_machine(16), "mixed", args.runs, args.other_devices
        ),
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": args.runs, "rows": rows}, indent=2) + "\n")
    print(f"medians of {args.runs} runs, in process\n")
    print("| machine | PCI functions | steady NVML read | health checks | checks / read |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['machine']} | {row['pci_devices']} | {row['steady_read_us']:.0f} µs "
            f"| {row['health_checks_us']:.0f} µs | {row['ratio']:.2f}× |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
