"""The node sink against the API servers: ownership, minimal writes, recovery.

Tests taking ``api`` run against the project's emulator and against kmock (see
:mod:`tests.kube.servers`); those taking ``emulator`` need what only the emulator does,
and each says why.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.kube_api import KubeClient, RetryPolicy, connect_kubernetes
from gfd.sim import load_profile
from gfd.sinks import Publication
from gfd.sinks.node import (
    NFD_OWNERSHIP_ANNOTATION,
    OWNERSHIP_ANNOTATION,
    TIMESTAMP_KEY,
    TOPOLOGY_ANNOTATION,
    NodeSink,
)
from gfd.sinks.node_identity import IDENTITY_ANNOTATION, identity_annotation
from tests.emulator import ApiServerEmulator, Fault, Principal, seed_gfd_cluster
from tests.factories import make_facts
from tests.kube.conftest import FAST_RETRIES, NODE, TOKEN
from tests.kube.servers import NODES, ApiServer, node_annotations, node_labels, writes

EIGHT_H100 = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/cuda.driver-version.full": "550.107.02",
}
TOPOLOGY = '{"gpus":8,"matrix":[["X","NV18"],["NV18","X"]]}'


def publication(labels: dict[str, str] | None = None, /, **annotations: str) -> Publication:
    return Publication(
        labels=dict(EIGHT_H100 if labels is None else labels), annotations=annotations
    )


def sink_for(client: KubeClient, stop: threading.Event, **kwargs: Any) -> NodeSink:
    return NodeSink(client=client, node_name=NODE, stop=stop, **kwargs)


def test_first_run_adds_labels_and_ownership_annotation(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(api_client, stop)
    assert sink.publish(publication(**{TOPOLOGY_ANNOTATION: TOPOLOGY})) is True
    labels = node_labels(api, NODE)
    assert {k: labels[k] for k in EIGHT_H100} == EIGHT_H100
    annotations = node_annotations(api, NODE)
    assert annotations[OWNERSHIP_ANNOTATION] == ",".join(sorted(EIGHT_H100))
    assert annotations[TOPOLOGY_ANNOTATION] == TOPOLOGY
    assert [(r.method, r.content_type, r.status) for r in writes(api)] == [
        ("PATCH", "application/merge-patch+json", 200)
    ]


def test_unchanged_cycle_sends_zero_writes_and_one_cached_read(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(api_client, stop)
    sink.publish(publication(**{TOPOLOGY_ANNOTATION: TOPOLOGY}))
    before = api.get(NODES, NODE)
    api.clear_log()
    for _ in range(5):
        assert sink.publish(publication(**{TOPOLOGY_ANNOTATION: TOPOLOGY})) is False
    assert writes(api) == []
    reads = api.requests
    assert len(reads) == 5
    assert all(r.method == "GET" and r.query == {"resourceVersion": "0"} for r in reads)
    assert api.get(NODES, NODE) == before


def test_disappearing_gpu_removes_exactly_the_labels_gfd_owned(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    api.change_node_metadata(NODE, labels={"team": "ml", "nvidia.com/gpu.deploy": "true"})
    sink = sink_for(api_client, stop)
    sink.publish(publication(**{TOPOLOGY_ANNOTATION: TOPOLOGY}))
    remaining = {"nvidia.com/cuda.driver-version.full": "550.107.02"}
    api.clear_log()

    assert sink.publish(publication(remaining)) is True

    labels = node_labels(api, NODE)
    assert labels == {**remaining, "team": "ml", "nvidia.com/gpu.deploy": "true"}
    annotations = node_annotations(api, NODE)
    assert annotations[OWNERSHIP_ANNOTATION] == "nvidia.com/cuda.driver-version.full"
    assert TOPOLOGY_ANNOTATION not in annotations
    (patch,) = writes(api)
    body_labels = patch.body["metadata"]["labels"]
    assert body_labels == dict.fromkeys(set(EIGHT_H100) - set(remaining))
    # A removal is only ever sent with the read resourceVersion as precondition.
    assert patch.body["metadata"]["resourceVersion"]


def test_foreign_and_nfd_owned_labels_survive_every_cycle(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    foreign = {"team": "ml", "nvidia.com/gpu.deploy.driver": "true"}
    nfd = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        # NFD also publishes this key (from a feature file): gfd must leave it alone.
        "nvidia.com/gpu.product": "NVIDIA-H100-from-NFD",
    }
    api.change_node_metadata(
        NODE,
        labels={**foreign, **nfd},
        annotations={NFD_OWNERSHIP_ANNOTATION: "nvidia.com/gpu.product,pci-10de.present"},
    )
    sink = sink_for(api_client, stop)
    cycles = [
        publication(),
        publication(),
        publication({"nvidia.com/gpu.count": "4"}),
        publication({}),
        publication(),
    ]
    for cycle in cycles:
        sink.publish(cycle)
        labels = node_labels(api, NODE)
        assert {k: labels.get(k) for k in {**foreign, **nfd}} == {**foreign, **nfd}
        owned = node_annotations(api, NODE).get(OWNERSHIP_ANNOTATION, "")
        assert "nvidia.com/gpu.product" not in owned
    final = node_labels(api, NODE)
    assert final == {**foreign, **nfd, **{k: v for k, v in EIGHT_H100.items() if k not in nfd}}


def test_first_run_adopts_an_earlier_writers_keys_but_not_nfds(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    api.change_node_metadata(
        NODE,
        labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559"},
        annotations={NFD_OWNERSHIP_ANNOTATION: "nvidia.com/gpu.memory"},
    )
    sink = sink_for(api_client, stop)
    sink.publish(publication())
    owned = node_annotations(api, NODE)[OWNERSHIP_ANNOTATION].split(",")
    assert "nvidia.com/gpu.count" in owned
    assert "nvidia.com/gpu.memory" not in owned
    # Once adopted, a key gfd stops publishing is removed; NFD's stays.
    sink.publish(publication({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
    assert node_labels(api, NODE) == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
    }


def test_conflict_with_another_writer_converges(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: kmock stores a resourceVersion precondition without checking it,
    # so it never answers 409, and it cannot run another writer between two requests.
    sink = sink_for(client, stop)
    sink.publish(publication())
    # Between gfd's read and its removing patch, another writer changes the node.
    emulator.before(
        lambda api: api.change_node_metadata(NODE, labels={"other-writer": "was-here"}),
        method="PATCH",
    )
    emulator.clear_log()
    assert sink.publish(publication({"nvidia.com/gpu.count": "8"})) is True
    statuses = [(r.method, r.status, r.query.get("resourceVersion")) for r in emulator.requests]
    assert statuses == [
        ("GET", 200, "0"),
        ("PATCH", 409, None),
        ("GET", 200, None),
        ("PATCH", 200, None),
    ]
    assert emulator.node_labels(NODE) == {"nvidia.com/gpu.count": "8", "other-writer": "was-here"}
    emulator.clear_log()
    assert sink.publish(publication({"nvidia.com/gpu.count": "8"})) is False
    assert emulator.count(writes=True) == 0


def test_stale_cached_read_cannot_delete_a_key_another_writer_took_over(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: kmock has no watch cache to freeze and no preconditions (no 409).
    sink = sink_for(client, stop)
    sink.publish(publication())
    emulator.freeze_cache()
    # The cache still shows gfd's label; in etcd an admin has since set their own value
    # and taken the key out of gfd's ownership annotation.
    owned = sorted(set(EIGHT_H100) - {"nvidia.com/gpu.memory"})
    emulator.change_node_metadata(
        NODE,
        labels={"nvidia.com/gpu.memory": "pinned-by-admin"},
        annotations={OWNERSHIP_ANNOTATION: ",".join(owned)},
    )
    labels = {k: v for k, v in EIGHT_H100.items() if k != "nvidia.com/gpu.memory"}
    emulator.clear_log()
    assert sink.publish(publication(labels)) is False
    assert [r.status for r in emulator.requests if r.is_write] == [409]
    assert emulator.node_labels(NODE)["nvidia.com/gpu.memory"] == "pinned-by-admin"


@pytest.mark.parametrize(
    "faults",
    [
        [Fault(status=503, times=6)],
        [Fault(status=500, times=3), Fault(status=503, times=3)],
        [Fault(status=429, retry_after="0", times=4)],
        [Fault(drop=True, times=2)],
        [Fault(delay=1.5, method="GET", times=1)],
        [Fault(delay=1.5, method="PATCH", times=1)],
    ],
    ids=[
        "503-storm",
        "500-then-503",
        "429-storm",
        "dropped-connections",
        "slow-read",
        "slow-write",
    ],
)
def test_server_storms_are_retried_and_converge(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event, faults: list[Fault]
) -> None:
    # Emulator only: kmock can script a status for a request, but its object store applies
    # a write before the scripted answer, so "503, nothing applied" is beyond it; nor can
    # it drop a connection halfway through a body.
    emulator.inject(*faults)
    sink = sink_for(client, stop)
    assert sink.publish(publication()) is True
    assert emulator.node_annotations(NODE)[OWNERSHIP_ANNOTATION] == ",".join(sorted(EIGHT_H100))
    assert all(f.fired == f.times for f in faults)
    emulator.clear_log()
    assert sink.publish(publication()) is False
    assert emulator.count(writes=True) == 0


def test_429_waits_for_retry_after(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: an injected fault, with the request log's timestamps.
    emulator.inject(Fault(status=429, retry_after="1", method="GET"))
    started = time.monotonic()
    assert sink_for(client, stop).publish(publication()) is True
    assert time.monotonic() - started >= 1.0
    first, second = emulator.requests[:2]
    assert (first.status, second.status) == (429, 200)
    assert second.timestamp - first.timestamp >= 1.0


def test_token_rotation_401_recovers_by_rereading_credentials(
    emulator: ApiServerEmulator, client: KubeClient, kubeconfig: Path, stop: threading.Event
) -> None:
    # Emulator only: kmock authenticates nobody (any token or none is served).
    sink = sink_for(client, stop)
    sink.publish(publication())
    principal = Principal("system:serviceaccount:gpu-operator:gfd")
    emulator.set_token("rotated-token", principal)
    emulator.revoke_token(TOKEN)
    emulator.write_kubeconfig(kubeconfig, "rotated-token")
    emulator.clear_log()
    assert sink.publish(publication({"nvidia.com/gpu.count": "7"})) is True
    assert [r.status for r in emulator.requests] == [401, 200, 200]
    assert [r.user for r in emulator.requests][1:] == [principal.user] * 2
    assert emulator.node_labels(NODE)["nvidia.com/gpu.count"] == "7"


def test_401_that_a_reload_cannot_fix_is_permanent(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: kmock never answers 401.
    emulator.revoke_token(TOKEN)
    with pytest.raises(SinkPermanentError, match=r"HTTP 401.*kubeconfig"):
        sink_for(client, stop).publish(publication())
    assert len(emulator.requests) == 2


def test_403_is_reported_clearly_and_not_retried(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path, stop: threading.Event
) -> None:
    # Emulator only: kmock has no authorisation (no RBAC, never 403).
    emulator.set_token(
        "read-only",
        Principal("system:serviceaccount:gpu-operator:gfd", frozenset({("get", "nodes")})),
    )
    emulator.write_kubeconfig(kubeconfig, "read-only")
    client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=FAST_RETRIES)
    sink = sink_for(client, stop)
    with pytest.raises(SinkPermanentError) as raised:
        sink.publish(publication())
    message = str(raised.value)
    assert "PATCH /api/v1/nodes/gpu-node-1: HTTP 403" in message
    assert 'cannot patch resource "nodes"' in message
    assert "RBAC" in message
    assert [r.method for r in emulator.requests] == ["GET", "PATCH"]
    client.close()


def test_missing_node_is_permanent_and_names_the_flag(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink = NodeSink(client=api_client, node_name="no-such-node", stop=stop)
    with pytest.raises(SinkPermanentError, match=r"'no-such-node' not found.*--node-name"):
        sink.publish(publication())
    assert [r.status for r in api.requests] == [404]


def test_stop_during_backoff_gives_up_promptly(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path, stop: threading.Event
) -> None:
    # Emulator only: an endless 503 with nothing applied (see the storms above).
    patient = RetryPolicy(initial_delay=5.0, max_delay=30.0, deadline=300.0)
    client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=patient)
    emulator.inject(Fault(status=503, times=None))
    sink = sink_for(client, stop)
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(SinkError, match="interrupted"):
        sink.publish(publication())
    assert time.monotonic() - started < 1.5
    client.close()


def test_retry_deadline_bounds_a_publish(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path, stop: threading.Event
) -> None:
    # Emulator only: an endless 503 with nothing applied (see the storms above).
    short = RetryPolicy(initial_delay=0.05, max_delay=0.1, deadline=0.5)
    client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=short)
    emulator.inject(Fault(status=503, times=None))
    started = time.monotonic()
    with pytest.raises(SinkError, match=r"HTTP 503.*gave up after \d+ attempt") as raised:
        sink_for(client, stop).publish(publication())
    assert not isinstance(raised.value, SinkPermanentError)
    assert time.monotonic() - started < 1.0
    client.close()


def test_timestamp_annotation_moves_the_timestamp_off_the_labels(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(api_client, stop, timestamp_annotation=True)
    sink.publish(publication({**EIGHT_H100, TIMESTAMP_KEY: "1733140000"}))
    assert TIMESTAMP_KEY not in node_labels(api, NODE)
    assert node_annotations(api, NODE)[TIMESTAMP_KEY] == "1733140000"
    assert TIMESTAMP_KEY not in node_annotations(api, NODE)[OWNERSHIP_ANNOTATION]
    api.clear_log()
    sink.publish(publication({**EIGHT_H100, TIMESTAMP_KEY: "1733140000"}))
    assert writes(api) == []


def test_unowned_annotation_is_refused(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    with pytest.raises(SinkPermanentError, match="does not own the annotation"):
        sink_for(api_client, stop).publish(publication(**{"example.com/other": "x"}))
    assert writes(api) == []


def test_oversized_annotations_are_refused_before_sending(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    huge = "x" * (300 * 1024)
    with pytest.raises(SinkPermanentError, match="over the API server's 262144-byte limit"):
        sink_for(api_client, stop).publish(publication(**{TOPOLOGY_ANNOTATION: huge}))
    assert writes(api) == []


def test_invalid_label_422_is_permanent_and_nothing_is_applied(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: kmock validates nothing (it would store the invalid label).
    bad = {**EIGHT_H100, "nvidia.com/gpu.compute.major": "-1"}
    with pytest.raises(SinkPermanentError, match=r"HTTP 422.*is invalid"):
        sink_for(client, stop).publish(publication(bad))
    assert emulator.node_labels(NODE) == {}


def test_an_ownership_annotation_edited_to_list_foreign_labels_deletes_none_of_them(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    foreign = {
        "kubernetes.io/os": "linux",
        "node-role.kubernetes.io/worker": "",
        "example.com/rack": "r17",
        "nvidia.com/dcgm.exporter": "true",
    }
    sink = sink_for(api_client, stop)
    sink.publish(publication())
    # Anyone who may edit the node's annotations lists other writers' keys as gfd's.
    listed = ",".join(sorted({*EIGHT_H100, *foreign}))
    api.change_node_metadata(NODE, labels=foreign, annotations={OWNERSHIP_ANNOTATION: listed})
    api.clear_log()
    assert sink.publish(publication({"nvidia.com/gpu.count": "8"})) is True
    labels = node_labels(api, NODE)
    assert {k: labels.get(k) for k in foreign} == foreign
    assert "nvidia.com/gpu.product" not in labels, "gfd's own stale keys still go"
    assert node_annotations(api, NODE)[OWNERSHIP_ANNOTATION] == "nvidia.com/gpu.count"
    (write,) = writes(api)
    removed = {k for k, v in write.body["metadata"]["labels"].items() if v is None}
    assert removed == set(EIGHT_H100) - {"nvidia.com/gpu.count"}


def test_a_stale_cached_read_right_after_a_write_orphans_no_label(
    stop: threading.Event, tmp_path: Path
) -> None:
    """The real server's watch cache lags a write by a moment (the real-server suite sees
    the 409s it causes). Two publications within that moment: the second one's cached
    read predates the first write, and must not rewrite the ownership annotation from it
    (it would drop a key gfd still owns, which then stays on the node for good).

    Emulator only: kmock has no watch cache and no preconditions."""
    with ApiServerEmulator(watch_cache_lag=30.0) as lagging:
        seed_gfd_cluster(lagging, node_name=NODE, token=TOKEN)
        kubeconfig = lagging.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
        client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=FAST_RETRIES)
        try:
            sink = sink_for(client, stop)
            assert sink.publish(publication()) is True
            fewer = {k: v for k, v in EIGHT_H100.items() if k != "nvidia.com/gpu.memory"}
            assert sink.publish(publication(fewer)) is True
        finally:
            client.close()
        labels = lagging.node_labels(NODE)
        assert "nvidia.com/gpu.memory" not in labels
        assert {k: labels[k] for k in fewer} == fewer
        assert lagging.node_annotations(NODE)[OWNERSHIP_ANNOTATION] == ",".join(sorted(fewer))
        statuses = [
            (r.method, r.status) for r in lagging.requests if r.path.startswith("/api/v1/nodes")
        ]
        assert ("PATCH", 409) in statuses, statuses


def test_the_gpus_identity_is_written_when_it_changes_and_removed_with_the_last_gpu(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    """``nvidia.com/gpu.devices`` (gfd/sinks/node_identity.py) is one of the annotations the
    node sink owns: written once, not again while the GPUs stay, rewritten when a GPU is
    replaced (a new UUID and serial), removed when the node has no GPU left."""
    facts = load_profile("dgx-h100").facts
    sink = sink_for(api_client, stop)
    assert sink.publish(publication(**identity_annotation(facts))) is True
    written = node_annotations(api, NODE)[IDENTITY_ANNOTATION]
    assert json.loads(written)["devices"][3]["serial"] == "0123456102003"
    api.clear_log()
    assert sink.publish(publication(**identity_annotation(facts))) is False
    assert writes(api) == []

    replaced = dataclasses.replace(
        facts.gpus[3], uuid="GPU-00000000-0000-0000-0000-00000000d003", serial="0123456102999"
    )
    swapped = dataclasses.replace(facts, gpus=(*facts.gpus[:3], replaced, *facts.gpus[4:]))
    assert sink.publish(publication(**identity_annotation(swapped))) is True
    assert json.loads(node_annotations(api, NODE)[IDENTITY_ANNOTATION])["devices"][3] == {
        "index": 3,
        "uuid": "GPU-00000000-0000-0000-0000-00000000d003",
        "pcieBusID": "0000:61:00.0",
        "serial": "0123456102999",
        "productName": "NVIDIA H100 80GB HBM3",
        "migEnabled": False,
    }

    assert sink.publish(publication(**identity_annotation(make_facts([])))) is True
    assert IDENTITY_ANNOTATION not in node_annotations(api, NODE)
