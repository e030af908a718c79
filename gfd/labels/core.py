"""The GFD-compatible core labelers: versions, product, machine, GPU mode, MIG capability.

Each labeler is a pure function from facts (and options) to a label map with
the reference's keys and values (``reference/GFD-COMPAT.md``). The product has two:
the device plugin's view (with sharing: replicas, strategy, ``-SHARED``) and, for
``--label-mode hardware``, the same model facts without it. Values built from
free text go through :func:`gfd.labels.rules.sanitise_value`, products through
:func:`gfd.labels.rules.product_value`. The ``*_LABELER`` objects at the end are
those functions as entries of :data:`gfd.labels.LABELERS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gfd.facts import Gpu, NodeFacts
from gfd.labels.families import GFD_NAMESPACE as PREFIX
from gfd.labels.labeler import DEVICE_PLUGIN_ONLY, HARDWARE_ONLY, FamilyLabeler
from gfd.labels.rules import product_value, sanitise_value
from gfd.labels.sharing import (
    FULL_GPU_RESOURCE,
    MIG_ENABLED_FULL_GPU,
    Replication,
    replication_for,
)

if TYPE_CHECKING:
    from gfd.config import Sharing

#: Also the node annotation's key when the node sink carries the timestamp there.
TIMESTAMP_KEY = f"{PREFIX}gfd.timestamp"
MIB = 1 << 20

PCI_CLASS_MODES = {0x030000: "graphics", 0x030200: "compute"}


def timestamp_labels(timestamp: int | None) -> dict[str, str]:
    """``gfd.timestamp``: taken once per process start, so it does not churn every cycle."""
    return {} if timestamp is None else {TIMESTAMP_KEY: str(timestamp)}


#: The driver version forms the reference accepts: ``X.Y`` or ``X.Y.Z``.
DRIVER_VERSION_PARTS = (2, 3)
DRIVER_VERSION_KEYS = tuple(
    f"{PREFIX}{key}"
    for key in (
        "cuda.driver-version.major",
        "cuda.driver-version.minor",
        "cuda.driver-version.revision",
        "cuda.driver-version.full",
        "cuda.driver.major",
        "cuda.driver.minor",
        "cuda.driver.rev",
    )
)


def driver_version_problem(version: str | None) -> str | None:
    """Why ``version`` cannot be split into major, minor and revision, or None when it can.

    As the reference: only ``X.Y`` and ``X.Y.Z`` split (``550.54.15.1`` would lose its
    fourth part in ``revision``; ``550`` has no minor).
    """
    if not version:
        return None
    if len(version.split(".")) not in DRIVER_VERSION_PARTS:
        return f"driver version {version!r} does not match the format X.Y[.Z]"
    return None


def driver_version_labels(facts: NodeFacts) -> dict[str, str]:
    """``cuda.driver-version.*`` and the deprecated ``cuda.driver.*`` twins.

    Nothing for a version that is not ``X.Y[.Z]`` (see :func:`withheld_driver_labels`):
    the reference then fails the whole node, gfd leaves out only these labels.
    """
    if not facts.driver_version or driver_version_problem(facts.driver_version) is not None:
        return {}
    parts = facts.driver_version.split(".")
    major, minor = parts[0], parts[1]
    revision = parts[2] if len(parts) > 2 else ""
    return {
        f"{PREFIX}cuda.driver-version.major": major,
        f"{PREFIX}cuda.driver-version.minor": minor,
        f"{PREFIX}cuda.driver-version.revision": revision,
        f"{PREFIX}cuda.driver-version.full": facts.driver_version,
        f"{PREFIX}cuda.driver.major": major,
        f"{PREFIX}cuda.driver.minor": minor,
        f"{PREFIX}cuda.driver.rev": revision,
    }


def withheld_driver_labels(facts: NodeFacts) -> tuple[tuple[str, str], ...]:
    """The driver version labels left out, with why, when the version is not ``X.Y[.Z]``."""
    problem = driver_version_problem(facts.driver_version) if facts.gpus else None
    return () if problem is None else tuple((key, problem) for key in DRIVER_VERSION_KEYS)


def cuda_runtime_labels(facts: NodeFacts) -> dict[str, str]:
    """``cuda.runtime-version.*`` from the CUDA driver API version (12040 → 12.4)."""
    version = facts.cuda_driver_version
    if version is None:
        return {}
    major, minor = version // 1000, (version % 1000) // 10
    return {
        f"{PREFIX}cuda.runtime-version.major": str(major),
        f"{PREFIX}cuda.runtime-version.minor": str(minor),
        f"{PREFIX}cuda.runtime-version.full": f"{major}.{minor}",
        f"{PREFIX}cuda.runtime.major": str(major),
        f"{PREFIX}cuda.runtime.minor": str(minor),
    }


def machine_labels(facts: NodeFacts) -> dict[str, str]:
    """``gpu.machine``: the DMI product name, sanitised; ``unknown`` when unreadable."""
    machine = sanitise_value(facts.machine_type) if facts.machine_type is not None else ""
    return {f"{PREFIX}gpu.machine": machine or "unknown"}


def gpu_family(major: int, minor: int) -> str:
    """The reference's architecture family name for a CUDA compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def models_by_count(gpus: Sequence[Gpu]) -> list[list[Gpu]]:
    """GPUs grouped by model name, the labelled model first.

    The reference labels a node with several models from whichever labeler ran
    last, which flaps between cycles. gfd orders models deterministically: most
    GPUs first, ties broken by the lowest GPU index.
    """
    groups: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        groups.setdefault(gpu.name, []).append(gpu)
    return sorted(groups.values(), key=lambda group: (-len(group), group[0].index))


