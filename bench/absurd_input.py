"""How fast absurd input is refused, and how fast a stop signal ends a run.

Refusals: whole ``gfd --simulate FILE labels`` processes (Python start included) on facts
files no node can produce: 10,000 GPUs as gfd's own YAML style (block), as one flow line per
GPU and as JSON, and the 4 MiB files (the most gfd reads) that hold the most list items:
millions of GPUs or NVLinks. Each must exit 2 with one line; the wall time is the median of
``--runs`` runs, and the bound check alone (``check_document_bounds``, in this process) is
timed beside it. For scale, the same command on a bundled profile.

Stops: the wall time from SIGTERM to the process's exit, medians of ``--runs`` runs, for a
one-shot and a periodic run held inside an NVML call that never returns (the simulator's
``delays`` fault: the stop watchdog ends them), a periodic run in the middle of a slow cycle
(NVML answering each GPU pair in 0.3 s: the cycle is abandoned between two calls), and an
idle periodic run between cycles. Results go to ``bench/results/absurd_input.json``.
Run: ``python bench/absurd_input.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import signal
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

import yaml  # noqa: E402

from gfd.facts import dump_facts  # noqa: E402
from gfd.facts.limits import FactsLimitError, check_document_bounds  # noqa: E402
from gfd.sim import CallDelay, Faults, load_profile  # noqa: E402
from gfd.sim.faults import faults_to_dict  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "absurd_input.json"
GPUS = 10_000


def _gpu(i: int) -> dict[str, Any]:
    return {
        "index": i,
        "name": "NVIDIA L4",
        "uuid": f"GPU-{i:08x}",
        "bus_id": f"{i >> 8:08X}:{i & 0xFF:02X}:00.0",
    }


def documents() -> dict[str, str]:
    """The absurd facts files, by name."""
    gpus = [_gpu(i) for i in range(GPUS)]
    flow = "\n".join(
        ["driver_version: 570.172.08", "gpus:"]
        + [
            f"- {{index: {g['index']}, name: {g['name']}, uuid: {g['uuid']}, "
            f"bus_id: '{g['bus_id']}'}}"
            for g in gpus
        ]
    )
    return {
        "10k GPUs, block YAML": yaml.safe_dump({"gpus": gpus}, sort_keys=False),
        "10k GPUs, flow YAML": flow + "\n",
        "10k GPUs, JSON": json.dumps({"gpus": gpus}, indent=2),
        "4 MiB: 2M GPUs of one digit": "gpus: [" + "0," * 2_090_000 + "0]\n",
        "4 MiB: 1.4M empty GPUs": "gpus: [" + "{}," * 1_390_000 + "{}]\n",
        "4 MiB: 1.4M NVLinks on one GPU": "gpus:\n- nvlinks: [" + "{}," * 1_390_000 + "{}]\n",
    }


def gfd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gfd", *args, "--log-level", "error"]


def time_refusal(path: Path, runs: int) -> dict[str, Any]:
    samples, lines = [], []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            gfd("--simulate", str(path), "labels"), capture_output=True, text=True, timeout=600
        )
        samples.append(time.perf_counter() - started)
        lines = done.stderr.splitlines()
        if done.returncode != 2 or len(lines) != 1:
            raise SystemExit(f"{path}: expected exit 2 with one line, got {done.returncode}")
    text = path.read_text()
    started = time.perf_counter()
    try:
        check_document_bounds(text, str(path))
    except FactsLimitError:
        check = time.perf_counter() - started
    else:
        raise SystemExit(f"{path}: the bound check let it through")
    return {
        "bytes": len(text.encode()),
        "process_ms": round(statistics.median(samples) * 1000, 1),
        "process_max_ms": round(max(samples) * 1000, 1),
        "bound_check_ms": round(check * 1000, 1),
        "line": lines[0].split(": ", 2)[-1],
    }


def time_command(args: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(args, capture_output=True, check=True, timeout=600)
        samples.append(time.perf_counter() - started)
    return round(statistics.median(samples) * 1000, 1)


def in_nanosleep(pid: int) -> bool:
    try:
        return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def time_stop(args: list[str], ready: str, runs: int, workdir: Path) -> dict[str, Any]:
    """SIGTERM once ``ready`` holds ("slow": inside a delayed call, "idle": after the first
    cycle wrote its file); seconds to exit, and the exit codes seen."""
    samples, codes = [], set()
    for run in range(runs):
        output = workdir / f"out-{run}"
        process = subprocess.Popen(
            [*args, "-o", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ready == "slow" and in_nanosleep(process.pid):
                break
            if ready == "idle" and output.exists():
                time.sleep(0.3)
                break
            time.sleep(0.02)
        else:
            process.kill()
            raise SystemExit(f"{args}: never got {ready}")
        started = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        codes.add(process.wait(timeout=60))
        samples.append(time.perf_counter() - started)
    return {
        "median_ms": round(statistics.median(samples) * 1000, 1),
        "max_ms": round(max(samples) * 1000, 1),
        "exit_codes": sorted(codes),
    }


def slow_profile(workdir: Path, base: str, delay: CallDelay) -> Path:
    path = workdir / f"{base}-{delay.call}.yaml"
    faults = {"faults": {"delays": faults_to_dict(Faults(delays=(delay,)))["delays"]}}
    path.write_text(dump_facts(load_profile(base).facts) + yaml.safe_dump(faults))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    results: dict[str, Any] = {"refusals": {}, "stops": {}}
    with tempfile.TemporaryDirectory(prefix="gfd-bench-absurd-") as directory:
        workdir = Path(directory)
        for name, text in documents().items():
            path = workdir / f"{len(results['refusals'])}.yaml"
            path.write_text(text)
            results["refusals"][name] = time_refusal(path, runs)
        results["bundled dgx-h100 labels (for scale), ms"] = time_command(
            gfd("--simulate", "dgx-h100", "labels"), runs
        )
        hung = CallDelay(call="nvmlDeviceGetName", seconds=600)
        slow_pairs = CallDelay(call="nvmlDeviceGetTopologyCommonAncestor", seconds=0.3)
        hung_profile = str(slow_profile(workdir, "t4-single", hung))
        slow_profile_path = str(slow_profile(workdir, "dgx-h100", slow_pairs))
        periodic = ["--sleep-interval", "60s"]
        cases = {
            "one-shot held in an NVML call": (gfd("--simulate", hung_profile, "--oneshot"), "slow"),
            "periodic, held in an NVML call": (gfd("--simulate", hung_profile, *periodic), "slow"),
            "periodic, in a slow cycle": (gfd("--simulate", slow_profile_path, *periodic), "slow"),
            "periodic, idle between cycles": (gfd("--simulate", "dgx-h100", *periodic), "idle"),
        }
        for name, (args, ready) in cases.items():
            results["stops"][name] = time_stop(args, ready, runs, workdir)
    print(json.dumps(results, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
