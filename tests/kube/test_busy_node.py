"""A Node with many writers (issue 25): whole gfd processes beside other API clients.

Other clients write the same Node over HTTP, as they would in a cluster: the kubelet's
status heartbeat (every 10 s there, every 0.1 s here), a controller patching its own label
50 times a second, another patching one as fast as it can, and NFD's master, which owns
some ``nvidia.com/`` keys (listed in ``nfd.node.kubernetes.io/feature-labels``). gfd's
one-shot runs and its agent must each succeed, write only their own keys, and in steady
state write nothing. The emulator applies the preconditions as kube-apiserver does (a
stale ``resourceVersion`` in a body: 409; a failed JSON Patch ``test``: 422; recorded in
``tests/records/kube-apiserver/answers.json``).

Every loop is bounded by a count or a generous timeout; nothing here measures time.
Run with ``-s`` to see the requests each case made.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gfd.health.resource_slices import RESOURCE_SLICES_PATH
from gfd.sinks.node import NFD_OWNERSHIP_ANNOTATION, OWNERSHIP_ANNOTATION
from tests.emulator import ApiServerEmulator, Principal, RecordedRequest, seed_gfd_cluster
from tests.kube.conftest import NAMESPACE, NODE, POD, TOKEN
from tests.kube.node_writes import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, write_effects
from tests.reliability.agent_process import AgentProcess, expected_labels, run_gfd

pytestmark = pytest.mark.slow

GFD_USER = f"system:serviceaccount:{NAMESPACE}:gfd"
FIRST, SECOND = "dgx-h100", "t4-single"
NODE_PATH = f"/api/v1/nodes/{NODE}"
#: How long any one wait here may take before the case fails (a loaded 2-core runner).
WAIT = 30.0


class HttpWriter(threading.Thread):
    """Another API client: PATCHes the node over its own keep-alive connection, ``n`` =
    1, 2, ..., every ``interval`` seconds (0: as fast as it can), until stopped."""

    def __init__(
        self,
        emulator: ApiServerEmulator,
        token: str,
        body: Callable[[int], Any],
        *,
        content_type: str = MERGE_PATCH,
        path: str = NODE_PATH,
        interval: float = 0.0,
    ) -> None:
        super().__init__(daemon=True, name=f"writer-{token}")
        self._url = urlsplit(emulator.url)
        self._token = token
        self._body = body
        self._content_type = content_type
        self._path = path
        self._interval = interval
        self._halt = threading.Event()
        #: ``n`` of the last write the server accepted, and how many it accepted.
        self.last = 0
        self.accepted = 0
        self.refused: Counter[int] = Counter()

    def run(self) -> None:
        connection = http.client.HTTPConnection(self._url.hostname, self._url.port, timeout=WAIT)
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": self._content_type,
            "Accept": "application/json",
        }
        n = 0
        try:
            while not self._halt.is_set():
                n += 1
                connection.request("PATCH", self._path, json.dumps(self._body(n)), headers)
                response = connection.getresponse()
                response.read()
                if response.status == 200:
                    self.last, self.accepted = n, self.accepted + 1
                else:
                    self.refused[response.status] += 1
                if self._interval:
                    self._halt.wait(self._interval)
        finally:
            connection.close()

    def finish(self) -> None:
        self._halt.set()
        self.join(timeout=WAIT)
        assert not self.is_alive(), f"{self.name} did not stop"


def gfd_requests(emulator: ApiServerEmulator, since: int = 0) -> list[RecordedRequest]:
    return [r for r in emulator.requests[since:] if r.user == GFD_USER]


def oneshot(kubeconfig: Path, profile: str) -> None:
    done = run_gfd(
        [
            "--simulate", profile, "--patch-node", "--no-output-file", "--no-timestamp",
            "--node-name", NODE, "--kubeconfig", str(kubeconfig), "--oneshot",
        ],
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"one-shot {profile} exited {done.returncode}:\n{done.stderr[-3000:]}"
    )


def assert_gfd_wrote_only_its_keys(
    requests: list[RecordedRequest], machines: list[dict[str, str]], nfd_keys: set[str]
) -> None:
    """Every write gfd made set a key of one of ``machines`` to that machine's value,
    removed only such keys, never touched NFD's, and wrote only its own annotations."""
    values = {(k, v) for labels in machines for k, v in labels.items()}
    producible = {k for labels in machines for k in labels}
    for request in requests:
        if request.method == "GET":
            continue
        assert request.method == "PATCH" and request.path == NODE_PATH, request
        effects = write_effects(request.body, request.content_type)
        for key, value in effects.set["labels"].items():
            assert (key, value) in values and key not in nfd_keys, f"gfd wrote {key}={value}"
        for key in effects.removed["labels"]:
            assert key in producible and key not in nfd_keys, f"gfd removed {key}"
        for key in {*effects.set["annotations"], *effects.removed["annotations"]}:
            assert key.startswith("nvidia.com/"), f"gfd wrote the annotation {key}"


