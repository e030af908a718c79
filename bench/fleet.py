"""A fleet of gfd agents against one API server: the thundering herd and the steady state.

N agents (threads in this process, each with its own Kubernetes client, node name and
:class:`~gfd.agent.Agent` with the node sink) label N nodes of one API server emulator
(``tests/emulator``, its own process, real HTTP on loopback). All agents are released
at the same instant, as when a DaemonSet is created on a ready cluster, and run the
agent's loop pacing (:class:`gfd.agent.Pacer`: the sleep interval with jitter) for
``--intervals`` intervals. The facts are read once from the simulated DGX H100 and
shared, so the client side spends its CPU on what differs per agent: labelling,
diffing and HTTP.

Reported from the server's request log (timestamps taken by the server):

* requests per second at start-up (every agent's first cycle: one read, one write)
  and afterwards: the peak second against the average, the goal being at most 2x;
* reads and writes per cycle after start-up (goals: at most 1 and exactly 0);
* the server's view at the end: every node's labels exactly what gfd should publish,
  the other writers' labels untouched.

Results go to ``bench/results/fleet.json``.
Run: ``python bench/fleet.py [--agents 100 1000] [--interval 5] [--intervals 8] [--in-step]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # The emulator lives in the test tree, which is not an installed package.
    sys.path.insert(0, str(ROOT))

from gfd.agent import Agent, Derived, Pacer, compute_labels, derive_topology, next_delay  # noqa: E402
from gfd.base.logs import configure_logging  # noqa: E402
from gfd.facts import NodeFacts  # noqa: E402
from gfd.kube_api import RetryPolicy, connect_kubernetes  # noqa: E402
from gfd.labels import LabelOptions  # noqa: E402
from gfd.nvml.reader import read_facts  # noqa: E402
from gfd.sim import simulate  # noqa: E402
from gfd.sinks.node import NodeSink  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "fleet.json"
TOKEN = "gfd-fleet-token"
OTHER_WRITER_LABEL = "kubernetes.io/hostname"


def node_name(index: int) -> str:
    return f"gpu-node-{index:05d}"


# --------------------------------------------------------------------------- #
# The API server, in its own process so that its CPU is not the agents'


def serve(connection: Connection, nodes: int) -> None:
    """Run the emulator with ``nodes`` nodes until told to stop; send back its log."""
    from http.server import ThreadingHTTPServer

    from tests.emulator import GFD_RULES, ApiServerEmulator, Principal

    # socketserver's listen backlog is 5: a fleet's simultaneous connects would overflow
    # it and wait out TCP's 1 s and 3 s SYN retransmits, which spreads the herd by an
    # artefact no real API server has (they listen with the system's somaxconn).
    ThreadingHTTPServer.request_queue_size = 4096
    with ApiServerEmulator() as api:
        api.set_token(TOKEN, Principal("system:serviceaccount:gpu-operator:gfd", GFD_RULES))
        for index in range(nodes):
            api.add_node(node_name(index), labels={OTHER_WRITER_LABEL: node_name(index)})
        connection.send(api.port)
        connection.recv()
        log = [(r.timestamp, r.method, r.status, r.path) for r in api.requests]
        labels = {node_name(i): api.node_labels(node_name(i)) for i in range(nodes)}
        connection.send((log, labels))


# --------------------------------------------------------------------------- #
# The agents


class QuietLog:
    """The agents' logger: the bench counts outcomes itself."""

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: None


@dataclass
class AgentRecord:
    cycles: int = 0
    failures: int = 0
    first_cycle_done: float | None = None
    reasons: list[str] = field(default_factory=list)


class InStepPacer:
    """The loop's pacing before :class:`gfd.agent.Pacer` spread the first sleep: the
    interval with a 10 % jitter from the very first cycle (``--in-step``, for comparison)."""

    def __init__(self, sleep_interval: float, *, rng: random.Random) -> None:
        self.sleep_interval = sleep_interval
        self._rng = rng
        self._failures = 0

    def next_delay(self, ok: bool) -> float | None:
        self._failures = 0 if ok else self._failures + 1
        return next_delay(self.sleep_interval, self._failures, rng=self._rng)


def run_agent(
    agent: Agent,
    pacer: Pacer | InStepPacer,
    record: AgentRecord,
    release: threading.Event,
    stop: threading.Event,
) -> None:
    """The agent loop as ``gfd run`` drives it: cycle, then sleep what the pacer says."""
    release.wait()
    while not stop.is_set():
        outcome = agent.cycle()
        record.cycles += 1
        if record.first_cycle_done is None:
            record.first_cycle_done = time.time()
        if not outcome.ok:
            record.failures += 1
            if len(record.reasons) < 3:
                record.reasons.append(outcome.reason)
        stop.wait(pacer.next_delay(outcome.ok))


def shared_facts() -> tuple[NodeFacts, Derived]:
    with simulate("dgx-h100") as machine:
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    return facts, derive_topology(facts)


