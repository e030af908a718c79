"""``gpu.health``: the health checks' verdict as a label, in the composition's order.

This module owns where the health label enters the label map: last, so it wins on a
shared key, and validated like every other label. The verdict itself is decided by
:mod:`gfd.health` (a layer above the labels: it reads the Node and writes a condition),
which the agent asks every cycle and hands over in :class:`~gfd.labels.labeler.CycleInputs`.
A node without GPUs keeps the label: losing every GPU is what the checks report.
"""

from __future__ import annotations

from gfd.labels.labeler import FamilyLabeler

HEALTH_LABELER = FamilyLabeler(
    "health", lambda inputs: inputs.health_labels, applies_without_gpus=True
)