def describe(requests: list[RecordedRequest]) -> str:
    shown = Counter(
        (r.method, r.status, {MERGE_PATCH: "merge", JSON_PATCH: "json"}.get(r.content_type or ""))
        for r in requests
    )
    return ", ".join(
        f"{m} {s}{f' {t}' if t else ''}: {n}" for (m, s, t), n in sorted(shown.items())
    )


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


@pytest.fixture
def labels_of() -> Iterator[Callable[[str], dict[str, str]]]:
    cache: dict[str, dict[str, str]] = {}

    def labels(profile: str) -> dict[str, str]:
        if profile not in cache:
            cache[profile] = expected_labels(profile)
        return cache[profile]

    yield labels


def test_eight_oneshot_runs_alternating_two_machines_beside_a_writer_as_fast_as_it_can(
    emulator: ApiServerEmulator,
    cluster: object,
    kubeconfig: Path,
    labels_of: Callable[[str], dict[str, str]],
) -> None:
    """Issue 25's case: before, the first run failed after six conflicts."""
    first, second = labels_of(FIRST), labels_of(SECOND)
    assert set(second) < set(first), "each run of the second machine must remove labels"
    emulator.set_token("busy", Principal("system:serviceaccount:default:busy-controller"))
    writer = HttpWriter(
        emulator, "busy", lambda n: {"metadata": {"labels": {"example.com/busy": str(n)}}}
    )
    # The writer runs as fast as it can; to make the race certain rather than likely,
    # each PATCH of gfd's also waits until the writer has written since gfd's read (two
    # versions on, in case one landed between this hook and the read it precedes).
    read_at = {"revision": 0}
    emulator.before(
        lambda api: read_at.update(revision=api.revision), method="GET", user=GFD_USER, times=None
    )
    emulator.before(
        lambda api: wait_until(
            lambda: api.revision >= read_at["revision"] + 2, "the writer to write"
        ),
        method="PATCH",
        user=GFD_USER,
        times=None,
    )
    writer.start()
    runs: list[tuple[str, list[RecordedRequest]]] = []
    try:
        for run in range(8):
            profile = FIRST if run % 2 == 0 else SECOND
            mark = len(emulator.requests)
            oneshot(kubeconfig, profile)
            runs.append((profile, gfd_requests(emulator, mark)))
    finally:
        writer.finish()
    assert writer.accepted > 0 and not writer.refused, writer.refused
    assert emulator.node_labels(NODE) == {**second, "example.com/busy": str(writer.last)}
    assert emulator.node_annotations(NODE)[OWNERSHIP_ANNOTATION] == ",".join(sorted(second))
    removing = [
        index
        for index, (_, requests) in enumerate(runs, start=1)
        for r in requests
        if r.method == "PATCH"
        and r.status == 200
        and write_effects(r.body, r.content_type).removed["labels"]
    ]
    assert removing == [2, 4, 6, 8]
    everything = [r for _, requests in runs for r in requests]
    assert_gfd_wrote_only_its_keys(everything, [first, second], set())
    print(f"\nbusy node, 8 one-shot runs, the writer's {writer.accepted} patches beside them:")
    for index, (profile, requests) in enumerate(runs, start=1):
        print(f"  run {index} ({profile}): {describe(requests)}")


def kubelet_heartbeat(n: int) -> dict[str, Any]:
    beat = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": f"kubelet is posting ready status (beat {n})",
        "lastHeartbeatTime": beat,
    }
    return {"status": {"conditions": [ready]}}


NFD_LABELS = {
    "nvidia.com/gpu.machine": "set-by-nfd",
    "feature.node.kubernetes.io/pci-10de.present": "true",
}
NFD_LISTING = "nvidia.com/gpu.machine,pci-10de.present"


def nfd_reconcile(_: int) -> list[dict[str, Any]]:
    """NFD's master re-asserting its labels and annotation (a no-op once they are set)."""
    operations = [
        {"op": "add", "path": f"/metadata/labels/{key.replace('/', '~1')}", "value": value}
        for key, value in NFD_LABELS.items()
    ]
    path = f"/metadata/annotations/{NFD_OWNERSHIP_ANNOTATION.replace('/', '~1')}"
    return [*operations, {"op": "add", "path": path, "value": NFD_LISTING}]


