"""Labels: pure functions from facts (and options) to a validated ``dict[str, str]``.

This package owns the label map. Every label family is one :class:`~gfd.labels.labeler.Labeler`
in :data:`LABELERS`, merged in this fixed, documented order (later wins on a shared key):

1. timestamp, 2. driver and CUDA versions, 3. machine, 4. full-GPU product
labels (with sharing; in hardware mode without it), 5. GPU mode, 6. MIG capability,
7. MIG strategy (overrides ``gpu.*`` under ``single``; in hardware mode the MIG layout
instead), 8. MPS capability, 9. per-model counts on nodes with several models, 10. vGPU,
11. fabric clique, 12. PCIe link, 13. topology, 14. health.

A node without GPUs gets only the families that apply without GPUs (1, 10 and 14);
that is a property of each labeler, not a separate path. So is the label mode
(``--label-mode``, :attr:`~gfd.labels.labeler.LabelOptions.mode`): each labeler names
the modes it is published in, ``device-plugin`` (today's set, the reference's) and
``hardware`` (only facts of the hardware and driver, for nodes whose GPUs NVIDIA's DRA
driver hands out: no replicas, sharing strategy, MIG strategy or MPS capability, no
suffix on the product, and the MIG layout as facts). The topology and health
families are computed by the agent (:mod:`gfd.agent`) and reach their labelers through
:class:`~gfd.labels.labeler.CycleInputs`. :func:`compose` is the one place the
families are merged and validated.

Sharing with MPS on a node with a MIG-enabled GPU raises
:class:`gfd.base.errors.ConfigError`: the reference refuses that configuration too.

Every key and value is checked against Kubernetes' label rules before it leaves
this layer; an invalid one is dropped and reported, never emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field, replace

from gfd.base.frozen import frozen_dataclass
from gfd.facts import NodeFacts
from gfd.labels.core import (
    GPU_MODE_LABELER,
    HARDWARE_PRODUCT_LABELER,
    MACHINE_LABELER,
    MIG_CAPABLE_LABELER,
    PRODUCT_LABELER,
    TIMESTAMP_LABELER,
    VERSIONS_LABELER,
)
from gfd.labels.fabric import FABRIC_LABELER
from gfd.labels.health import HEALTH_LABELER
from gfd.labels.labeler import CYCLE_LABEL_MODES, CycleInputs, Labeler, LabelOptions
from gfd.labels.mig import MIG_STRATEGY_LABELER
from gfd.labels.mig_layout import MIG_LAYOUT_LABELER
from gfd.labels.models import MODELS_LABELER
from gfd.labels.pcie import PCIE_LABELER
from gfd.labels.rules import key_problem, value_problem
from gfd.labels.sharing import MPS_LABELER
from gfd.labels.topology import TOPOLOGY_LABELER
from gfd.labels.vgpu import VGPU_LABELER

__all__ = [
    "LABELERS",
    "CycleInputs",
    "LabelOptions",
    "LabelSet",
    "Labeler",
    "Labels",
    "build_labels",
    "compose",
    "merge",
    "validated",
]

#: Every label family, in the documented order (a later one wins on a shared key).
LABELERS: tuple[Labeler, ...] = (
    TIMESTAMP_LABELER,
    VERSIONS_LABELER,
    MACHINE_LABELER,
    PRODUCT_LABELER,
    HARDWARE_PRODUCT_LABELER,
    GPU_MODE_LABELER,
    MIG_CAPABLE_LABELER,
    MIG_STRATEGY_LABELER,
    MIG_LAYOUT_LABELER,
    MPS_LABELER,
    MODELS_LABELER,
    VGPU_LABELER,
    FABRIC_LABELER,
    PCIE_LABELER,
    TOPOLOGY_LABELER,
    HEALTH_LABELER,
)

Labels = dict[str, str]


@frozen_dataclass
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


def compose(inputs: CycleInputs, labelers: Sequence[Labeler] = LABELERS) -> LabelSet:
    """The labels of one cycle: every labeler that applies, merged in order, validated once.

    A node without GPUs (NVML reports none, or NVML is down under
    ``--fail-on-init-error=false``) gets only the labelers that apply without GPUs: no
    ``cuda.*`` or ``gpu.machine``, as the reference does. Only the labelers of the
    cycle's label mode run (:attr:`~gfd.labels.labeler.LabelOptions.mode`).
    """
    mode = inputs.options.mode
    if mode not in CYCLE_LABEL_MODES:
        raise ValueError(
            f"label mode {mode!r} is not decided (expected one of: {', '.join(CYCLE_LABEL_MODES)})"
        )
    applying = [
        labeler
        for labeler in labelers
        if mode in labeler.modes and (inputs.facts.gpus or labeler.applies_without_gpus)
    ]
    parts: list[Mapping[str, str]] = []
    withheld: list[tuple[str, str]] = []
    for labeler in applying:
        try:
            parts.append(labeler.labels(inputs))
            withheld.extend(labeler.withheld(inputs))
        except Exception as exc:
            # The agent logs the traceback of a failed cycle: say which family it came from.
            exc.add_note(f"in the {labeler.name} labeler")
            raise
    return replace(validated(merge(parts)), withheld=tuple(withheld))


def build_labels(facts: NodeFacts, options: LabelOptions) -> LabelSet:
    """The labels of ``facts`` alone: no topology and no health verdict (see :func:`compose`)."""
    return compose(CycleInputs(facts, options))
