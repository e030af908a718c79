"""What a labeler is: the inputs of one cycle, and the protocol every label family follows.

This module owns the shape shared by all label families: :class:`CycleInputs` (everything
one cycle's labels may depend on, frozen, the label mode among them), the :class:`Labeler`
protocol (a name, whether it applies to a node without GPUs, the label modes it publishes
in, its labels and the labels it had to withhold) and :class:`FamilyLabeler`, the one
implementation the families need. It imports no family,
so every family module may import it; :mod:`gfd.labels` lists the labelers in order and
composes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from gfd.base.frozen import frozen_dataclass
from gfd.config.values import LABEL_MODE_DEVICE_PLUGIN, LABEL_MODE_HARDWARE
from gfd.facts import NodeFacts

if TYPE_CHECKING:
    from gfd.config import Sharing

#: (key, why) pairs: labels a family could not produce because their facts were unreadable.
Withheld = tuple[tuple[str, str], ...]
#: An empty, read-only label map: the default for a family that contributed nothing.
NO_LABELS: Mapping[str, str] = MappingProxyType({})

#: The label modes a cycle's labels are computed in. ``auto`` is not one of them: the
#: assembly decides it each cycle (:mod:`gfd.app.label_mode`) and hands down the result.
CYCLE_LABEL_MODES = (LABEL_MODE_DEVICE_PLUGIN, LABEL_MODE_HARDWARE)
#: A family that describes the hardware and driver alone: published in every mode.
EVERY_MODE = frozenset(CYCLE_LABEL_MODES)
#: A family whose meaning depends on how the device plugin shares or partitions the GPUs.
DEVICE_PLUGIN_ONLY = frozenset({LABEL_MODE_DEVICE_PLUGIN})
#: A family that stands, in hardware mode, for what the device plugin's view says otherwise.
HARDWARE_ONLY = frozenset({LABEL_MODE_HARDWARE})


@frozen_dataclass
class LabelOptions:
    """What besides the facts shapes the labels."""

    #: Unix seconds taken once per process start, or None for ``--no-timestamp``.
    timestamp: int | None = None
    #: ``--mig-strategy``: none, single or mixed.
    mig_strategy: str = "none"
    #: The config file's ``sharing`` section; None when nothing is shared.
    sharing: Sharing | None = None
    #: ``--label-mode`` as decided for this cycle: device-plugin or hardware
    #: (:data:`CYCLE_LABEL_MODES`).
    mode: str = LABEL_MODE_DEVICE_PLUGIN


@frozen_dataclass
class CycleInputs:
    """Everything the labels of one cycle are computed from.

    The topology and health families are computed by the agent, which owns their side
    effects (the C builder's failure is withheld and counted; the health checks read the
    Node and write a condition): their labelers receive the finished labels here.
    """

    facts: NodeFacts
    options: LabelOptions = field(default_factory=LabelOptions)
    #: The labels of the topology the agent built this cycle (empty when it was withheld).
    topology_labels: Mapping[str, str] = field(default_factory=dict)
    #: The labels of the health checks' verdict this cycle (empty when the label is off).
    health_labels: Mapping[str, str] = field(default_factory=dict)


class Labeler(Protocol):
    """One label family, as the composition in :mod:`gfd.labels` drives it."""

    @property
    def name(self) -> str:
        """The family, for the documented order and for a traceback from inside it."""
        ...

    @property
    def applies_without_gpus(self) -> bool:
        """Whether a node without GPUs (or with NVML down) gets this family at all."""
        ...

    @property
    def modes(self) -> frozenset[str]:
        """The label modes (:data:`CYCLE_LABEL_MODES`) in which this family is published."""
        ...

    def labels(self, inputs: CycleInputs) -> Mapping[str, str]:
        """The family's labels for this cycle (not yet validated)."""
        ...

    def withheld(self, inputs: CycleInputs) -> Withheld:
        """(key, why) for the family's labels left out because their facts were unreadable."""
        ...


def nothing_withheld(_inputs: CycleInputs) -> Withheld:
    """The withheld report of a family whose labels never depend on unreadable facts."""
    return ()


@frozen_dataclass
class FamilyLabeler:
    """A :class:`Labeler` made of functions of the cycle's inputs."""

    name: str
    produce: Callable[[CycleInputs], Mapping[str, str]]
    applies_without_gpus: bool = False
    report_withheld: Callable[[CycleInputs], Withheld] = nothing_withheld
    modes: frozenset[str] = EVERY_MODE

    def labels(self, inputs: CycleInputs) -> Mapping[str, str]:
        return self.produce(inputs)

    def withheld(self, inputs: CycleInputs) -> Withheld:
        return self.report_withheld(inputs)
