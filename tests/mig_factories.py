"""MIG-capable GPUs and MIG devices for table-driven label tests (A100 40GB, H200).

Profile shapes follow ``nvidia-smi mig -lgip`` (memory in MiB, multiprocessors and
engines per GPU instance); the product code never imports this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gfd.facts import FabricInfo, Gpu, MigDevice
from tests.factories import MIB, make_gpu


@dataclass(frozen=True)
class Shape:
    """One GPU instance profile of a GPU model."""

    profile_id: int
    slices: int
    memory_mib: int
    multiprocessors: int
    copy: int
    decoders: int
    jpeg: int
    ofa: int
    media_extensions: bool = False
    #: NVML_GPU_INSTANCE_PROFILE_* index NVML reports the profile at (set from profile_id).
    profile_index: int = -1

    def __post_init__(self) -> None:
        if self.profile_index < 0:
            # Where NVML serves these profiles on A100/H100/H200 (1_SLICE, 2_SLICE, ...,
            # 1_SLICE_REV1 for +me, 1_SLICE_REV2 for the double-memory 1g).
            by_id = {19: 0x0, 14: 0x1, 9: 0x2, 5: 0x3, 0: 0x4, 20: 0x7, 15: 0x9}
            object.__setattr__(self, "profile_index", by_id[self.profile_id])


A100_40GB = "NVIDIA A100-SXM4-40GB"
A100_MEMORY = 40960 * MIB
A100_SHAPES = {
    "1g.5gb": Shape(19, 1, 4864, 14, 1, 0, 0, 0),
    "1g.5gb+me": Shape(20, 1, 4864, 14, 1, 1, 1, 1, media_extensions=True),
    "2g.10gb": Shape(14, 2, 9856, 28, 2, 1, 0, 0),
    "3g.20gb": Shape(9, 3, 19968, 42, 3, 2, 0, 0),
    "4g.20gb": Shape(5, 4, 19968, 56, 4, 2, 0, 0),
    "7g.40gb": Shape(0, 7, 40192, 98, 7, 5, 1, 1),
}

H200 = "NVIDIA H200"
H200_MEMORY = 143771 * MIB
H200_SHAPES = {
    "1g.18gb": Shape(19, 1, 16384, 16, 1, 1, 1, 0),
    "1g.18gb+me": Shape(20, 1, 16384, 16, 1, 1, 1, 1, media_extensions=True),
    "1g.35gb": Shape(15, 1, 33024, 16, 1, 1, 1, 0),
    "2g.35gb": Shape(14, 2, 33024, 32, 2, 2, 2, 0),
    "3g.71gb": Shape(9, 3, 71168, 60, 3, 3, 3, 0),
    "4g.71gb": Shape(5, 4, 71168, 64, 4, 4, 4, 0),
}


def mig(
    shape: Shape, index: int = 0, *, model: str = A100_40GB, ci_slices: int | None = None
) -> MigDevice:
    """A MIG device of ``shape``; ``ci_slices`` below the GPU slices makes a ``Nc.`` profile."""
    ci = shape.slices if ci_slices is None else ci_slices
    return MigDevice(
        index=index,
        uuid=f"MIG-00000000-0000-0000-0000-{index:012x}",
        name=f"{model} MIG {index}",
        memory_total_bytes=shape.memory_mib * MIB,
        gpu_instance_id=index + 1,
        compute_instance_id=0,
        gi_profile_id=shape.profile_id,
        gi_slice_count=shape.slices,
        gi_memory_mib=shape.memory_mib,
        ci_slice_count=ci,
        multiprocessors=shape.multiprocessors * ci // shape.slices,
        copy_engines=shape.copy,
        decoders=shape.decoders,
        encoders=0,
        jpeg_decoders=shape.jpeg,
        ofa_engines=shape.ofa,
        media_extensions=shape.media_extensions,
        gi_profile_index=shape.profile_index,
    )


def a100(index: int, *migs: MigDevice, mig_enabled: bool | None = None, **fields: Any) -> Gpu:
    """An A100 40GB; MIG is enabled when MIG devices are given (or ``mig_enabled``)."""
    enabled = bool(migs) if mig_enabled is None else mig_enabled
    return make_gpu(
        index,
        name=A100_40GB,
        pci_device_id=0x20B010DE,
        memory_total_bytes=A100_MEMORY,
        compute_major=8,
        compute_minor=0,
        architecture=7,
        mig_mode_current=enabled,
        mig_mode_pending=enabled,
        mig_devices=tuple(migs),
        **fields,
    )


def h200(index: int, *migs: MigDevice, **fields: Any) -> Gpu:
    """An H200 with the given MIG devices (MIG enabled when any are given)."""
    return make_gpu(
        index,
        name=H200,
        pci_device_id=0x233510DE,
        memory_total_bytes=H200_MEMORY,
        mig_mode_current=bool(migs),
        mig_mode_pending=bool(migs),
        mig_devices=tuple(migs),
        **fields,
    )


def a100_split(index: int, *profiles: str, ci_slices: int | None = None) -> Gpu:
    """An A100 split into ``profiles`` (names of :data:`A100_SHAPES`)."""
    devices = [mig(A100_SHAPES[p], i, ci_slices=ci_slices) for i, p in enumerate(profiles)]
    return a100(index, *devices)


def fabric(uuid: str, clique: int, state: str = "completed", status: int = 0) -> FabricInfo:
    return FabricInfo(cluster_uuid=uuid, clique_id=clique, state=state, status=status)  # type: ignore[arg-type]
