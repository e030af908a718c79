"""The per-GPU identity annotation of the Node: each GPU's index, UUID, bus id, serial, product.

This module owns the annotation ``nvidia.com/gpu.devices`` (:data:`IDENTITY_ANNOTATION`):
its key, its fields and their formats, its bound, and :func:`identity_annotation`, which
renders it from the facts. The node sink writes it among the annotations it owns
(:data:`gfd.sinks.node_update.OWNED_ANNOTATIONS`), only when its text changes, and removes
it when the node has no GPU left; the feature file and NodeFeature sinks carry no
annotations. It is an annotation, not labels: a UUID and a product name together pass
the 63 characters of a label value.

The value is compact JSON, the same text for the same GPUs on every run (keys in a fixed
order, GPUs by index, no spaces, non-ASCII escaped)::

    {"v":1,"devices":[{"index":0,"uuid":"GPU-…","pcieBusID":"0000:1b:00.0",
     "serial":"1650…","productName":"NVIDIA H100 80GB HBM3","migEnabled":false}, …]}

The field names and value formats are those of NVIDIA's DRA driver for GPUs, whose
ResourceSlices name a GPU by them (``NVIDIA/k8s-dra-driver-gpu``,
``cmd/gpu-kubelet-plugin/deviceinfo.go``): ``uuid`` and ``productName`` as NVML gives
them, and ``pcieBusID`` as go-nvlib's ``GetPCIBusID`` writes NVML's bus id (lower case,
the first four of its eight domain digits dropped when they are zeros:
``0000:1b:00.0``). ``index`` is NVML's index (``nvidia-smi``'s and DCGM's ``gpu``);
``serial`` (``nvmlDeviceGetSerial``, the board's) is left out for a GPU that has none, and
``migEnabled`` (MIG mode now, ``nvmlDeviceGetMigMode``: the DRA driver's internal name) for a
GPU without MIG.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gfd.facts import Gpu, NodeFacts

IDENTITY_ANNOTATION = "nvidia.com/gpu.devices"
#: Version of the value's format, written as ``"v"``.
IDENTITY_VERSION = 1
#: The largest value written: a quarter of the 256 KiB all of a Node's annotations share.
#: A GPU as NVML reports it (ASCII text in NVML's buffers: 96 bytes for the UUID and the
#: name, 30 for the serial) takes at most about 350 bytes (with migEnabled), so the facts' most GPUs
#: (``gfd.facts.limits.MAX_GPUS``, 128) fit with room to spare
#: (``tests/sinks/test_node_identity.py``); only a facts file with absurd texts could
#: pass it, and its annotation is then left out, as the topology's matrix is past its own.
IDENTITY_LIMIT = 64 * 1024


def dra_bus_id(nvml_bus_id: str) -> str:
    """NVML's bus id as NVIDIA's DRA driver writes it (go-nvlib ``GetPCIBusID``): lower
    case, and a leading ``0000`` of the domain dropped: ``00000000:1B:00.0`` is
    ``0000:1b:00.0``."""
    lowered = nvml_bus_id.lower()
    return lowered.removeprefix("0000") if lowered != "0000" else lowered


def gpu_identity(gpu: Gpu) -> dict[str, Any]:
    """One GPU's entry, keys in their written order."""
    entry: dict[str, Any] = {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "pcieBusID": dra_bus_id(gpu.bus_id),
    }
    if gpu.serial is not None:
        entry["serial"] = gpu.serial
    entry["productName"] = gpu.name
    if gpu.mig_mode_current is not None:
        # Which GPUs have MIG on, for NVIDIA's DRA driver's users (it partitions them on
        # demand; its internal name for it): left out for a GPU without MIG.
        entry["migEnabled"] = gpu.mig_mode_current
    return entry


def identity_annotation(facts: NodeFacts) -> Mapping[str, str]:
    """``{IDENTITY_ANNOTATION: value}`` for a node with GPUs; empty for one without, or
    past :data:`IDENTITY_LIMIT` (the node sink then removes the annotation it wrote)."""
    if not facts.gpus:
        return {}
    document = {
        "v": IDENTITY_VERSION,
        "devices": [gpu_identity(gpu) for gpu in sorted(facts.gpus, key=lambda g: g.index)],
    }
    value = json.dumps(document, separators=(",", ":"), ensure_ascii=True)
    if len(value) > IDENTITY_LIMIT:
        return {}
    return {IDENTITY_ANNOTATION: value}
