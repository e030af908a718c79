"""Re-record what NVIDIA's GPU Feature Discovery (the reference) labels on every conformance case.

No package registry ships the reference, so CI replays a record of it instead of running it.
This runner makes that record: it runs a reference binary you have on every case of
``test_differential.py``, ``test_corpus.py`` and ``test_reference_on_branches.py`` (their
``suite_cases()``), through the same harness the live suites use (``reference.py``), and writes
one file per suite under ``tests/records/reference-gfd/``: per case the sha256 of its inputs, the
exit status, and the labels or the refusal's error line. Only gfd's simulator and this
checkout's cases are used; nothing about how the binary was obtained is kept.

Run as root (the reference reads the fixed path ``/sys/bus/pci/devices``, bind-mounted per run
in a private mount namespace)::

    python -m tests.conformance.record_reference --reference-bin PATH [--out DIR] [--suite NAME]

A release build reports its version; a build without the release's link flags reports
``version unknown``, so ``--version`` and ``--commit`` name what was built (checked against
what the binary reports, where it reports one).
"""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.conformance import test_corpus, test_differential, test_reference_on_branches
from tests.conformance.reference import (
    RECORD_DIR,
    REFERENCE_FLAGS,
    MachineSpec,
    Outcome,
    Run,
    case_inputs_sha256,
    outcome_to_record,
    prepare_machines,
    run_all,
    run_reference,
    unshare_problem,
    with_config,
)
from tests.records.store import Record, today, write_record

PROGRAM = "NVIDIA gpu-feature-discovery"
UPSTREAM = "NVIDIA/k8s-device-plugin"

#: Suite name (its record file's stem) → its test module's cases.
SUITES: dict[str, Callable[[], tuple[list[Run], dict[str, MachineSpec]]]] = {
    test_differential.SUITE: test_differential.suite_cases,
    test_corpus.SUITE: test_corpus.suite_cases,
    test_reference_on_branches.SUITE: test_reference_on_branches.suite_cases,
}
MODULES = {
    test_differential.SUITE: "tests/conformance/test_differential.py",
    test_corpus.SUITE: "tests/conformance/test_corpus.py",
    test_reference_on_branches.SUITE: "tests/conformance/test_reference_on_branches.py",
}

HOW = (
    "GFD_SIM_CONFIG=<machine>/machine.conf LD_LIBRARY_PATH=<machine>/lib unshare -m: "
    "mount --bind <machine>/sys/bus/pci/devices /sys/bus/pci/devices; "
    f"gpu-feature-discovery {' '.join(REFERENCE_FLAGS)} --output-file F "
    "--machine-type-file <machine>/sys/class/dmi/id/product_name <args> [--config-file C], "
    "with GOGC=off; <machine> is gfd's simulator (gfd.sim.prepare_machine) of the case's "
    "profile or facts (tests/conformance/reference.py)"
)
INPUTS = (
    "inputs_sha256 = sha256 of the canonical JSON of {machine: the bundled profile's file text "
    "or the facts serialised as JSON (gfd.facts.dump_facts), args: the flags above and the "
    "case's, config: the config file's text or null} (reference.case_inputs)"
)


def reported_version(binary: Path) -> str:
    """What ``binary --version`` prints (its first line)."""
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def gfd_commit() -> str:
    """The commit of the checkout whose cases and simulator made the machines."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or "unknown"


def record_suite(
    binary: Path, suite: str, workdir: Path, version: str, reports: str, jobs: int
) -> Record:
    """Run the reference on every case of ``suite``; the record of what it did."""
    runs, machines = SUITES[suite]()
    prepared = prepare_machines(runs, machines, workdir)
    tasks: list[tuple[str, Callable[[], Outcome]]] = []
    for run in runs:
        case_dir = workdir / "cases" / run.case_id
        case_dir.mkdir(parents=True)
        args = with_config(run, case_dir)
        task = functools.partial(
            run_reference, binary, prepared[run.machine_key], case_dir / "reference.out", args
        )
        tasks.append((run.case_id, task))
    outcomes = run_all(tasks, jobs)
    cases = {
        run.case_id: {
            "inputs_sha256": case_inputs_sha256(machines[run.machine_key], run),
            **outcome_to_record(outcomes[run.case_id][0]),
        }
        for run in runs
    }
    notes = {
        "upstream": UPSTREAM,
        "binary_reports": reports,
        "cases_of": MODULES[suite],
        "gfd_commit": gfd_commit(),
        "how": HOW,
        "inputs": INPUTS,
        "flapping": (
            "with two GPU models the reference picks one at random per run "
            "(internal/lm/nvml.go); such a case's record is one draw"
        ),
    }
    return Record(program=PROGRAM, version=version, recorded=today(), cases=cases, notes=notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-bin", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=RECORD_DIR, help="default: %(default)s")
    parser.add_argument(
        "--suite", action="append", choices=sorted(SUITES), help="default: every suite"
    )
    parser.add_argument("--version", default="v0.20.0", help="the release built")
    parser.add_argument("--commit", default="1b826acc", help="its commit")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    options = parser.parse_args(argv)
    problem = unshare_problem()
    if problem is not None:
        parser.error(problem)
    binary = options.reference_bin.resolve()
    reports = reported_version(binary)
    shown = re.search(r"v\d+\.\d+\.\d+\S*", reports)
    if shown is not None and shown.group(0) != options.version:
        parser.error(f"the binary reports {reports!r}, not {options.version}")
    version = f"{options.version} (commit {options.commit})"
    for suite in options.suite or list(SUITES):
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"gfd-record-{suite}-") as workdir:
            record = record_suite(binary, suite, Path(workdir), version, reports, options.jobs)
        path = options.out / f"{suite}.json"
        write_record(path, record)
        refused = sum(c["returncode"] != 0 for c in record.cases.values())
        print(
            f"{suite}: {len(record.cases)} cases ({refused} refused) in "
            f"{time.monotonic() - started:.0f} s -> {path}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
