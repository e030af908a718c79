"""The CUDA a pod needs against a node's driver, as NVIDIA's container toolkit judges
``NVIDIA_REQUIRE_CUDA``: alternatives separated by spaces, conditions by commas."""

from __future__ import annotations

import pytest

from gfd.scheduling.cuda import judge_cuda, possible_brands, required_cuda, requirement_met

H100_570 = {
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "8",
    "nvidia.com/cuda.driver-version.full": "570.148.08",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
}
#: As CUDA 12.9's images set it (driver branches where their forward compatibility
#: libraries serve), cut to three alternatives.
CUDA_12_9 = "cuda>=12.9 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=570,driver<571"


def test_the_cuda_condition_is_what_the_pod_needs() -> None:
    assert required_cuda(CUDA_12_9) == (12, 9)
    assert required_cuda("brand=tesla,driver>=470") is None


@pytest.mark.parametrize(
    ("requirement", "brand", "met"),
    [
        ("cuda>=12.8", "nvidia", True),
        ("cuda>=12.9", "nvidia", False),
        (CUDA_12_9, "nvidia", True),  # the 570 branch alternative, for brand nvidia
        (CUDA_12_9, "tesla", False),  # brand tesla is served only on 535
        ("cuda>=12.9 arch>=10.0", "nvidia", False),  # either alternative would do: neither holds
        ("cuda>=12.9 arch>=9.0", "nvidia", True),
        ("cuda>=12.0,arch>=9.0", "nvidia", True),
        ("cuda>=12.0,arch>=10.0", "nvidia", False),
        ("driver>=570.148.08", "nvidia", True),
        ("driver>570.148.08", "nvidia", False),
        ("cuda>=12.9 nonsense", "nvidia", None),
    ],
)
def test_requirements(requirement: str, brand: str, met: bool | None) -> None:
    assert requirement_met(requirement, H100_570, brand) is met


def test_a_driver_too_old_names_the_minimum_driver_and_forward_compatibility() -> None:
    verdict = judge_cuda((12, 9), H100_570)
    assert not verdict.ok
    assert "driver 570.148.08 supports only 12.8" in verdict.detail
    assert "unsatisfied condition: cuda>=12.9" in verdict.detail
    assert "upgrade the driver to 575.51.03 or newer" in verdict.fix
    assert "cuda-compat-12-9" in verdict.fix
    assert "a data center GPU" in verdict.fix
    rtx = dict(H100_570, **{"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"})
    assert "not on this GPU" in judge_cuda((12, 9), rtx).fix


def test_the_brand_decides_when_only_some_brands_are_served() -> None:
    assert possible_brands("NVIDIA-H100-80GB-HBM3") == ("tesla", "nvidia")
    verdict = judge_cuda((12, 9), H100_570, CUDA_12_9)
    assert not verdict.ok and "brand" in verdict.detail
    both = CUDA_12_9 + " brand=tesla,driver>=570,driver<571"
    assert judge_cuda((12, 9), H100_570, both).ok


def test_a_node_without_gfd_labels_cannot_be_judged() -> None:
    verdict = judge_cuda((12, 8), {})
    assert not verdict.ok and "no nvidia.com/cuda.runtime-version.major label" in verdict.detail
