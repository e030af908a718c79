"""Running NVIDIA's GPU Feature Discovery (the reference) and gfd side by side on one machine.

Both programs load the simulated ``libnvidia-ml.so.1`` of the machine's driver branch from
``LD_LIBRARY_PATH``, as on a real node. The reference reads each GPU's PCI directory from the
fixed path ``/sys/bus/pci/devices`` (it has no flag for it), so it runs in a private mount
namespace with the simulator's tree bind-mounted there (``unshare -m``, root only); gfd is
pointed at the same tree with ``--sysfs-root``. Each reference run has its own namespace, so
runs on different machines (or with different flags on one machine) can go in parallel.

The reference's side of a case comes from one of two sources (:class:`ReferenceSource`):
the binary itself when ``GFD_REFERENCE_BIN`` points at a build (live), or else the record of
what it showed, ``tests/records/reference-gfd/<suite>.json`` (replayed; no registry ships the
reference, so this is what CI has). A replayed case is used only while the sha256 of its inputs
(:func:`case_inputs`) is the recorded one; ``python -m tests.conformance.record_reference``
re-records. gfd always runs live.

This module owns the harness: preparing machines, running the two programs, where the
reference's outcome comes from, and what one run produced (:class:`Outcome`). What counts as
an expected difference lives in ``tests/conformance/differences.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gfd.facts import NodeFacts, dump_facts
from gfd.sim import SimulatedMachine, prepare_machine, profile_path
from tests.oracles import ORACLES, oracle_path, oracles_required
from tests.records.store import RECORDS_DIR, RecordError, inputs_sha256, recorded_case
from tests.reliability.agent_process import parse_label_lines

#: One run of either program may take this long on a loaded machine.
RUN_TIMEOUT_S = 120
#: The reference's records, one file per suite (``differential``, ``corpus``, ``branches``).
RECORD_DIR = RECORDS_DIR / "reference-gfd"
#: Flags of every reference run besides the case's own (and the paths of its files).
REFERENCE_FLAGS = ("--oneshot", "--no-timestamp", "--use-node-feature-api=false")
#: How to re-record a suite; the refusal of a stale or missing case names it.
RERECORD = (
    "sudo .venv/bin/python -m tests.conformance.record_reference "
    "--reference-bin PATH/TO/gpu-feature-discovery --suite {suite}"
)


def unshare_problem() -> str | None:
    """Why a private mount namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root: the reference's fixed /sys/bus/pci/devices needs a bind mount"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return None


def reference_binary() -> Path:
    """The reference binary; skips (fails in CI) when it is missing or cannot see a machine."""
    binary = oracle_path("reference-gfd")
    reason = unshare_problem()
    if reason is not None:
        message = f"the reference cannot run on a simulated machine: {reason}"
        if oracles_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return binary


#: klog's header ("E1204 04:12:50.022091   10864 main.go:209] "): it changes on every run.
_KLOG_HEADER = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]*\] ")


@dataclass(frozen=True)
class Outcome:
    """What one program did: its exit status, its labels (None without an output file)."""

    returncode: int
    labels: dict[str, str] | None
    stderr: str

    @property
    def labelled(self) -> bool:
        return self.returncode == 0 and self.labels is not None

    def error_line(self) -> str:
        """The last line of stderr, without klog's header (time and PID)."""
        last = self.stderr.strip().splitlines()[-1:]
        return _KLOG_HEADER.sub("", last[0]) if last else ""

    def describe(self) -> str:
        if self.labelled:
            return f"{len(self.labels or {})} labels"
        return f"exit {self.returncode}: {self.error_line() or 'no output'}"


@dataclass(frozen=True)
class Machine:
    """A prepared simulated machine: its directory and the environment that selects it."""

    directory: Path
    env: dict[str, str]

    @property
    def devices(self) -> Path:
        return self.directory / "sys" / "bus" / "pci" / "devices"

    @property
    def machine_type_file(self) -> Path:
        return self.directory / "sys" / "class" / "dmi" / "id" / "product_name"


