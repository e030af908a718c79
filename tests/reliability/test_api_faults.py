"""API faults: the node converges, nothing wrong is written, nothing foreign is deleted.

Each case seeds a node the way a real cluster has it (labels of other writers, a key
that node-feature-discovery owns, a stale key gfd published before), injects one kind
of API server misbehaviour (5xx, 429, a reply slower than the client's timeout, a
dropped connection, a racing writer's 409, 401, 403), and runs the real agent loop
against the emulator until the node is exactly right. Every write the server saw is
then checked: gfd only ever set its own keys to their right values and only ever
removed keys it owned. Two whole agent processes cover the same under the real CLI.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gfd.agent import Agent, CycleOutcome, compute_labels
from gfd.facts import NodeFacts
from gfd.kube_api import KubeClient, RetryPolicy, connect_kubernetes
from gfd.labels import LabelOptions
from gfd.nvml.reader import read_facts
from gfd.sim import simulate
from gfd.sinks.node import (
    NFD_OWNERSHIP_ANNOTATION,
    OWNED_ANNOTATIONS,
    OWNERSHIP_ANNOTATION,
    NodeSink,
)
from tests.emulator import GFD_RULES, ApiServerEmulator, Fault, Principal
from tests.kube.node_writes import write_effects
from tests.reliability.agent_process import AgentProcess
from tests.reliability.conftest import FOREIGN_LABELS, NODE, TOKEN
from tests.reliability.test_nvml_faults import RecordingLog

#: A key gfd publishes that NFD owns on this node: gfd must leave NFD's value alone.
NFD_KEY = "nvidia.com/gpu.machine"
NFD_VALUE = "set-by-nfd"
#: A key an earlier gfd published and owns, which this machine no longer has.
STALE_KEY = "nvidia.com/gpu.retired"
#: Enough cycles for any case to converge; each case states its own smaller bound.
MAX_CYCLES = 12


@functools.cache
def _facts() -> NodeFacts:
    with simulate("dgx-h100") as machine:
        return read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )


@functools.cache
def _gfd_labels() -> dict[str, str]:
    label_set, _ = compute_labels(_facts(), LabelOptions())
    return dict(label_set.labels)


def seed_node(emulator: ApiServerEmulator) -> None:
    """Give the cluster's node an NFD-owned key and a stale key gfd owns."""
    owned = sorted({*_gfd_labels(), STALE_KEY} - {NFD_KEY})
    emulator.change_node_metadata(
        NODE,
        labels={NFD_KEY: NFD_VALUE, STALE_KEY: "true"},
        annotations={
            NFD_OWNERSHIP_ANNOTATION: NFD_KEY,
            OWNERSHIP_ANNOTATION: ",".join(owned),
        },
    )


def converged_labels() -> dict[str, str]:
    return {**FOREIGN_LABELS, **_gfd_labels(), NFD_KEY: NFD_VALUE}


def node_is_right(emulator: ApiServerEmulator, extra: Mapping[str, str] | None = None) -> bool:
    """The node holds exactly the converged labels, plus ``extra`` set by other writers."""
    return emulator.node_labels(NODE) == {**converged_labels(), **(extra or {})}


def assert_only_gfd_writes(emulator: ApiServerEmulator) -> None:
    """Every write that reached the server set gfd's own keys right or removed its own
    (merge patches and guarded JSON Patches alike, :mod:`tests.kube.node_writes`)."""
    gfd = {k: v for k, v in _gfd_labels().items() if k != NFD_KEY}
    for request in emulator.requests:
        if not request.is_write or request.body is None:
            continue
        assert request.method == "PATCH", request
        effects = write_effects(request.body, request.content_type)
        for key in effects.removed["labels"]:
            assert key == STALE_KEY, f"gfd removed {key}, which it does not own"
        for key, value in effects.set["labels"].items():
            assert gfd.get(key) == value, f"gfd wrote {key}={value!r}"
        for key in {*effects.set["annotations"], *effects.removed["annotations"]}:
            assert key in OWNED_ANNOTATIONS | {OWNERSHIP_ANNOTATION}, f"gfd wrote annotation {key}"