def test_a_node_with_many_writers(
    tmp_path: Path, labels_of: Callable[[str], dict[str, str]]
) -> None:
    """The kubelet, a controller at 50 writes a second, NFD's master: gfd's one-shot runs
    and its agent succeed, write only gfd's keys, and in steady state write nothing. The
    watch cache lags writes (0.2 s), as the real one does, so cached reads are stale."""
    first, second = labels_of(FIRST), labels_of(SECOND)
    nfd_keys = {"nvidia.com/gpu.machine"}
    assert nfd_keys <= set(first) & set(second), "NFD must own keys gfd also publishes"
    with ApiServerEmulator(watch_cache_lag=0.2) as emulator:
        seed_gfd_cluster(
            emulator,
            node_name=NODE,
            namespace=NAMESPACE,
            token=TOKEN,
            pod_name=POD,
            node_labels={"kubernetes.io/hostname": NODE, **NFD_LABELS},
            node_annotations={
                NFD_OWNERSHIP_ANNOTATION: NFD_LISTING,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        )
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
        for token, user in (
            ("kubelet", f"system:node:{NODE}"),
            ("controller", "system:serviceaccount:kube-system:rack-controller"),
            ("nfd-master", "system:serviceaccount:node-feature-discovery:nfd-master"),
        ):
            emulator.set_token(token, Principal(user))
        writers = [
            HttpWriter(
                emulator,
                "kubelet",
                kubelet_heartbeat,
                content_type=STRATEGIC_MERGE_PATCH,
                path=f"{NODE_PATH}/status",
                interval=0.1,
            ),
            HttpWriter(
                emulator,
                "controller",
                lambda n: {"metadata": {"labels": {"example.com/controller-beat": str(n)}}},
                interval=0.02,
            ),
            HttpWriter(
                emulator, "nfd-master", nfd_reconcile, content_type=JSON_PATCH, interval=0.5
            ),
        ]
        for writer in writers:
            writer.start()
        try:
            marks = {"start": 0}
            # One-shot runs: a machine, then one with fewer labels, then the same again.
            for profile in (FIRST, SECOND, SECOND):
                marks[profile] = len(emulator.requests)
                oneshot(kubeconfig, profile)
            repeat = gfd_requests(emulator, marks[SECOND])
            # One read of the node; it has no nvidia.com/gpu allocatable, so the device-plugin
            # check also reads its ResourceSlices once (is NVIDIA's DRA driver there?).
            assert [(r.method, r.path) for r in repeat] == [
                ("GET", NODE_PATH),
                ("GET", RESOURCE_SLICES_PATH),
            ], describe(repeat)
            # The agent, on the first machine again.
            marks["agent"] = len(emulator.requests)
            with AgentProcess(
                "--simulate", FIRST, "--sleep-interval", "1s", "--no-timestamp",
                "--no-output-file", "--patch-node", "--node-name", NODE,
                "--kubeconfig", str(kubeconfig),
            ) as agent:  # fmt: skip
                gfd_labels = {k: v for k, v in first.items() if k not in nfd_keys}
                agent.wait_for(
                    lambda: (
                        {
                            k: v
                            for k, v in emulator.node_labels(NODE).items()
                            if k.startswith("nvidia.com/") and k not in nfd_keys
                        }
                        == gfd_labels
                    ),
                    "the agent to label the node",
                    timeout=WAIT,
                )
                agent.wait_for_event("labels published", timeout=WAIT)
                # "labels published" comes before the cycle's health report: wait for the
                # cycle's end, so that its writes (if any) are not counted as steady ones.
                agent.wait_for(
                    lambda: agent.metric("gfd_cycles_total", result="success") >= 1,
                    "the first cycle's end",
                    timeout=WAIT,
                )
                steady = len(emulator.requests)
                agent.wait_for(
                    lambda: sum(r.method == "GET" for r in gfd_requests(emulator, steady)) >= 3,
                    "three steady cycles",
                    timeout=WAIT,
                )
                quiet = gfd_requests(emulator, steady)
                assert agent.matching("cycle failed") == []
                assert agent.stop() == 0
            assert [r for r in quiet if r.method != "GET"] == [], describe(quiet)
        finally:
            for writer in writers:
                writer.finish()
        for writer in writers:
            assert writer.accepted > 0 and not writer.refused, (writer.name, writer.refused)
        node = emulator.node(NODE)
        labels = node["metadata"]["labels"]
        assert {k: labels[k] for k in NFD_LABELS} == NFD_LABELS
        assert labels["example.com/controller-beat"] == str(writers[1].last)
        assert labels["kubernetes.io/hostname"] == NODE
        assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/")} == {
            **first,
            **{k: NFD_LABELS[k] for k in nfd_keys},
        }
        owned = node["metadata"]["annotations"][OWNERSHIP_ANNOTATION].split(",")
        assert set(owned) == set(first) - nfd_keys
        ready = emulator.node_condition(NODE, "Ready")
        assert ready is not None and ready["message"].endswith(f"(beat {writers[0].last})")
        everything = gfd_requests(emulator)
        node_writes = [r for r in everything if r.path == NODE_PATH]
        assert_gfd_wrote_only_its_keys(node_writes, [first, second], nfd_keys)
        status_writes = [
            r for r in everything if r.method == "PATCH" and r.path.endswith("/status")
        ]
        for request in status_writes:
            types = {c["type"] for c in request.body["status"]["conditions"]}
            assert types == {"GPUHealthy"}, request.body
        print(f"\nmany writers: {', '.join(f'{w.name} {w.accepted}' for w in writers)} patches")
        for what, since, until in (
            ("one-shot runs", marks[FIRST], marks["agent"]),
            ("agent", marks["agent"], None),
        ):
            requests = [r for r in emulator.requests[since:until] if r.user == GFD_USER]
            print(f"  gfd's {what}: {describe(requests)}")