def machine_for(profile: str | NodeFacts, directory: Path) -> Machine:
    """Prepare ``profile`` (a bundled name or facts) in ``directory`` for both programs."""
    simulated: SimulatedMachine = prepare_machine(profile, directory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    env.update(simulated.environment())
    return Machine(directory=directory, env=env)


@dataclass(frozen=True)
class MachineSpec:
    """A machine to prepare, and the text that determines it (part of each case's inputs)."""

    key: str
    #: A bundled profile's file, or the facts serialised (``dump_facts``, JSON).
    description: str
    source: str | NodeFacts

    def prepare(self, directory: Path) -> Machine:
        return machine_for(self.source, directory)


def profile_machine(profile: str) -> MachineSpec:
    """A bundled profile; its file (faults included) is what determines the machine."""
    text = profile_path(profile).read_text(encoding="utf-8")
    return MachineSpec(key=profile, description=text, source=profile)


def facts_machine(key: str, facts: NodeFacts) -> MachineSpec:
    """A machine built in code; its serialised facts determine it."""
    return MachineSpec(key=key, description=dump_facts(facts, "json"), source=facts)


def _outcome(done: subprocess.CompletedProcess[str], output: Path) -> Outcome:
    labels = parse_label_lines(output.read_text(encoding="utf-8")) if output.exists() else None
    return Outcome(returncode=done.returncode, labels=labels, stderr=done.stderr[-3000:])


def run_reference(
    binary: Path, machine: Machine, output: Path, args: Sequence[str] = ()
) -> Outcome:
    """The reference, one-shot, on ``machine``; its labels go to ``output``."""
    output.unlink(missing_ok=True)
    command = [
        str(binary), *REFERENCE_FLAGS,
        "--output-file", str(output), "--machine-type-file", str(machine.machine_type_file),
        *args,
    ]  # fmt: skip
    # The bind mount exists only in this run's private namespace.
    script = 'mount --bind "$0" /sys/bus/pci/devices && exec "$@"'
    # A one-shot run is short: without Go's garbage collector it takes a third less CPU
    # (the suite runs hundreds), and nothing it labels depends on the collector.
    env = {**machine.env, "GOGC": "off"}
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(machine.devices), *command],
        env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    return _outcome(done, output)


def run_gfd(machine: Machine, output: Path, args: Sequence[str] = ()) -> Outcome:
    """gfd, one-shot, on ``machine``, reading the same tree through ``--sysfs-root``."""
    output.unlink(missing_ok=True)
    done = subprocess.run(
        [
            sys.executable, "-m", "gfd", "--oneshot", "--no-timestamp", "--log-level", "error",
            "--output-file", str(output),
            "--sysfs-root", str(machine.directory / "sys"),
            "--machine-type-file", str(machine.machine_type_file),
            *args,
        ],
        env=machine.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    return _outcome(done, output)


@dataclass(frozen=True)
class Run:
    """One case to run through both programs: a machine, flags, an optional config file."""

    case_id: str
    machine_key: str
    args: tuple[str, ...] = ()
    #: The config file's text (both programs read it with ``--config-file``).
    config: str | None = None


def case_inputs(spec: MachineSpec, run: Run) -> dict[str, Any]:
    """Everything that determines the reference's outcome of ``run`` (paths aside)."""
    return {
        "machine": spec.description,
        "args": [*REFERENCE_FLAGS, *run.args],
        "config": run.config,
    }


def case_inputs_sha256(spec: MachineSpec, run: Run) -> str:
    return inputs_sha256(case_inputs(spec, run))


def outcome_to_record(outcome: Outcome) -> dict[str, Any]:
    """What a record keeps of one reference run: exit status, labels or the error line."""
    entry: dict[str, Any] = {"returncode": outcome.returncode, "labels": outcome.labels}
    if not outcome.labelled:
        entry["error"] = outcome.error_line()
    return entry


def outcome_from_record(entry: Mapping[str, Any]) -> Outcome:
    labels = entry.get("labels")
    return Outcome(
        returncode=int(entry["returncode"]),
        labels=dict(labels) if labels is not None else None,
        stderr=str(entry.get("error", "")),
    )


@dataclass(frozen=True)
class ReferenceSource:
    """Where one suite gets the reference's outcomes: the binary, or the suite's record."""

    suite: str
    #: The reference binary (live), or None: replay ``tests/records/reference-gfd/<suite>.json``.
    binary: Path | None

    @property
    def record(self) -> Path:
        return RECORD_DIR / f"{self.suite}.json"

    @property
    def live(self) -> bool:
        return self.binary is not None

    def describe(self) -> str:
        if self.binary is not None:
            return f"live {self.binary}"
        return f"replayed {self.record.relative_to(RECORDS_DIR.parents[1])}"

    def outcome(
        self, spec: MachineSpec, run: Run, machine: Machine, output: Path, args: Sequence[str]
    ) -> Outcome:
        """The reference's outcome of ``run``; RecordError if the record cannot answer."""
        if self.binary is not None:
            return run_reference(self.binary, machine, output, args)
        entry = recorded_case(
            self.record, run.case_id, case_inputs_sha256(spec, run),
            RERECORD.format(suite=self.suite),
        )  # fmt: skip
        return outcome_from_record(entry)


def reference_source(suite: str) -> ReferenceSource:
    """Live when ``GFD_REFERENCE_BIN`` is set (it must then be usable), else the record."""
    if os.environ.get(ORACLES["reference-gfd"].env):
        return ReferenceSource(suite, reference_binary())
    return ReferenceSource(suite, None)


@dataclass(frozen=True)
class Pair:
    """The two outcomes of one case; the reference's is None where its record cannot answer."""

    reference: Outcome | None
    gfd: Outcome
    #: Why the record cannot answer (not recorded, or the inputs changed).
    problem: str | None = None

    def reference_outcome(self) -> Outcome:
        """The reference's outcome; fails the test when the record cannot give it."""
        if self.reference is None:
            pytest.fail(self.problem or "no reference outcome", pytrace=False)
        return self.reference


def reference_case(
    source: ReferenceSource, spec: MachineSpec, run: Run, machine: Machine, output: Path
) -> Outcome:
    """One case's reference outcome for a test: the record's refusal fails the test."""
    args = with_config(run, output.parent)
    try:
        return source.outcome(spec, run, machine, output, args)
    except RecordError as error:
        pytest.fail(str(error), pytrace=False)


def with_config(run: Run, case_dir: Path) -> tuple[str, ...]:
    """The run's flags, with its config file (written into ``case_dir``) when it has one."""
    if run.config is None:
        return run.args
    config = case_dir / "config.yaml"
    config.write_text(run.config, encoding="utf-8")
    return (*run.args, "--config-file", str(config))


def prepare_machines(
    runs: Iterable[Run], machines: Mapping[str, MachineSpec], workdir: Path
) -> dict[str, Machine]:
    """Each machine the runs need, prepared once."""
    keys = dict.fromkeys(r.machine_key for r in runs)
    return {key: machines[key].prepare(workdir / key) for key in keys}


def run_all(
    tasks: Sequence[tuple[str, Callable[[], Outcome]]], jobs: int | None = None
) -> dict[str, list[Outcome]]:
    """Run ``(case_id, task)`` pairs in parallel; each case's outcomes in task order."""
    workers = jobs or (os.cpu_count() or 2) + 2
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(case_id, pool.submit(task)) for case_id, task in tasks]
        outcomes: dict[str, list[Outcome]] = {}
        for case_id, future in futures:
            outcomes.setdefault(case_id, []).append(future.result())
    return outcomes


