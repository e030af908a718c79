"""Every label gfd produces, in every label mode, lies in the families the node sink may
delete (and no other)."""

from __future__ import annotations

import itertools

import pytest

from gfd.agent import compute_labels
from gfd.base.errors import ConfigError
from gfd.config import SharedResource, Sharing
from gfd.labels import LabelOptions
from gfd.labels.families import gfd_can_produce
from gfd.sim import BUNDLED_PROFILES, load_profile

SHARINGS = (
    None,
    Sharing("time-slicing", resources=(SharedResource("nvidia.com/gpu", 4),)),
    Sharing("mps", resources=(SharedResource("nvidia.com/gpu", 2),)),
)


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_every_label_of_every_bundled_machine_is_in_a_gfd_family(profile: str) -> None:
    facts = load_profile(profile).facts
    seen: set[str] = set()
    for strategy, sharing, mode in itertools.product(
        ("none", "single", "mixed"), SHARINGS, ("device-plugin", "hardware")
    ):
        options = LabelOptions(timestamp=1, mig_strategy=strategy, sharing=sharing, mode=mode)
        try:
            label_set, _ = compute_labels(facts, options)
        except ConfigError:
            continue  # MPS on a MIG-enabled GPU is refused, as in the reference
        seen.update(label_set.labels)
    assert seen, "the machine gave no labels at all"
    assert sorted(key for key in seen if not gfd_can_produce(key)) == []