def make_agent(client: KubeClient, stop: threading.Event) -> tuple[Agent, RecordingLog]:
    log = RecordingLog()
    agent = Agent(
        read_facts=_facts,
        sinks=[NodeSink(client=client, node_name=NODE, stop=stop)],
        options=LabelOptions(),
        log=log,
    )
    return agent, log


def run_until_converged(
    agent: Agent,
    emulator: ApiServerEmulator,
    *,
    max_cycles: int = MAX_CYCLES,
    extra: Mapping[str, str] | None = None,
) -> list[CycleOutcome]:
    outcomes = []
    for _ in range(max_cycles):
        outcomes.append(agent.cycle())
        if outcomes[-1].ok and node_is_right(emulator, extra):
            return outcomes
    raise AssertionError(f"no convergence in {max_cycles} cycles: {[o.reason for o in outcomes]}")


def assert_steady(agent: Agent, emulator: ApiServerEmulator) -> None:
    """Once right, a cycle is one cached read and no write."""
    emulator.clear_log()
    outcome = agent.cycle()
    assert outcome.ok and outcome.wrote == ()
    assert [(r.method, r.query.get("resourceVersion")) for r in emulator.requests] == [("GET", "0")]


@pytest.fixture
def seeded(emulator: ApiServerEmulator, cluster: dict[str, Any]) -> ApiServerEmulator:
    seed_node(emulator)
    return emulator


@pytest.fixture
def stop() -> threading.Event:
    return threading.Event()


# --------------------------------------------------------------------------- #
# Transient faults: retried inside one cycle

