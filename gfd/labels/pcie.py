"""``gpu.pcie.generation`` and ``gpu.pcie.width``: what the GPUs' PCIe links could reach.

This module owns the PCIe link labels. Each is the node's lowest across its GPUs of what
the link could reach (:attr:`gfd.facts.PcieLink.reachable_generation` and
``reachable_width``: NVML's maximum "possible with this device and system", the lower of
the GPU's and its slot's), not the current link, so the labels stay put while a link
idles at a lower generation; a link trained below its reach is the ``pcie`` health
check's to report. A label is published only where every GPU answers it: a lowest over
some GPUs could name a link better than the node's worst. A GPU that does not answer has
said NOT_SUPPORTED (any other failure fails the read), so nothing was left unread and no
label is reported withheld (withheld means "run gfd with what it lacks", which would not
help here); the ``pcie`` health check says it cannot decide for such a GPU. GPUs attached
to their CPU over NVLink-C2C (Grace) have no PCIe host link worth a label, so a node with
one gets neither.
"""

from __future__ import annotations

from gfd.facts import Gpu, NodeFacts
from gfd.labels.families import GFD_NAMESPACE
from gfd.labels.labeler import FamilyLabeler

GENERATION_KEY = f"{GFD_NAMESPACE}gpu.pcie.generation"
WIDTH_KEY = f"{GFD_NAMESPACE}gpu.pcie.width"
#: Each label and what it is the lowest of.
_REACH = {GENERATION_KEY: "reachable_generation", WIDTH_KEY: "reachable_width"}


def _reach(gpu: Gpu, key: str) -> int | None:
    return getattr(gpu.pcie, _REACH[key]) if gpu.pcie is not None else None


def _applies(facts: NodeFacts) -> bool:
    return not any(gpu.coherently_attached for gpu in facts.gpus)


def pcie_labels(facts: NodeFacts) -> dict[str, str]:
    """The lowest generation and width the node's GPUs' links could reach, each where every
    GPU answers it."""
    if not facts.gpus or not _applies(facts):
        return {}
    labels = {}
    for key in _REACH:
        reach = [_reach(gpu, key) for gpu in facts.gpus]
        if all(value is not None for value in reach):
            labels[key] = str(min(value for value in reach if value is not None))
    return labels


PCIE_LABELER = FamilyLabeler(
    "PCIe link",
    lambda inputs: pcie_labels(inputs.facts),
)
