"""The node sink's guarded writes (issue 25): conditional on exactly what they depend on.

A removal or an ownership rewrite is first sent as a merge patch carrying the read
``resourceVersion``; after a lost race it becomes a JSON Patch whose ``test`` operations
hold the keys it depends on (docs/sinks.md). Here: the pure patch (it does what the merge
patch does, fails when a key it depends on changed and never because of anything else),
and the sink against the emulator (409 then a guarded retry, 422 told apart from an
invalid label, backoff bounded by the deadline and by stop, the non-plain fallback).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.kube_api import KubeClient, RetryPolicy, connect_kubernetes
from gfd.sinks import Publication
from gfd.sinks.node import (
    NFD_OWNERSHIP_ANNOTATION,
    OWNERSHIP_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    NodeSink,
)
from gfd.sinks.node_update import json_pointer, plan_node_update
from tests.emulator import ApiServerEmulator
from tests.emulator.patching import PatchError, json_patch, merge_patch
from tests.kube.conftest import NODE
from tests.kube.node_writes import JSON_PATCH, MERGE_PATCH, write_effects

EIGHT = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
UNRELATED = "example.com/unrelated"

# --------------------------------------------------------------------------- #
# The pure patch

keys = st.sampled_from(
    [f"nvidia.com/gpu.k{i}" for i in range(4)]
    + ["nvidia.com/mig-1g.5gb.count", "nvidia.com/other", "team", "kubernetes.io/os"]
    + ["feature.node.kubernetes.io/pci-10de.present"]
)
values = st.sampled_from(["1", "2", "true"])
label_maps = st.dictionaries(keys, values, max_size=7)


def node_of(
    labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    """A node whose maps are absent when None (the real server omits an empty map)."""
    metadata: dict[str, Any] = {"name": NODE, "resourceVersion": "7"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {"metadata": metadata}


@settings(max_examples=300, deadline=None)
@given(
    current=label_maps,
    owned=st.sets(keys),
    nfd=st.sets(keys.filter(lambda k: "/" in k)),
    published=label_maps,
    topology=st.booleans(),
    publish_topology=st.booleans(),
    maps_absent=st.booleans(),
)
def test_the_guarded_patch_does_what_the_merge_patch_does_and_fails_only_on_its_own_keys(
    current: dict[str, str],
    owned: set[str],
    nfd: set[str],
    published: dict[str, str],
    topology: bool,
    publish_topology: bool,
    maps_absent: bool,
) -> None:
    annotations: dict[str, str] = {}
    if owned:
        annotations[OWNERSHIP_ANNOTATION] = ",".join(sorted(owned))
    if nfd:
        nfd_listing = ",".join(k.removeprefix("feature.node.kubernetes.io/") for k in sorted(nfd))
        annotations[NFD_OWNERSHIP_ANNOTATION] = nfd_listing
    if topology:
        annotations[TOPOLOGY_ANNOTATION] = "{}"
    node = node_of(
        current if current or not maps_absent else None,
        annotations if annotations or not maps_absent else None,
    )
    publication = Publication(published, {TOPOLOGY_ANNOTATION: "{}"} if publish_topology else {})
    update = plan_node_update(current, annotations, publication)
    if update.empty:
        return
    assert bool(update.depends_on) == update.needs_precondition
    patch = update.guarded_patch(node["metadata"])
    assert patch is not None  # every value here is plain
    expected = merge_patch(node, update.merge_patch(None))
    assert json_patch(node, patch.operations) == expected
    assert patch.changed(node["metadata"]) == []
    # Another writer's change to anything else leaves the guarded patch applicable...
    for name in ("labels", "annotations"):
        if name not in node["metadata"]:
            # ...except the first key of a map that was absent: gfd's guard is then the
            # map's absence (a JSON Patch cannot test a key of a missing map). Real Nodes
            # always have both maps (the kubelet's labels, the TTL controller's note).
            continue
        unrelated = merge_patch(node, {"metadata": {name: {UNRELATED: "x"}}})
        assert json_patch(unrelated, patch.operations)["metadata"][name][UNRELATED] == "x"
        assert patch.changed(unrelated["metadata"]) == []
    # ...while a change to any key it depends on makes it fail whole.
    for (name, key), value in update.depends_on.items():
        changed_value = "changed" if value is None or value != "changed" else "other"
        moved = merge_patch(node, {"metadata": {name: {key: changed_value}}})
        with pytest.raises(PatchError):
            json_patch(moved, patch.operations)
        assert patch.changed(moved["metadata"]), (name, key)
        if value is not None:
            gone = merge_patch(node, {"metadata": {name: {key: None}}})
            with pytest.raises(PatchError):
                json_patch(gone, patch.operations)
            assert patch.changed(gone["metadata"]), (name, key)


def test_pointers_escape_keys_as_rfc_6901_says() -> None:
    assert (
        json_pointer("labels", "nvidia.com/gpu.count") == "/metadata/labels/nvidia.com~1gpu.count"
    )
    assert json_pointer("annotations", "a~b/c") == "/metadata/annotations/a~0b~1c"
    assert json_pointer("labels") == "/metadata/labels"


def test_a_first_write_on_a_bare_node_is_guarded_by_the_maps_absence() -> None:
    node = node_of(None, None)
    update = plan_node_update({}, {}, Publication(EIGHT))
    patch = update.guarded_patch(node["metadata"])
    assert patch is not None
    assert patch.operations == [
        {"op": "test", "path": "/metadata/labels", "value": None},
        {"op": "test", "path": "/metadata/annotations", "value": None},
        {"op": "add", "path": "/metadata/labels", "value": EIGHT},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {OWNERSHIP_ANNOTATION: ",".join(sorted(EIGHT))},
        },
    ]
    # Someone else created the annotations meanwhile: adding the whole map would wipe
    # theirs, so the patch fails instead.
    created = node_of(None, {"example.com/note": "x"})
    with pytest.raises(PatchError):
        json_patch(created, patch.operations)
    assert patch.changed(created["metadata"]) == ["metadata.annotations"]


@pytest.mark.parametrize("edited", ["a&b", "<x>", "caf\u00e9", "tab\there"])
def test_a_guard_value_that_json_encoders_write_differently_is_not_guarded(edited: str) -> None:
    """kube-apiserver's ``test`` compares raw JSON bytes; Go escapes ``<>&`` and writes
    UTF-8 where Python's encoder does otherwise, so such a value would never match."""
    labels = {"nvidia.com/gpu.count": "8"}
    annotations = {OWNERSHIP_ANNOTATION: edited}
    update = plan_node_update(labels, annotations, Publication(labels))
    assert update.depends_on[("annotations", OWNERSHIP_ANNOTATION)] == edited
    assert update.guarded_patch(node_of(labels, annotations)["metadata"]) is None


