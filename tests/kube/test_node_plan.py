"""The node sink's pure diff: ownership rules as whole-map assertions and properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gfd.labels.families import gfd_can_produce
from gfd.sinks import Publication
from gfd.sinks.node_update import (
    NFD_OWNERSHIP_ANNOTATION,
    OWNERSHIP_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    nfd_owned_keys,
    parse_key_list,
    plan_node_update,
)
from tests.emulator.patching import merge_patch


def test_nfd_annotation_strips_its_default_prefix_only() -> None:
    annotations = {
        NFD_OWNERSHIP_ANNOTATION: "cpu-model.vendor_id,nvidia.com/gpu.count,,pci-10de.present"
    }
    assert nfd_owned_keys(annotations) == {
        "feature.node.kubernetes.io/cpu-model.vendor_id",
        "feature.node.kubernetes.io/pci-10de.present",
        "nvidia.com/gpu.count",
    }
    assert nfd_owned_keys({}) == frozenset()
    assert parse_key_list(" a , b ,") == {"a", "b"}


def test_first_publication_on_a_bare_node() -> None:
    update = plan_node_update(
        {},
        {},
        Publication(
            {"nvidia.com/gpu.b": "2", "nvidia.com/gpu.a": "1"}, {TOPOLOGY_ANNOTATION: "{}"}
        ),
    )
    assert update.merge_patch(None) == {
        "metadata": {
            "labels": {"nvidia.com/gpu.a": "1", "nvidia.com/gpu.b": "2"},
            "annotations": {
                TOPOLOGY_ANNOTATION: "{}",
                OWNERSHIP_ANNOTATION: "nvidia.com/gpu.a,nvidia.com/gpu.b",
            },
        }
    }
    assert not update.removes


def test_matching_node_needs_nothing() -> None:
    labels = {"nvidia.com/gpu.a": "1", "team": "x"}
    annotations = {OWNERSHIP_ANNOTATION: "nvidia.com/gpu.a", "other": "y"}
    assert plan_node_update(labels, annotations, Publication({"nvidia.com/gpu.a": "1"})).empty


def test_removal_of_everything_drops_the_ownership_annotation_too() -> None:
    labels = {"nvidia.com/gpu.a": "1", "team": "x"}
    annotations = {OWNERSHIP_ANNOTATION: "nvidia.com/gpu.a", TOPOLOGY_ANNOTATION: "{}"}
    update = plan_node_update(labels, annotations, Publication({}))
    assert update.merge_patch("42") == {
        "metadata": {
            "labels": {"nvidia.com/gpu.a": None},
            "annotations": {OWNERSHIP_ANNOTATION: None, TOPOLOGY_ANNOTATION: None},
            "resourceVersion": "42",
        }
    }


def test_key_taken_over_by_nfd_is_released_not_removed() -> None:
    labels = {"nvidia.com/gpu.a": "1", "nvidia.com/gpu.b": "2"}
    annotations = {
        OWNERSHIP_ANNOTATION: "nvidia.com/gpu.a,nvidia.com/gpu.b",
        NFD_OWNERSHIP_ANNOTATION: "nvidia.com/gpu.b",
    }
    update = plan_node_update(
        labels, annotations, Publication({"nvidia.com/gpu.a": "1", "nvidia.com/gpu.b": "3"})
    )
    assert update.skipped_nfd_keys == {"nvidia.com/gpu.b"}
    assert update.merge_patch(None) == {
        "metadata": {"annotations": {OWNERSHIP_ANNOTATION: "nvidia.com/gpu.a"}}
    }


keys = st.sampled_from(
    [f"nvidia.com/gpu.k{i}" for i in range(4)]
    + ["nvidia.com/mig-1g.5gb.count", "nvidia.com/other", "nvidia.com/gpu"]
    + ["team", "feature.node.kubernetes.io/pci-10de.present", "example.com/x", "kubernetes.io/os"]
)
values = st.sampled_from(["1", "2", "true"])
label_maps = st.dictionaries(keys, values, max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    current=label_maps,
    owned=st.sets(keys),
    nfd=st.sets(keys.filter(lambda k: "/" in k)),  # NFD never writes unprefixed keys
    published=label_maps,
)
def test_patch_never_touches_what_gfd_does_not_own(
    current: dict[str, str], owned: set[str], nfd: set[str], published: dict[str, str]
) -> None:
    nfd_listing = ",".join(k.removeprefix("feature.node.kubernetes.io/") for k in sorted(nfd))
    annotations = {
        OWNERSHIP_ANNOTATION: ",".join(sorted(owned)),
        NFD_OWNERSHIP_ANNOTATION: nfd_listing,
    }
    update = plan_node_update(current, annotations, Publication(published))
    node = {"metadata": {"labels": current, "annotations": annotations}}
    after = merge_patch(node, update.merge_patch(None))["metadata"]
    labels_after = after.get("labels", {})
    for key, value in current.items():
        if key in nfd or (key not in published and (key not in owned or not gfd_can_produce(key))):
            assert labels_after.get(key) == value, key
    for key, value in published.items():
        if key not in nfd:
            assert labels_after[key] == value
    assert after["annotations"][NFD_OWNERSHIP_ANNOTATION] == nfd_listing
    recorded = parse_key_list(after["annotations"].get(OWNERSHIP_ANNOTATION))
    assert recorded == set(published) - nfd
    # Applying the update reaches a fixed point: the next cycle writes nothing.
    assert plan_node_update(labels_after, after["annotations"], Publication(published)).empty


def test_foreign_keys_in_the_ownership_annotation_are_never_removed() -> None:
    labels = {
        "kubernetes.io/hostname": "n1",
        "node-role.kubernetes.io/control-plane": "",
        "example.com/rack": "r17",
        "nvidia.com/dcgm.exporter": "true",
        "nvidia.com/gpu.retired": "true",
    }
    listed = ",".join(sorted(labels))
    update = plan_node_update(labels, {OWNERSHIP_ANNOTATION: listed}, Publication({}))
    assert update.remove_labels == {"nvidia.com/gpu.retired"}
    assert update.foreign_owned_keys == set(labels) - {"nvidia.com/gpu.retired"}
    assert update.merge_patch(None)["metadata"]["labels"] == {"nvidia.com/gpu.retired": None}


def test_an_edited_ownership_annotation_is_healed_without_deleting_anything() -> None:
    labels = {"nvidia.com/gpu.count": "8", "example.com/rack": "r17"}
    annotations = {OWNERSHIP_ANNOTATION: "example.com/rack,nvidia.com/gpu.count"}
    update = plan_node_update(labels, annotations, Publication({"nvidia.com/gpu.count": "8"}))
    assert update.merge_patch(None) == {
        "metadata": {"annotations": {OWNERSHIP_ANNOTATION: "nvidia.com/gpu.count"}}
    }


def test_gfd_can_produce_only_its_namespace_and_families() -> None:
    assert gfd_can_produce("nvidia.com/gpu.product")
    assert gfd_can_produce("nvidia.com/mig-1g.10gb.count")
    assert gfd_can_produce("nvidia.com/gfd.timestamp")
    for key in (
        "nvidia.com/gpu",
        "nvidia.com/dcgm.exporter",
        "sub.nvidia.com/gpu.product",
        "gpu.product",
        "kubernetes.io/hostname",
        "nvidia.comx/gpu.count",
        "nvidia.com/gpu.count/x",
    ):
        assert not gfd_can_produce(key), key
