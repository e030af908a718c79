"""GPU sharing: replicas, sharing strategy, the ``-SHARED`` product suffix, ``mps.capable``.

This module owns how the config file's ``sharing.timeSlicing`` / ``sharing.mps``
(:class:`gfd.config.Sharing`) shapes the labels, as the reference does:

* A resource (``nvidia.com/gpu``, or ``nvidia.com/mig-<profile>`` under the mixed MIG
  strategy) listed with ``replicas: N`` gets ``<resource>.replicas=N``,
  ``<resource>.sharing-strategy=time-slicing|mps`` and ``-SHARED`` appended to its
  product. With ``renameByDefault: true`` the suffix is left off (the resource is
  advertised under another name instead). The reference ignores a per-resource
  ``rename`` (it warns and clears it), so gfd does too.
* GPUs with MIG enabled, labelled as full GPUs, are not shared: replicas 0.
* ``mps.capable`` is ``true`` only under MPS; MPS with a MIG-enabled GPU is a
  configuration error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gfd.base.errors import ConfigError
from gfd.base.frozen import frozen_dataclass
from gfd.facts import NodeFacts
from gfd.labels.labeler import DEVICE_PLUGIN_ONLY, FamilyLabeler
from gfd.labels.rules import product_value

if TYPE_CHECKING:
    from gfd.config import Sharing

FULL_GPU_RESOURCE = "nvidia.com/gpu"
MPS_CAPABLE_KEY = "nvidia.com/mps.capable"
SHARED_SUFFIX = "SHARED"


@frozen_dataclass
class Replication:
    """How one resource is handed out: its replicas, strategy label and product suffix."""

    replicas: int
    strategy: str
    #: Append ``-SHARED`` to the product.
    shared_suffix: bool = False

    def product(self, model: str, *parts: str) -> str:
        """The product label value: the NVML ``model`` name, then ``parts``, then ``-SHARED``.

        Always a valid value (:func:`gfd.labels.rules.product_value`): a long model is
        shortened so that the suffixes survive.
        """
        suffixes = (*parts, SHARED_SUFFIX) if self.shared_suffix else parts
        return product_value(model, suffixes)


#: A resource that is not shared: one consumer per device.
NOT_SHARED = Replication(replicas=1, strategy="none")
#: MIG-enabled GPUs labelled as full GPUs: nothing can be scheduled on them whole.
MIG_ENABLED_FULL_GPU = Replication(replicas=0, strategy="none")


def replication_for(sharing: Sharing | None, resource: str) -> Replication:
    """The replication of ``resource`` under ``sharing`` (None: no sharing configured)."""
    if sharing is None:
        return NOT_SHARED
    for shared in sharing.resources:
        if shared.name == resource and shared.replicas > 1:
            return Replication(
                replicas=shared.replicas,
                strategy=sharing.strategy,
                shared_suffix=not sharing.rename_by_default,
            )
    return NOT_SHARED


def check_sharing(facts: NodeFacts, sharing: Sharing | None) -> None:
    """Raise ConfigError for MPS with a MIG-enabled GPU, naming the GPU and the setting."""
    if sharing is None or sharing.strategy != "mps":
        return
    for gpu in facts.gpus:
        if gpu.mig_mode_current:
            raise ConfigError(
                "config file sharing.mps: MPS sharing is not supported with MIG, but "
                f"GPU {gpu.index} ({gpu.name}, {gpu.uuid}, bus {gpu.bus_id}) has MIG enabled; "
                "remove sharing.mps from the config file or disable MIG on that GPU"
            )


def mps_labels(facts: NodeFacts, sharing: Sharing | None) -> dict[str, str]:
    """``mps.capable``: true only when MPS is the active sharing strategy."""
    if not facts.gpus:
        return {}
    check_sharing(facts, sharing)
    capable = sharing is not None and sharing.strategy == "mps"
    return {MPS_CAPABLE_KEY: "true" if capable else "false"}


#: ``mps.capable`` says what the device plugin's sharing config does, not the hardware.
MPS_LABELER = FamilyLabeler(
    "MPS capability",
    lambda inputs: mps_labels(inputs.facts, inputs.options.sharing),
    modes=DEVICE_PLUGIN_ONLY,
)