def test_conflict_delays_are_jittered_and_capped() -> None:
    policy = RetryPolicy(conflict_initial_delay=0.05, conflict_max_delay=0.4)
    client = KubeClient(
        api_client=None,
        credentials=None,  # type: ignore[arg-type]
        request_timeout=1.0,
        retry_policy=policy,
        rng=random.Random(25),
    )
    for conflicts in range(1, 40):
        ceiling = min(0.4, 0.05 * 2 ** (conflicts - 1))
        delays = [client.conflict_delay(conflicts) for _ in range(20)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1
    with pytest.raises(ValueError, match="conflict_initial_delay"):
        RetryPolicy(conflict_initial_delay=1.0, conflict_max_delay=0.5)


# --------------------------------------------------------------------------- #
# The sink against the emulator


def sink_for(client: KubeClient, stop: threading.Event) -> NodeSink:
    return NodeSink(client=client, node_name=NODE, stop=stop)


def gfd_patches(emulator: ApiServerEmulator) -> list[tuple[int, str | None]]:
    return [(r.status, r.content_type) for r in emulator.requests if r.method == "PATCH"]


def unrelated_write(api: ApiServerEmulator) -> None:
    count = int(api.node_labels(NODE).get(UNRELATED, "0"))
    api.change_node_metadata(NODE, labels={UNRELATED: str(count + 1)})


def test_a_busy_node_costs_one_conflict_then_a_write_guarded_by_gfds_keys(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(client, stop)
    sink.publish(Publication(EIGHT))
    emulator.before(unrelated_write, method="PATCH", times=None)
    emulator.clear_log()
    assert sink.publish(Publication({"nvidia.com/gpu.count": "8"})) is True
    assert gfd_patches(emulator) == [(409, MERGE_PATCH), (200, JSON_PATCH)]
    guarded = emulator.requests[-1]
    effects = write_effects(guarded.body, guarded.content_type)
    assert effects.tests == [
        (json_pointer("annotations", NFD_OWNERSHIP_ANNOTATION), None),
        (json_pointer("annotations", OWNERSHIP_ANNOTATION), ",".join(sorted(EIGHT))),
        (json_pointer("labels", "nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3"),
    ]
    assert effects.removed["labels"] == {"nvidia.com/gpu.product"}
    assert emulator.node_labels(NODE) == {"nvidia.com/gpu.count": "8", UNRELATED: "2"}
    assert emulator.node_annotations(NODE)[OWNERSHIP_ANNOTATION] == "nvidia.com/gpu.count"


def test_a_key_someone_took_over_during_the_retry_is_not_deleted(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(client, stop)
    sink.publish(Publication(EIGHT))

    def take_over(api: ApiServerEmulator) -> None:
        # An admin pins gfd's product label and takes it out of gfd's ownership.
        api.change_node_metadata(
            NODE,
            labels={"nvidia.com/gpu.product": "pinned"},
            annotations={OWNERSHIP_ANNOTATION: "nvidia.com/gpu.count"},
        )

    patches = iter([unrelated_write, take_over])
    emulator.before(lambda api: next(patches)(api), method="PATCH", times=2)
    emulator.clear_log()
    assert sink.publish(Publication({"nvidia.com/gpu.count": "8"})) is False
    # The guarded retry fails on the ownership annotation and the label it tested; the
    # fresh read shows gfd owns nothing to remove any more.
    assert gfd_patches(emulator) == [(409, MERGE_PATCH), (422, JSON_PATCH)]
    assert emulator.node_labels(NODE)["nvidia.com/gpu.product"] == "pinned"


def test_a_guarded_write_the_server_refuses_is_permanent_not_retried(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(client, stop)
    sink.publish(Publication(EIGHT))
    before_write = emulator.node(NODE)
    emulator.before(unrelated_write, method="PATCH", times=1)
    emulator.clear_log()
    bad = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.compute.major": "-1"}
    with pytest.raises(SinkPermanentError, match=r"HTTP 422.*is invalid.*still holds"):
        sink.publish(Publication(bad))
    assert gfd_patches(emulator) == [(409, MERGE_PATCH), (422, JSON_PATCH)]
    # Nothing of gfd's changed; only the other writer's label did.
    after = emulator.node_labels(NODE)
    assert {k: v for k, v in after.items() if k != UNRELATED} == before_write["metadata"]["labels"]


def test_stop_ends_a_conflict_backoff_at_once(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path, stop: threading.Event
) -> None:
    slow = RetryPolicy(
        initial_delay=0.01, max_delay=0.05, conflict_initial_delay=30.0, conflict_max_delay=30.0
    )
    client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=slow)
    try:
        sink = sink_for(client, stop)
        sink.publish(Publication(EIGHT))
        emulator.before(unrelated_write, method="PATCH", times=None)
        # The agent is told to stop while its first attempt loses the race: the backoff
        # that follows (up to 30 s here) must not be waited out.
        emulator.before(lambda api: stop.set(), method="PATCH")
        with pytest.raises(SinkError, match="interrupted while resolving a conflict"):
            sink.publish(Publication({"nvidia.com/gpu.count": "8"}))
    finally:
        client.close()
    assert "nvidia.com/gpu.product" in emulator.node_labels(NODE)


def test_a_hand_edited_ownership_annotation_keeps_the_resource_version_precondition(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(client, stop)
    sink.publish(Publication(EIGHT))
    edited = ",".join(sorted(EIGHT)) + ",example.com/a&b"
    emulator.change_node_metadata(NODE, annotations={OWNERSHIP_ANNOTATION: edited})
    emulator.before(unrelated_write, method="PATCH", times=2)
    emulator.clear_log()
    assert sink.publish(Publication({"nvidia.com/gpu.count": "8"})) is True
    assert gfd_patches(emulator) == [(409, MERGE_PATCH), (409, MERGE_PATCH), (200, MERGE_PATCH)]
    assert emulator.node_annotations(NODE)[OWNERSHIP_ANNOTATION] == "nvidia.com/gpu.count"
