"""Running NVIDIA's GPU Feature Discovery (the reference) and gfd side by side on one machine.

Both programs load the simulated ``libnvidia-ml.so.1`` of the machine's driver branch from
``LD_LIBRARY_PATH``, as on a real node. The reference reads each GPU's PCI directory from the
fixed path ``/sys/bus/pci/devices`` (it has no flag for it), so it runs in a private mount
namespace with the simulator's tree bind-mounted there (``unshare -m``, root only); gfd is
pointed at the same tree with ``--sysfs-root``. Each reference run has its own namespace, so
runs on different machines (or with different flags on one machine) can go in parallel.

This module owns the harness: preparing machines, running the two programs, and what one
run produced (:class:`Outcome`). What counts as an expected difference lives in
``tests/conformance/differences.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gfd.facts import NodeFacts
from gfd.sim import SimulatedMachine, prepare_machine
from tests.oracles import oracle_path, oracles_required
from tests.reliability.agent_process import parse_label_lines

#: One run of either program may take this long on a loaded machine.
RUN_TIMEOUT_S = 120


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


@dataclass(frozen=True)
class Outcome:
    """What one program did: its exit status, its labels (None without an output file)."""

    returncode: int
    labels: dict[str, str] | None
    stderr: str

    @property
    def labelled(self) -> bool:
        return self.returncode == 0 and self.labels is not None

    def describe(self) -> str:
        if self.labelled:
            return f"{len(self.labels or {})} labels"
        last = self.stderr.strip().splitlines()[-1:]
        return f"exit {self.returncode}: {last[0] if last else 'no output'}"


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


def _outcome(done: subprocess.CompletedProcess[str], output: Path) -> Outcome:
    labels = parse_label_lines(output.read_text(encoding="utf-8")) if output.exists() else None
    return Outcome(returncode=done.returncode, labels=labels, stderr=done.stderr[-3000:])


def run_reference(
    binary: Path, machine: Machine, output: Path, args: Sequence[str] = ()
) -> Outcome:
    """The reference, one-shot, on ``machine``; its labels go to ``output``."""
    output.unlink(missing_ok=True)
    command = [
        str(binary), "--oneshot", "--no-timestamp", "--use-node-feature-api=false",
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


@dataclass(frozen=True)
class Pair:
    """The two outcomes of one run."""

    reference: Outcome
    gfd: Outcome
    machine: Machine = field(compare=False)


def run_pairs(
    binary: Path,
    runs: Iterable[Run],
    machines: Mapping[str, Callable[[Path], Machine]],
    workdir: Path,
    *,
    jobs: int | None = None,
) -> dict[str, Pair]:
    """Run every ``Run`` through both programs, preparing each machine once, in parallel.

    ``machines`` maps a machine key to a function that prepares it in a directory.
    """
    runs = list(runs)
    prepared: dict[str, Machine] = {}
    for key in dict.fromkeys(r.machine_key for r in runs):
        prepared[key] = machines[key](workdir / key)
    tasks: list[tuple[str, Callable[[], Outcome]]] = []
    for run in runs:
        machine = prepared[run.machine_key]
        case_dir = workdir / "cases" / run.case_id
        case_dir.mkdir(parents=True)
        args = run.args
        if run.config is not None:
            config = case_dir / "config.yaml"
            config.write_text(run.config, encoding="utf-8")
            args = (*args, "--config-file", str(config))
        tasks.append(
            (run.case_id, _bind(run_reference, binary, machine, case_dir / "reference.out", args))
        )
        tasks.append((run.case_id, _bind(run_gfd, machine, case_dir / "gfd.out", args)))
    workers = jobs or (os.cpu_count() or 2) + 2
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(case_id, pool.submit(task)) for case_id, task in tasks]
        outcomes: dict[str, list[Outcome]] = {}
        for case_id, future in futures:
            outcomes.setdefault(case_id, []).append(future.result())
    return {
        run.case_id: Pair(*outcomes[run.case_id], machine=prepared[run.machine_key]) for run in runs
    }


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
