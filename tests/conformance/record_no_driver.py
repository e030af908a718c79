"""Re-record what NVIDIA's GPU Feature Discovery does on a node whose NVIDIA driver is not loaded.

NVIDIA's real ``libnvidia-ml.so`` of each branch (``REAL_NVML_DIR``, Debian's) loads anywhere
and answers ``nvmlInit`` with NVML_ERROR_DRIVER_NOT_LOADED on a machine without the kernel
driver. This runner runs a reference binary you have on each library with
``--fail-on-init-error=false`` and ``=true`` and writes ``tests/records/reference-gfd/no-driver.json``:
per case the sha256 of its inputs (the library file's bytes and the flags), the exit status, and
the labels or the error line. ``tests/conformance/test_real_nvml.py`` holds gfd to it::

    REAL_NVML_DIR=... python -m tests.conformance.record_no_driver --reference-bin PATH

Run it on a machine with no NVIDIA driver loaded (``/proc/driver/nvidia`` absent).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.conformance.reference import RECORD_DIR, Outcome, outcome_to_record
from tests.records.store import Record, inputs_sha256, today, write_record
from tests.reliability.agent_process import parse_label_lines

RECORD = RECORD_DIR / "no-driver.json"
RERECORD = "REAL_NVML_DIR=... python -m tests.conformance.record_no_driver --reference-bin PATH"
#: The flags both programs run with; the case adds ``--fail-on-init-error``.
FLAGS = ("--oneshot", "--no-timestamp", "--use-node-feature-api=false")
FAIL_ON_INIT_ERROR = ("false", "true")


def case_id(library: Path, fail: str) -> str:
    return f"{library.parent.name}-fail-on-init-error-{fail}"


def case_inputs_sha256(library: Path, fail: str) -> str:
    digest = hashlib.sha256(library.resolve().read_bytes()).hexdigest()
    return inputs_sha256(
        {"library_sha256": digest, "flags": [*FLAGS, f"--fail-on-init-error={fail}"]}
    )


def libraries(root: Path) -> list[Path]:
    return sorted(root.glob("*/libnvidia-ml.so.1"))


def run_reference(binary: Path, library: Path, fail: str, output: Path) -> Outcome:
    done = subprocess.run(
        [str(binary), *FLAGS, f"--fail-on-init-error={fail}", "--output-file", str(output)],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(library.parent)},
    )  # fmt: skip
    labels = parse_label_lines(output.read_text(encoding="utf-8")) if output.exists() else None
    return Outcome(returncode=done.returncode, labels=labels, stderr=done.stderr[-3000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-bin", type=Path, required=True)
    parser.add_argument("--version", default="v0.20.0")
    parser.add_argument("--out", type=Path, default=RECORD)
    options = parser.parse_args(argv)
    root = os.environ.get("REAL_NVML_DIR", "")
    found = libraries(Path(root)) if root else []
    if not found:
        print(
            "record_no_driver: REAL_NVML_DIR holds no <version>/libnvidia-ml.so.1", file=sys.stderr
        )
        return 2
    if Path("/proc/driver/nvidia").exists():
        print(
            "record_no_driver: an NVIDIA driver is loaded here; run it elsewhere", file=sys.stderr
        )
        return 2
    cases: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for library in found:
            for fail in FAIL_ON_INIT_ERROR:
                output = Path(scratch) / case_id(library, fail)
                outcome = run_reference(options.reference_bin, library, fail, output)
                cases[case_id(library, fail)] = {
                    "inputs_sha256": case_inputs_sha256(library, fail),
                    **outcome_to_record(outcome),
                }
    notes = {
        "upstream": "NVIDIA/k8s-device-plugin",
        "how": (
            "LD_LIBRARY_PATH=<REAL_NVML_DIR>/<version> gpu-feature-discovery "
            f"{' '.join(FLAGS)} --fail-on-init-error=<case> --output-file F, on a machine "
            "without the NVIDIA kernel driver; this machine's own /sys"
        ),
        "inputs": "sha256 of {library_sha256: the library file's sha256, flags}",
    }
    write_record(
        options.out,
        Record(program="NVIDIA gpu-feature-discovery", version=options.version,
               recorded=today(), cases=cases, notes=notes),
    )  # fmt: skip
    print(f"record_no_driver: {len(cases)} cases -> {options.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
