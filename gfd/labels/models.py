"""Nodes with more than one GPU model: the keys that describe every model.

The reference labels such a node from whichever per-model labeler ran last, so
``gpu.product`` and ``gpu.count`` flap between cycles. gfd's ``gpu.*`` keys describe
one model, chosen deterministically (:func:`gfd.labels.core.models_by_count`: most
GPUs, ties to the lowest GPU index). This module adds, on such nodes only,
``gpu.heterogeneous=true`` and ``gpu.count.<product>=<n>`` for every model, so
selectors can still find every model a node has.
"""

from __future__ import annotations

from gfd.facts import NodeFacts
from gfd.labels.core import models_by_count
from gfd.labels.families import GFD_NAMESPACE
from gfd.labels.labeler import FamilyLabeler
from gfd.labels.rules import MAX_NAME_LENGTH, product_value

HETEROGENEOUS_KEY = "nvidia.com/gpu.heterogeneous"
MODEL_COUNT_PREFIX = f"{GFD_NAMESPACE}gpu.count."
MODEL_COUNT_NAME_ROOM = MAX_NAME_LENGTH - len(MODEL_COUNT_PREFIX.partition("/")[2])


def model_labels(facts: NodeFacts) -> dict[str, str]:
    """Per-model counts and the heterogeneity marker; nothing on a single-model node."""
    groups = models_by_count(facts.gpus)
    if len(groups) < 2:
        return {}
    labels = {HETEROGENEOUS_KEY: "true"}
    for group in groups:
        # The key's name part (after the prefix's '/') has 63 characters at most.
        product = product_value(group[0].name, max_length=MODEL_COUNT_NAME_ROOM)
        key = f"{MODEL_COUNT_PREFIX}{product}"
        # Two names that sanitise alike (they differ only in dropped characters) add up.
        labels[key] = str(int(labels.get(key, "0")) + len(group))
    return labels


MODELS_LABELER = FamilyLabeler("per-model counts", lambda inputs: model_labels(inputs.facts))