def fleet_run(
    agents: int, interval: float, intervals: float, seed: int, *, in_step: bool
) -> dict[str, Any]:
    facts, derived = shared_facts()
    options = LabelOptions(timestamp=int(time.time()))
    expected = dict(compute_labels(facts, options, derive=lambda _f: derived)[0].labels)

    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    server = context.Process(target=serve, args=(theirs, agents), daemon=True)
    server.start()
    port = ours.recv()
    records = [AgentRecord() for _ in range(agents)]
    release, stop = threading.Event(), threading.Event()
    with tempfile.TemporaryDirectory(prefix="gfd-fleet-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(_kubeconfig(port), encoding="utf-8")
        threads = []
        clients = []
        rng = random.Random(seed)
        for index in range(agents):
            client = connect_kubernetes(
                kubeconfig=str(kubeconfig),
                request_timeout=30.0,
                retry_policy=RetryPolicy(initial_delay=0.5, max_delay=interval, deadline=60.0),
            )
            clients.append(client)
            agent = Agent(
                read_facts=lambda: facts,
                sinks=[NodeSink(client=client, node_name=node_name(index), stop=stop)],
                options=options,
                log=QuietLog(),
                derive=lambda _f: derived,
            )
            pacing = InStepPacer if in_step else Pacer
            pacer = pacing(interval, rng=random.Random(rng.random()))
            thread = threading.Thread(
                target=run_agent,
                args=(agent, pacer, records[index], release, stop),
                daemon=True,
                name=f"agent-{index}",
            )
            thread.start()
            threads.append(thread)
        started = time.time()
        release.set()
        time.sleep(interval * intervals)
        stop.set()
        for thread in threads:
            thread.join(timeout=interval + 60)
        ended = time.time()
        for client in clients:
            client.close()
    ours.send("stop")
    log, labels = ours.recv()
    server.join(timeout=30)
    return analyse(
        pacing="in step (10 % jitter only)" if in_step else "gfd.agent.Pacer",
        agents=agents,
        interval=interval,
        started=started,
        ended=ended,
        records=records,
        log=log,
        labels=labels,
        expected=expected,
    )


def _kubeconfig(port: int) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fleet", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "gfd", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fleet", "context": {"cluster": "fleet", "user": "gfd"}}],
            "current-context": "fleet",
        }
    )


# --------------------------------------------------------------------------- #
# Analysis


def analyse(
    *,
    pacing: str,
    agents: int,
    interval: float,
    started: float,
    ended: float,
    records: list[AgentRecord],
    log: list[tuple[float, str, int, str]],
    labels: dict[str, dict[str, str]],
    expected: dict[str, str],
) -> dict[str, Any]:
    done = [r.first_cycle_done for r in records if r.first_cycle_done is not None]
    startup_end = max(done) if len(done) == agents else ended
    per_second = Counter(int(t - started) for t, *_ in log)
    seconds = int(ended - started)
    startup_seconds = int(startup_end - started) + 1
    startup_counts = [per_second.get(s, 0) for s in range(startup_seconds)]
    # Whole seconds after start-up, short of the last (partial, stopping) one.
    steady = [per_second.get(s, 0) for s in range(startup_seconds, seconds)]
    steady_requests = [entry for entry in log if startup_end <= entry[0] < started + seconds]
    steady_cycles = sum(r.cycles for r in records) - agents
    reads = sum(1 for _, method, *_ in steady_requests if method == "GET")
    writes = sum(1 for _, method, *_ in steady_requests if method != "GET")
    wrong = {
        name: node
        for name, node in labels.items()
        if node != {OTHER_WRITER_LABEL: name, **expected}
    }
    average = statistics.mean(steady) if steady else 0.0
    return {
        "pacing": pacing,
        "agents": agents,
        "interval_s": interval,
        "duration_s": round(ended - started, 2),
        "startup_s": round(startup_end - started, 2),
        "startup_requests_per_second": startup_counts,
        "startup_peak_rps": max(startup_counts, default=0),
        "steady_requests_per_second": steady,
        "steady_average_rps": round(average, 1),
        "steady_peak_rps": max(steady, default=0),
        "steady_peak_over_average": round(max(steady) / average, 2) if average else None,
        "ideal_rps": round(agents / interval, 1),
        "cycles": sum(r.cycles for r in records),
        "failed_cycles": sum(r.failures for r in records),
        "failure_reasons": sorted({reason for r in records for reason in r.reasons})[:5],
        "reads_per_cycle_after_startup": round(reads / steady_cycles, 3) if steady_cycles else None,
        "writes_after_startup": writes,
        "writes_per_cycle_after_startup": round(writes / steady_cycles, 4)
        if steady_cycles
        else None,
        "nodes_exactly_right": agents - len(wrong),
        "nodes_wrong_examples": sorted(wrong)[:3],
    }


def machine_description() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version()}


def print_table(report: dict[str, Any]) -> None:
    machine = report["machine"]
    print(f"machine: {machine['nproc']} x {machine['cpu']}, Python {machine['python']}")
    print(
        "| pacing | agents | interval | start-up (s, peak req/s) | steady req/s avg / peak (ratio) "
        "| reads / cycle | writes after start-up | failed cycles | nodes exactly right |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in report["runs"]:
        print(
            f"| {row['pacing']} | {row['agents']} | {row['interval_s']:g} s | {row['startup_s']} s, "
            f"{row['startup_peak_rps']} | {row['steady_average_rps']} / {row['steady_peak_rps']} "
            f"({row['steady_peak_over_average']}) | {row['reads_per_cycle_after_startup']} "
            f"| {row['writes_after_startup']} | {row['failed_cycles']} "
            f"| {row['nodes_exactly_right']}/{row['agents']} |"
        )
    for row in report["runs"]:
        print(f"{row['agents']} agents, requests per second after start-up: "
              f"{row['steady_requests_per_second']}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--interval", type=float, default=5.0, help="sleep interval, seconds")
    parser.add_argument("--intervals", type=float, default=8.0, help="run length, in intervals")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--in-step",
        action="store_true",
        help="pace the agents as before the first sleep was spread, for comparison",
    )
    args = parser.parse_args()
    # The agents' own log lines would be thousands of lines of noise here.
    configure_logging("critical")
    runs = [
        fleet_run(n, args.interval, args.intervals, args.seed, in_step=args.in_step)
        for n in args.agents
    ]
    report = {
        "machine": machine_description(),
        "command": " ".join(["python", "bench/fleet.py", *sys.argv[1:]]),
        "runs": runs,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
