"""Labels: pure functions from facts (and options) to a validated ``dict[str, str]``.

This package owns the label map. Small labelers, one per concern, are merged in a
fixed, documented order (later wins on a shared key):

1. timestamp, 2. driver and CUDA versions, 3. machine, 4. full-GPU product
labels (with sharing), 5. GPU mode, 6. MIG capability, 7. MIG strategy (overrides
``gpu.*`` under ``single``), 8. MPS capability, 9. per-model counts on nodes with
several models, 10. vGPU, 11. fabric clique, 12. topology. A node without GPUs gets only 1 and 10.

Sharing with MPS on a node with a MIG-enabled GPU raises
:class:`gfd.errors.ConfigError`: the reference refuses that configuration too.

Every key and value is checked against Kubernetes' label rules before it leaves
this layer; an invalid one is dropped and reported, never emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gfd.config import Sharing
from gfd.facts import NodeFacts
from gfd.labels import core
from gfd.labels.fabric import fabric_labels
from gfd.labels.mig import mig_labels
from gfd.labels.models import model_labels
from gfd.labels.rules import key_problem, value_problem
from gfd.labels.sharing import mps_labels
from gfd.labels.vgpu import vgpu_labels, withheld_vgpu_labels

Labels = dict[str, str]


@dataclass(frozen=True)
class LabelOptions:
    """What besides the facts shapes the labels."""

    #: Unix seconds taken once per process start, or None for ``--no-timestamp``.
    timestamp: int | None = None
    #: ``--mig-strategy``: none, single or mixed.
    mig_strategy: str = "none"
    #: The config file's ``sharing`` section; None when nothing is shared.
    sharing: Sharing | None = None


@dataclass(frozen=True)
class LabelSet:
    """The validated labels of one cycle, and what was dropped on the way (key, why).

    ``withheld`` lists labels that were not produced because their facts could not be
    read (key, why), e.g. vGPU labels in an unprivileged pod: worth one log line, not
    an error.
    """

    labels: Mapping[str, str]
    dropped: tuple[tuple[str, str], ...] = field(default=())
    withheld: tuple[tuple[str, str], ...] = field(default=())


def merge(parts: Iterable[Mapping[str, str]]) -> Labels:
    """Merge label maps in order; a later map wins on a shared key."""
    merged: Labels = {}
    for part in parts:
        merged.update(part)
    return merged


def validated(labels: Mapping[str, str]) -> LabelSet:
    """Keep only valid labels, sorted by key; report what was dropped and why."""
    kept: Labels = {}
    dropped: list[tuple[str, str]] = []
    for key in sorted(labels):
        value = labels[key]
        problem = key_problem(key)
        if problem is None:
            problem = value_problem(value)
            if problem is not None:
                problem = f"value {value!r}: {problem}"
        else:
            problem = f"key: {problem}"
        if problem is None:
            kept[key] = value
        else:
            dropped.append((key, problem))
    return LabelSet(labels=kept, dropped=tuple(dropped))


def build_labels(
    facts: NodeFacts,
    options: LabelOptions,
    *,
    extra: Iterable[Callable[[NodeFacts], Mapping[str, str]]] = (),
) -> LabelSet:
    """All labels for ``facts``: the core labelers in order, then ``extra`` labelers.

    A node without GPUs (NVML reports none, or NVML is down under
    ``--fail-on-init-error=false``) gets no GPU labels at all, not even ``cuda.*`` or
    ``gpu.machine``: only the timestamp and the vGPU labels, as the reference does.
    """
    if not facts.gpus:
        parts: list[Mapping[str, str]] = [
            core.timestamp_labels(options.timestamp),
            vgpu_labels(facts),
        ]
        return replace(validated(merge(parts)), withheld=withheld_vgpu_labels(facts))
    parts = [
        core.timestamp_labels(options.timestamp),
        core.driver_version_labels(facts),
        core.cuda_runtime_labels(facts),
        core.machine_labels(facts),
        core.product_labels(facts, options.sharing),
        core.gpu_mode_labels(facts),
        core.mig_capable_labels(facts),
        mig_labels(facts, options.mig_strategy, options.sharing),
        mps_labels(facts, options.sharing),
        model_labels(facts),
        vgpu_labels(facts),
        fabric_labels(facts),
    ]
    parts.extend(labeler(facts) for labeler in extra)
    label_set = validated(merge(parts))
    withheld = core.withheld_driver_labels(facts) + withheld_vgpu_labels(facts)
    return replace(label_set, withheld=withheld)
