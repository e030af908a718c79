"""Small builders of facts for table-driven tests (the product code never imports this)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gfd.facts import Gpu, NodeFacts

MIB = 1 << 20


def make_gpu(index: int = 0, **overrides: Any) -> Gpu:
    base = Gpu(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-00000000-0000-0000-0000-{index:012x}",
        bus_id=f"00000000:{0x1B + index:02X}:00.0",
        pci_device_id=0x233010DE,
        pci_class=0x030200,
        memory_total_bytes=81559 * MIB,
        compute_major=9,
        compute_minor=0,
        architecture=9,
        brand=2,
        numa_node=0,
        cpu_affinity="0-47,96-143",
        mig_mode_current=False,
        mig_mode_pending=False,
    )
    return replace(base, **overrides)


def make_facts(gpus: list[Gpu] | None = None, **overrides: Any) -> NodeFacts:
    base = NodeFacts(
        driver_version="550.107.02",
        cuda_driver_version=12040,
        machine_type="DGXH100",
        gpus=tuple(gpus if gpus is not None else [make_gpu(0)]),
    )
    return replace(base, **overrides)


#: Node-level labels of ``make_facts()``'s defaults (versions, machine, mode, MIG capability).
NODE_LABELS = {
    f"nvidia.com/{key}": value
    for key, value in {
        "cuda.driver-version.major": "550",
        "cuda.driver-version.minor": "107",
        "cuda.driver-version.revision": "02",
        "cuda.driver-version.full": "550.107.02",
        "cuda.driver.major": "550",
        "cuda.driver.minor": "107",
        "cuda.driver.rev": "02",
        "cuda.runtime-version.major": "12",
        "cuda.runtime-version.minor": "4",
        "cuda.runtime-version.full": "12.4",
        "cuda.runtime.major": "12",
        "cuda.runtime.minor": "4",
        "gpu.machine": "DGXH100",
        "gpu.mode": "compute",
        "mig.capable": "true",
    }.items()
}
