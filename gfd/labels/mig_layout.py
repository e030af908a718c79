"""The MIG layout as facts, for ``--label-mode hardware``: which GPUs have MIG on, which
MIG profiles exist.

This module owns the labels that describe MIG on a node whose GPUs no device plugin
partitions: NVIDIA's DRA driver hands out MIG devices (and, with its dynamic MIG, creates
them when a claim asks), so the device plugin's view (``mig.strategy``, its
``nvidia.com/gpu`` or ``mig-<profile>`` resources, their replicas) says nothing true there.
What stays true is the hardware's state, named as the DRA driver names it:

* ``mig.enabled.count``: how many GPUs have MIG mode on now (the driver's ``migEnabled``),
  on a node where some GPU supports MIG (``mig.capable=true``, published in every mode);
  ``0`` when none has it on;
* ``mig.profile.<profile>.count``: the MIG devices of each profile that exist now, the
  profile written as the driver's ``profile`` attribute (``1g.5gb``, ``1c.3g.20gb``) with
  ``+`` made ``.`` as in every gfd label (``1g.12gb+me`` -> ``1g.12gb.me``), computed as the
  MIG labels of the device plugin's view compute it (:func:`gfd.labels.mig.profile_name`).

The profiles a GPU could be split into but is not yet are not in gfd's facts, so they are
not published: under dynamic MIG the profile counts follow what the driver has created.
"""

from __future__ import annotations

from gfd.facts import NodeFacts
from gfd.labels.families import GFD_NAMESPACE
from gfd.labels.labeler import HARDWARE_ONLY, FamilyLabeler
from gfd.labels.mig import mig_profile_groups

MIG_ENABLED_COUNT_KEY = f"{GFD_NAMESPACE}mig.enabled.count"
MIG_PROFILE_PREFIX = f"{GFD_NAMESPACE}mig.profile."
MIG_PROFILE_COUNT_SUFFIX = ".count"


def mig_profile_count_key(profile: str) -> str:
    """The key counting the MIG devices of ``profile`` (as gfd's labels write it)."""
    return f"{MIG_PROFILE_PREFIX}{profile}{MIG_PROFILE_COUNT_SUFFIX}"


def mig_layout_labels(facts: NodeFacts) -> dict[str, str]:
    """``mig.enabled.count`` and ``mig.profile.<profile>.count``; nothing on a node whose
    GPUs do not support MIG (NVML answers no MIG mode for any of them)."""
    capable = [gpu for gpu in facts.gpus if gpu.mig_mode_current is not None]
    if not capable:
        return {}
    labels = {MIG_ENABLED_COUNT_KEY: str(sum(1 for gpu in capable if gpu.mig_mode_current))}
    for group in mig_profile_groups(facts.gpus):
        labels[mig_profile_count_key(group.profile)] = str(len(group.devices))
    return labels


MIG_LAYOUT_LABELER = FamilyLabeler(
    "MIG layout", lambda inputs: mig_layout_labels(inputs.facts), modes=HARDWARE_ONLY
)
