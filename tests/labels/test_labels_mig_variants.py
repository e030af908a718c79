"""MIG profile variants (``+me``, ``+me.all``, ``-me``, ``+gfx``) in facts, simulator, reader and labels.

NVML tells a variant by the ``NVML_GPU_INSTANCE_PROFILE_*`` index at which it reports the
profile (nvml.h: 1_SLICE_REV1 0x7, 1_SLICE_GFX 0xA, 1_SLICE_NO_ME 0xD, 1_SLICE_ALL_ME 0xF,
...). NVIDIA's go-nvlib (used by the reference) names a profile ``<G>g.<GB>gb`` plus
``+me``/``+me.all``/``+gfx``, or ``-me``, and the reference's labels and resource names turn
``+`` into ``.``: ``1g.12gb+me`` → ``1g.12gb.me``, ``4g.71gb-me`` stays ``4g.71gb-me``.
"""

from __future__ import annotations

import dataclasses

import pytest

from gfd.facts import FactsError, MigDevice, facts_from_dict, facts_to_dict
from gfd.labels import LabelOptions, build_labels
from gfd.labels.mig import profile_name
from gfd.sim import simulate
from tests.factories import make_facts
from tests.mig_factories import A100_MEMORY, A100_SHAPES, Shape, a100, mig
from tests.sim import read_simulated

ONE_SLICE = A100_SHAPES["1g.5gb"]
FOUR_SLICES = A100_SHAPES["4g.20gb"]
THREE_SLICES = A100_SHAPES["3g.20gb"]


def variant(profile_index: int, base: Shape = ONE_SLICE, index: int = 0) -> MigDevice:
    """A MIG device of ``base``'s shape served at ``profile_index`` (its own profile id)."""
    shape = dataclasses.replace(
        base,
        profile_index=profile_index,
        profile_id=100 + profile_index,
        media_extensions=profile_index in (0x7, 0x8),
    )
    return mig(shape, index)


@pytest.mark.parametrize(
    ("index", "base", "label_profile"),
    [
        (0x0, ONE_SLICE, "1g.5gb"),
        (0x7, ONE_SLICE, "1g.5gb.me"),
        (0xF, ONE_SLICE, "1g.5gb.me.all"),
        (0xD, ONE_SLICE, "1g.5gb-me"),
        (0xA, ONE_SLICE, "1g.5gb.gfx"),
        (0xC, FOUR_SLICES, "4g.20gb.gfx"),
        # The reference's go-nvlib has no 3_SLICE_GFX case and refuses the profile; gfd names it.
        (0x11, THREE_SLICES, "3g.20gb.gfx"),
    ],
)
def test_profile_names_of_every_variant(index: int, base: Shape, label_profile: str) -> None:
    assert profile_name(variant(index, base), A100_MEMORY) == label_profile


def test_mixed_strategy_keys_for_variants() -> None:
    gpu = a100(
        0,
        variant(0x0, index=0),
        variant(0x7, index=1),
        variant(0xF, index=2),
        variant(0xD, index=3),
    )
    labels = build_labels(make_facts([gpu]), LabelOptions(mig_strategy="mixed")).labels
    for profile in ("1g.5gb", "1g.5gb.me", "1g.5gb.me.all", "1g.5gb-me"):
        assert labels[f"nvidia.com/mig-{profile}.count"] == "1"
        assert labels[f"nvidia.com/mig-{profile}.product"].endswith(f"-MIG-{profile}")


def test_single_strategy_product_for_a_variant() -> None:
    gpu = a100(0, variant(0xD, index=0), variant(0xD, index=1))
    labels = build_labels(make_facts([gpu]), LabelOptions(mig_strategy="single")).labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-me"
    assert labels["nvidia.com/gpu.count"] == "2"


@pytest.mark.parametrize("index", [0x7, 0xA, 0xD, 0xF, 0x10, 0x11])
def test_variants_round_trip_through_the_simulator(index: int) -> None:
    base = FOUR_SLICES if index == 0xC else THREE_SLICES if index == 0x11 else ONE_SLICE
    facts = make_facts([a100(0, variant(index, base))])
    assert read_simulated(facts) == facts


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"gi_profile_index": 0x12}, "gi_profile_index", "is not an NVML_GPU_INSTANCE_PROFILE_"),
        ({"gi_profile_index": 0x7, "media_extensions": False}, "media_extensions", "must be True"),
        ({"gi_profile_index": 0xF, "media_extensions": True}, "media_extensions", "must be False"),
    ],
)
def test_inconsistent_variant_facts_are_refused(
    change: dict[str, object], field: str, problem: str
) -> None:
    plain = facts_to_dict(make_facts([a100(0, mig(ONE_SLICE))]))
    plain["gpus"][0]["mig_devices"][0].update(change)
    with pytest.raises(FactsError, match=problem) as raised:
        facts_from_dict(plain, "node.yaml")
    assert f"node.yaml: gpus[0].mig_devices[0].{field}" in str(raised.value)


def test_an_index_given_to_two_profiles_is_refused() -> None:
    first, second = variant(0xF, index=0), variant(0xF, index=1)
    second = dataclasses.replace(second, gi_profile_id=999)
    facts = make_facts([a100(0, first, second)])
    with pytest.raises(FactsError, match="NVML reports one profile per index"), simulate(facts):
        pass