def full_gpu_replication(gpus: Sequence[Gpu], sharing: Sharing | None) -> Replication:
    """How the full GPUs of one model are handed out.

    MIG-enabled GPUs labelled as full GPUs cannot be handed out whole (replicas 0, no
    sharing); as in the reference, one MIG-disabled GPU of the model is enough for the
    configured sharing (replicas 1 without sharing).
    """
    if all(g.mig_mode_current for g in gpus):
        return MIG_ENABLED_FULL_GPU
    return replication_for(sharing, FULL_GPU_RESOURCE)


def gpu_model_labels(gpus: Sequence[Gpu]) -> dict[str, str]:
    """What one model's GPUs are, whoever hands them out: ``gpu.product`` (the sanitised
    NVML name, no suffix), ``gpu.count``, ``gpu.memory``, ``gpu.compute.*``, ``gpu.family``."""
    first = gpus[0]
    labels = {
        f"{PREFIX}gpu.product": product_value(first.name),
        f"{PREFIX}gpu.count": str(len(gpus)),
    }
    if first.memory_total_bytes:
        labels[f"{PREFIX}gpu.memory"] = str(first.memory_total_bytes // MIB)
    if first.compute_major:
        minor = first.compute_minor or 0
        labels[f"{PREFIX}gpu.compute.major"] = str(first.compute_major)
        labels[f"{PREFIX}gpu.compute.minor"] = str(minor)
        labels[f"{PREFIX}gpu.family"] = gpu_family(first.compute_major, minor)
    return labels


def full_gpu_labels(gpus: Sequence[Gpu], sharing: Sharing | None = None) -> dict[str, str]:
    """The device plugin's view of one model's full GPUs: :func:`gpu_model_labels` with
    ``gpu.replicas`` and ``gpu.sharing-strategy``, and ``-SHARED`` on a shared product."""
    replication = full_gpu_replication(gpus, sharing)
    return {
        **gpu_model_labels(gpus),
        f"{PREFIX}gpu.product": replication.product(gpus[0].name),
        f"{PREFIX}gpu.replicas": str(replication.replicas),
        f"{PREFIX}gpu.sharing-strategy": replication.strategy,
    }


def product_labels(facts: NodeFacts, sharing: Sharing | None = None) -> dict[str, str]:
    """Full-GPU labels of the node's labelled model (see :func:`models_by_count`)."""
    groups = models_by_count(facts.gpus)
    return full_gpu_labels(groups[0], sharing) if groups else {}


def hardware_product_labels(facts: NodeFacts) -> dict[str, str]:
    """The labelled model's :func:`gpu_model_labels`: the product labels of hardware mode."""
    groups = models_by_count(facts.gpus)
    return gpu_model_labels(groups[0]) if groups else {}


def gpu_mode_labels(facts: NodeFacts) -> dict[str, str]:
    """``gpu.mode`` from the PCI class: graphics, compute, or unknown when mixed or unreadable."""
    if not facts.gpus:
        return {}
    modes = {
        PCI_CLASS_MODES.get(g.pci_class, "unknown") if g.pci_class is not None else "unknown"
        for g in facts.gpus
    }
    return {f"{PREFIX}gpu.mode": modes.pop() if len(modes) == 1 else "unknown"}


def mig_capable_labels(facts: NodeFacts) -> dict[str, str]:
    """``mig.capable``: true when any GPU answers the MIG mode query."""
    if not facts.gpus:
        return {}
    capable = any(g.mig_mode_current is not None for g in facts.gpus)
    return {f"{PREFIX}mig.capable": "true" if capable else "false"}


TIMESTAMP_LABELER = FamilyLabeler(
    "timestamp",
    lambda inputs: timestamp_labels(inputs.options.timestamp),
    applies_without_gpus=True,
)
VERSIONS_LABELER = FamilyLabeler(
    "driver and CUDA versions",
    lambda inputs: {**driver_version_labels(inputs.facts), **cuda_runtime_labels(inputs.facts)},
    report_withheld=lambda inputs: withheld_driver_labels(inputs.facts),
)
MACHINE_LABELER = FamilyLabeler("machine", lambda inputs: machine_labels(inputs.facts))
PRODUCT_LABELER = FamilyLabeler(
    "product",
    lambda inputs: product_labels(inputs.facts, inputs.options.sharing),
    modes=DEVICE_PLUGIN_ONLY,
)
#: The product in hardware mode: the same keys, less the device plugin's sharing.
HARDWARE_PRODUCT_LABELER = FamilyLabeler(
    "product (hardware)",
    lambda inputs: hardware_product_labels(inputs.facts),
    modes=HARDWARE_ONLY,
)
GPU_MODE_LABELER = FamilyLabeler("GPU mode", lambda inputs: gpu_mode_labels(inputs.facts))
MIG_CAPABLE_LABELER = FamilyLabeler(
    "MIG capability", lambda inputs: mig_capable_labels(inputs.facts)
)
