"""MIG labels under ``--mig-strategy none|single|mixed``.

This module owns how MIG devices become labels, as the reference does:

* ``none``: no MIG labels here (the full-GPU labels describe MIG-enabled GPUs with
  replicas 0).
* ``single``: every MIG-enabled GPU is split into one and the same profile; the
  ``gpu.*`` keys then describe the MIG devices: ``gpu.product=<model>-MIG-<profile>``,
  ``gpu.count`` the number of MIG devices, ``gpu.memory`` the profile's memory, plus
  ``gpu.multiprocessors``, ``gpu.slices.{gi,ci}`` and ``gpu.engines.*``. Any other
  layout (a MIG-enabled GPU without MIG devices, MIG-enabled next to MIG-disabled GPUs,
  more than one profile) is labelled ``<model>-MIG-INVALID`` with count, replicas and
  memory 0 and an empty sharing strategy.
* ``mixed``: one ``mig-<profile>.*`` family per profile; the ``gpu.*`` keys keep
  describing the full GPUs.

The profile string is ``<G>g.<GB>gb`` (``<C>c.<G>g.<GB>gb`` when the compute instance
has fewer slices than its GPU instance), then the profile's variant with ``+`` made
``.`` as the reference does (``.me``, ``.me.all``, ``.gfx``, ``-me``); ``GB``
is the reference's rounding of the GPU instance's memory to a share of the GPU
(:func:`profile_memory_gb`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gfd.base.frozen import frozen_dataclass
from gfd.facts import GI_PROFILE_VARIANTS, Gpu, MigDevice, NodeFacts
from gfd.labels.labeler import DEVICE_PLUGIN_ONLY, FamilyLabeler
from gfd.labels.rules import product_value
from gfd.labels.sharing import FULL_GPU_RESOURCE, Replication, replication_for

if TYPE_CHECKING:
    from gfd.config import Sharing

MIG_STRATEGY_KEY = "nvidia.com/mig.strategy"
MIG_STRATEGIES = ("none", "single", "mixed")
MIB = 1 << 20
GIB = 1 << 30
#: The reference rounds a MIG device's share of GPU memory up to eighths.
MEMORY_FRACTION_DENOMINATOR = 8


def profile_memory_gb(gi_memory_mib: int, gpu_memory_bytes: int | None) -> int:
    """The ``<GB>`` of a profile string, computed in float64 exactly as the reference does.

    The GPU instance's share of the GPU's memory is rounded up to eighths and applied
    to the GPU's memory in whole GiB (rounded up), then rounded half away from zero:
    A100 40GB 1g (4864 MiB of 40960) → 5, H200 1g (16384 of 143771 MiB) → 18. Without
    the GPU's memory, the instance memory in GiB is rounded instead.
    """
    if not gpu_memory_bytes:
        return _round_half_away(gi_memory_mib / 1024)
    fraction = (float(gi_memory_mib) * MIB) / float(gpu_memory_bytes)
    fraction = math.ceil(fraction * MEMORY_FRACTION_DENOMINATOR) / MEMORY_FRACTION_DENOMINATOR
    gpu_gb = float((gpu_memory_bytes + GIB - 1) // GIB)
    return _round_half_away(fraction * gpu_gb)


def _round_half_away(value: float) -> int:
    floor = math.floor(value)
    return int(floor + 1 if value - floor >= 0.5 else floor)


def profile_variant(mig: MigDevice) -> str:
    """The profile's variant suffix as NVIDIA's tools write it: ``+me``, ``+me.all``, ``-me``, ``+gfx`` or ``""``."""
    if mig.gi_profile_index is None:
        return "+me" if mig.media_extensions else ""
    return GI_PROFILE_VARIANTS.get(mig.gi_profile_index, "")


def profile_name(mig: MigDevice, gpu_memory_bytes: int | None) -> str:
    """The MIG profile as it appears in labels: ``1g.5gb``, ``1c.2g.10gb``, ``1g.10gb.me``.

    ``+`` is not valid in a label key; the reference (and the device plugin's resource
    names) turn it into ``.``: ``1g.12gb+me`` → ``1g.12gb.me``, ``+me.all`` → ``.me.all``,
    ``+gfx`` → ``.gfx``; ``-me`` stays (``4g.71gb-me``).
    """
    gb = profile_memory_gb(mig.gi_memory_mib, gpu_memory_bytes)
    base = f"{mig.gi_slice_count}g.{gb}gb"
    if mig.ci_slice_count != mig.gi_slice_count:
        base = f"{mig.ci_slice_count}c.{base}"
    return (base + profile_variant(mig)).replace("+", ".")


@frozen_dataclass
class MigProfileGroup:
    """The MIG devices of one profile, in GPU then MIG index order."""

    profile: str
    #: The GPU model of the first device (the reference takes the first one it sees).
    model: str
    devices: tuple[MigDevice, ...]


def mig_profile_groups(gpus: Sequence[Gpu]) -> list[MigProfileGroup]:
    """MIG devices of the MIG-enabled GPUs grouped by profile, in order of first appearance."""
    groups: dict[str, tuple[str, list[MigDevice]]] = {}
    for gpu in gpus:
        if not gpu.mig_mode_current:
            continue
        for mig in sorted(gpu.mig_devices, key=lambda m: m.index):
            profile = profile_name(mig, gpu.memory_total_bytes)
            groups.setdefault(profile, (gpu.name, []))[1].append(mig)
    return [
        MigProfileGroup(profile=profile, model=model, devices=tuple(devices))
        for profile, (model, devices) in groups.items()
    ]


def mig_resource_labels(
    resource: str, group: MigProfileGroup, replication: Replication
) -> dict[str, str]:
    """The ``<resource>.*`` labels of one MIG profile: product, count, sharing, attributes."""
    first = group.devices[0]
    values = {
        "product": replication.product(group.model, "MIG", group.profile),
        "count": str(len(group.devices)),
        "replicas": str(replication.replicas),
        "sharing-strategy": replication.strategy,
        "memory": str(first.gi_memory_mib),
        "multiprocessors": str(first.multiprocessors),
        "slices.gi": str(first.gi_slice_count),
        "slices.ci": str(first.ci_slice_count),
        "engines.copy": str(first.copy_engines),
        "engines.decoder": str(first.decoders),
        "engines.encoder": str(first.encoders),
        "engines.jpeg": str(first.jpeg_decoders),
        "engines.ofa": str(first.ofa_engines),
    }
    return {f"{resource}.{suffix}": value for suffix, value in values.items()}


def single_strategy_problem(gpus: Sequence[Gpu], groups: Sequence[MigProfileGroup]) -> str | None:
    """Why the MIG layout cannot be labelled under ``single``, or None when it can."""
    enabled = [g for g in gpus if g.mig_mode_current]
    empty = [g.index for g in enabled if not g.mig_devices]
    if empty:
        return f"MIG is enabled but no MIG devices exist on GPU {', '.join(map(str, empty))}"
    disabled = [g.index for g in gpus if not g.mig_mode_current]
    if disabled:
        return f"MIG is enabled on some GPUs and disabled on GPU {', '.join(map(str, disabled))}"
    if len(groups) != 1:
        return f"more than one MIG profile is in use ({', '.join(g.profile for g in groups)})"
    return None


def invalid_single_labels(model: str) -> dict[str, str]:
    """What the reference publishes for a layout the single strategy cannot describe."""
    return {
        f"{FULL_GPU_RESOURCE}.product": product_value(model, ("MIG", "INVALID")),
        f"{FULL_GPU_RESOURCE}.count": "0",
        f"{FULL_GPU_RESOURCE}.replicas": "0",
        f"{FULL_GPU_RESOURCE}.sharing-strategy": "",
        f"{FULL_GPU_RESOURCE}.memory": "0",
    }


def mig_labels(facts: NodeFacts, strategy: str, sharing: Sharing | None = None) -> dict[str, str]:
    """``mig.strategy`` and the MIG device labels of ``strategy`` (merged after the full GPUs)."""
    if strategy not in MIG_STRATEGIES:
        raise ValueError(
            f"unknown MIG strategy {strategy!r} (expected one of: {', '.join(MIG_STRATEGIES)})"
        )
    if strategy == "none" or not facts.gpus:
        return {}
    labels = {MIG_STRATEGY_KEY: strategy}
    groups = mig_profile_groups(facts.gpus)
    if strategy == "mixed":
        for group in groups:
            resource = f"nvidia.com/mig-{group.profile}"
            labels.update(mig_resource_labels(resource, group, replication_for(sharing, resource)))
        return labels
    enabled = [g for g in facts.gpus if g.mig_mode_current]
    if not enabled:
        return labels
    if single_strategy_problem(facts.gpus, groups) is not None:
        labels.update(invalid_single_labels(enabled[0].name))
        return labels
    replication = replication_for(sharing, FULL_GPU_RESOURCE)
    labels.update(mig_resource_labels(FULL_GPU_RESOURCE, groups[0], replication))
    return labels


#: The device plugin's MIG resources: their names, counts and sharing are its view.
MIG_STRATEGY_LABELER = FamilyLabeler(
    "MIG strategy",
    lambda inputs: mig_labels(inputs.facts, inputs.options.mig_strategy, inputs.options.sharing),
    modes=DEVICE_PLUGIN_ONLY,
)