def run_pairs(
    source: ReferenceSource,
    runs: Iterable[Run],
    machines: Mapping[str, MachineSpec],
    workdir: Path,
    *,
    jobs: int | None = None,
) -> dict[str, Pair]:
    """Every ``Run`` through gfd, and through the reference or its record, in parallel.

    ``machines`` maps a machine key to its spec; each machine is prepared once.
    """
    runs = list(runs)
    prepared = prepare_machines(runs, machines, workdir)
    tasks: list[tuple[str, Callable[[], Outcome]]] = []
    replayed: dict[str, Outcome | str] = {}
    for run in runs:
        machine = prepared[run.machine_key]
        case_dir = workdir / "cases" / run.case_id
        case_dir.mkdir(parents=True)
        args = with_config(run, case_dir)
        spec = machines[run.machine_key]
        reference_out = case_dir / "reference.out"
        if source.live:
            tasks.append(
                (run.case_id, _bind(source.outcome, spec, run, machine, reference_out, args))
            )
        else:
            try:
                replayed[run.case_id] = source.outcome(spec, run, machine, reference_out, args)
            except RecordError as error:
                replayed[run.case_id] = str(error)
        tasks.append((run.case_id, _bind(run_gfd, machine, case_dir / "gfd.out", args)))
    outcomes = run_all(tasks, jobs)
    pairs: dict[str, Pair] = {}
    for run in runs:
        if source.live:
            reference, ours = outcomes[run.case_id]
            pairs[run.case_id] = Pair(reference, ours)
        else:
            (ours,) = outcomes[run.case_id]
            answer = replayed[run.case_id]
            if isinstance(answer, str):
                pairs[run.case_id] = Pair(None, ours, problem=answer)
            else:
                pairs[run.case_id] = Pair(answer, ours)
    return pairs


def _bind(function: Callable[..., Outcome], *args: object) -> Callable[[], Outcome]:
    return lambda: function(*args)


#: Resources every sharing config shares: full GPUs, and one MIG profile of each bundled
#: MIG machine (A100 40GB, and H200 with media extensions), so ``mixed`` shares some
#: profiles and not others.
SHARED_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.18gb.me")


def sharing_config(strategy: str, replicas: int, *, rename_by_default: bool = False) -> str:
    """A config file (``version: v1``) sharing :data:`SHARED_RESOURCES` with ``strategy``."""
    resources = "".join(
        f"    - name: {name}\n      replicas: {replicas}\n" for name in SHARED_RESOURCES
    )
    return (
        "version: v1\n"
        "sharing:\n"
        f"  {strategy}:\n"
        f"    renameByDefault: {'true' if rename_by_default else 'false'}\n"
        "    resources:\n"
        f"{resources}"
    )