TRANSIENT = {
    "500-then-503": [Fault(status=500, times=2), Fault(status=503, times=2)],
    "502-on-patch": [Fault(status=502, method="PATCH", times=3)],
    "429-retry-after": [Fault(status=429, retry_after="1", times=1)],
    "429-http-date": [Fault(status=429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT", times=2)],
    "slow-get": [Fault(delay=0.8, method="GET", times=1)],
    "slow-patch-applied-late": [Fault(delay=0.8, method="PATCH", times=1)],
    "dropped-get": [Fault(drop=True, method="GET", times=2)],
    "dropped-patch-applied": [Fault(drop=True, method="PATCH", times=1)],
    "mixed-storm": [
        Fault(status=503, times=1),
        Fault(drop=True, times=1),
        Fault(status=429, retry_after="0", times=1),
        Fault(delay=0.8, times=1),
        Fault(status=500, times=1),
    ],
}


@pytest.mark.parametrize("faults", list(TRANSIENT.values()), ids=list(TRANSIENT))
def test_transient_faults_converge_in_one_cycle(
    seeded: ApiServerEmulator, client: KubeClient, stop: threading.Event, faults: list[Fault]
) -> None:
    seeded.inject(*faults)
    agent, _ = make_agent(client, stop)
    run_until_converged(agent, seeded, max_cycles=1)
    assert sum(f.fired for f in faults) == sum(f.times or 0 for f in faults)
    assert_only_gfd_writes(seeded)
    assert STALE_KEY not in seeded.node_labels(NODE)
    assert_steady(agent, seeded)


def test_an_outage_longer_than_the_deadline_fails_the_cycle_then_converges(
    seeded: ApiServerEmulator, kubeconfig: Path, stop: threading.Event
) -> None:
    policy = RetryPolicy(initial_delay=0.01, max_delay=0.05, deadline=0.3, max_retry_after=1.0)
    client = connect_kubernetes(
        kubeconfig=str(kubeconfig), request_timeout=0.5, retry_policy=policy
    )
    try:
        seeded.inject(Fault(status=503, times=None))
        agent, log = make_agent(client, stop)
        before = seeded.node(NODE)
        failed = [agent.cycle() for _ in range(2)]
        assert [o.kind for o in failed] == ["sink", "sink"]
        assert "HTTP 503" in failed[0].reason and "gave up after" in failed[0].reason
        assert seeded.node(NODE) == before
        assert [e for _, e, _ in log.events].count("cycle failed") == 2
        seeded.clear_faults()
        run_until_converged(agent, seeded, max_cycles=1)
        assert_only_gfd_writes(seeded)
    finally:
        client.close()


# --------------------------------------------------------------------------- #
# Conflicts


def _another_writer(api: ApiServerEmulator) -> None:
    labels = api.node_labels(NODE)
    count = int(labels.get("example.com/touched", "0"))
    api.change_node_metadata(NODE, labels={"example.com/touched": str(count + 1)})


def test_a_racing_writer_gets_a_409_and_keeps_its_label(
    seeded: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    seeded.before(_another_writer, method="PATCH", times=2)
    agent, _ = make_agent(client, stop)
    outcome = agent.cycle()
    assert outcome.ok
    statuses = [r.status for r in seeded.requests if r.method == "PATCH"]
    # The merge patch with the read resourceVersion loses the race; the retry is guarded
    # by gfd's own keys only, so the second unrelated write cannot make it fail.
    assert statuses == [409, 200]
    assert seeded.node_labels(NODE) == {**converged_labels(), "example.com/touched": "2"}
    assert_only_gfd_writes(seeded)


def test_a_writer_that_never_stops_cannot_fail_the_cycle(
    seeded: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    """Issue 25: a node that another writer changes before every write of gfd's (kubelet
    status, a controller's label) used to fail the cycle after five 409s."""
    seeded.before(_another_writer, method="PATCH", times=None)
    agent, _ = make_agent(client, stop)
    outcome = agent.cycle()
    assert outcome.ok, outcome.reason
    statuses = [r.status for r in seeded.requests if r.method == "PATCH"]
    assert statuses == [409, 200]
    touched = {"example.com/touched": seeded.node_labels(NODE)["example.com/touched"]}
    assert node_is_right(seeded, touched)
    assert_only_gfd_writes(seeded)
    assert_steady(agent, seeded)


def _fight_over_the_stale_key(api: ApiServerEmulator) -> None:
    """Someone else rewrites the value of a key gfd owns and is about to remove."""
    value = api.node_labels(NODE).get(STALE_KEY, "")
    count = int(value.removeprefix("fought-")) if value.startswith("fought-") else 0
    api.change_node_metadata(NODE, labels={STALE_KEY: f"fought-{count + 1}"})


def test_a_writer_that_keeps_changing_gfds_key_fails_the_cycle_without_a_wrong_write(
    seeded: ApiServerEmulator, kubeconfig: Path, stop: threading.Event
) -> None:
    """What gfd's removal depends on changes before every write: gfd never deletes the
    value it did not read, retries with backoff until the publish's deadline, and then
    fails the cycle; once the fight stops, the next cycle converges."""
    short = RetryPolicy(initial_delay=0.01, max_delay=0.05, deadline=1.0, max_retry_after=1.0)
    client = connect_kubernetes(kubeconfig=str(kubeconfig), request_timeout=0.5, retry_policy=short)
    fighting = threading.Event()
    fighting.set()
    seeded.before(
        lambda api: _fight_over_the_stale_key(api) if fighting.is_set() else None,
        method="PATCH",
        times=None,
    )
    try:
        agent, _ = make_agent(client, stop)
        outcome = agent.cycle()
        assert not outcome.ok and outcome.kind == "sink"
        assert "still conflicting" in outcome.reason and STALE_KEY in outcome.reason
        labels = seeded.node_labels(NODE)
        assert labels[STALE_KEY].startswith("fought-"), "a stale read must never delete"
        statuses = [r.status for r in seeded.requests if r.method == "PATCH"]
        assert statuses[0] == 409 and set(statuses[1:]) == {422}, statuses
        assert_only_gfd_writes(seeded)
        fighting.clear()
        run_until_converged(agent, seeded, max_cycles=1)
        assert_only_gfd_writes(seeded)
    finally:
        client.close()


def test_a_stale_cache_read_cannot_delete_a_fresh_label(
    seeded: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    seeded.freeze_cache()
    seeded.change_node_metadata(NODE, labels={"example.com/late": "yes"})
    agent, _ = make_agent(client, stop)
    run_until_converged(agent, seeded, max_cycles=1, extra={"example.com/late": "yes"})
    assert_only_gfd_writes(seeded)


# --------------------------------------------------------------------------- #
# Credentials and permissions


def test_a_rotated_token_is_picked_up_after_one_401(
    seeded: ApiServerEmulator, client: KubeClient, kubeconfig: Path, stop: threading.Event
) -> None:
    principal = Principal("system:serviceaccount:gpu-operator:gfd", frozenset(GFD_RULES))
    seeded.set_token("rotated-token", principal)
    seeded.revoke_token(TOKEN)
    seeded.write_kubeconfig(kubeconfig, "rotated-token")
    agent, _ = make_agent(client, stop)
    run_until_converged(agent, seeded, max_cycles=1)
    assert [r.status for r in seeded.requests][:2] == [401, 200]
    assert_only_gfd_writes(seeded)


def test_a_revoked_token_fails_permanently_then_converges_on_a_new_one(
    seeded: ApiServerEmulator, client: KubeClient, kubeconfig: Path, stop: threading.Event
) -> None:
    seeded.revoke_token(TOKEN)
    before = seeded.node(NODE)
    agent, _ = make_agent(client, stop)
    outcome = agent.cycle()
    assert not outcome.ok and outcome.kind == "sink-permanent"
    assert "HTTP 401" in outcome.reason and str(kubeconfig) in outcome.reason
    assert seeded.node(NODE) == before
    seeded.set_token("new-token", Principal("gfd", frozenset(GFD_RULES)))
    seeded.write_kubeconfig(kubeconfig, "new-token")
    run_until_converged(agent, seeded, max_cycles=1)
    assert_only_gfd_writes(seeded)


@pytest.mark.parametrize("missing", ["patch", "get"])
def test_forbidden_writes_nothing_then_converges_once_granted(
    seeded: ApiServerEmulator, client: KubeClient, stop: threading.Event, missing: str
) -> None:
    rules = frozenset(rule for rule in GFD_RULES if rule != (missing, "nodes"))
    seeded.set_token(TOKEN, Principal("gfd", rules))
    before = seeded.node(NODE)
    agent, _ = make_agent(client, stop)
    failed = [agent.cycle() for _ in range(2)]
    assert [o.kind for o in failed] == ["sink-permanent"] * 2
    assert "HTTP 403" in failed[0].reason and "RBAC" in failed[0].reason
    assert seeded.node(NODE) == before
    seeded.set_token(TOKEN, Principal("gfd", frozenset(GFD_RULES)))
    run_until_converged(agent, seeded, max_cycles=1)
    assert_only_gfd_writes(seeded)


# --------------------------------------------------------------------------- #
# Whole agents


def _node_agent(kubeconfig: Path) -> AgentProcess:
    return AgentProcess(
        "--simulate", "dgx-h100", "--sleep-interval", "1s", "--no-timestamp", "--no-output-file",
        "--patch-node", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
    )  # fmt: skip


@pytest.mark.slow
def test_agent_process_rides_out_a_fault_storm_and_settles_to_reads_only(
    seeded: ApiServerEmulator, kubeconfig: Path
) -> None:
    seeded.inject(
        Fault(status=503, times=1),
        Fault(drop=True, method="PATCH", times=1),
        Fault(status=429, retry_after="1", times=1),
    )
    with _node_agent(kubeconfig) as agent:
        agent.wait_for(lambda: node_is_right(seeded), "the node to converge")
        agent.wait_for(
            lambda: agent.metric("gfd_cycles_total", result="success") >= 1, "a good cycle"
        )
        seeded.clear_log()
        agent.wait_for(
            lambda: seeded.count(method="GET") >= 2, "two steady-state cycles", timeout=10
        )
        assert seeded.count(writes=True) == 0
        assert agent.stop() == 0
    assert node_is_right(seeded)
    assert_only_gfd_writes(seeded)


@pytest.mark.slow
def test_agent_process_forbidden_keeps_running_and_converges_once_granted(
    seeded: ApiServerEmulator, kubeconfig: Path
) -> None:
    before = seeded.node(NODE)
    seeded.set_token(TOKEN, Principal("gfd", frozenset(GFD_RULES - {("patch", "nodes")})))
    with _node_agent(kubeconfig) as agent:
        failed = agent.wait_for_event("cycle failed", count=2, kind="sink-permanent")
        assert "403" in failed[0]["reason"]
        assert seeded.node(NODE) == before
        assert agent.metric("gfd_cycle_errors_total", kind="sink-permanent") >= 2
        seeded.set_token(TOKEN, Principal("gfd", frozenset(GFD_RULES)))
        agent.wait_for(lambda: node_is_right(seeded), "the node to converge")
        assert agent.stop() == 0
    assert_only_gfd_writes(seeded)
