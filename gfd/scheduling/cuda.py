"""The CUDA a pod needs against the CUDA a node's driver supports.

A CUDA image says what it needs in ``NVIDIA_REQUIRE_CUDA``: space-separated alternatives,
each a comma-separated list of conditions that must all hold (``cuda>=12.8
brand=tesla,driver>=535,driver<536 ...``). NVIDIA's container toolkit checks it when the
container starts, after the scheduler placed the pod: on a node whose driver supports an
older CUDA the container fails with ``requirement error: unsatisfied condition:
cuda>=12.8``. The node's driver CUDA is gfd's ``cuda.runtime-version.*`` labels (NVIDIA's
name; it is ``nvmlSystemGetCudaDriverVersion``), its driver ``cuda.driver-version.*``.

When the driver is too old, two ways out: a newer driver (the minimum for each CUDA
release, from NVIDIA's CUDA Toolkit release notes, is :data:`MINIMUM_DRIVER`), or the CUDA
forward compatibility package (``cuda-compat-X-Y`` in the image), which NVIDIA supports on
data center GPUs only, on the driver branches its compatibility guide lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gfd.base.errors import ConfigError, echo
from gfd.base.frozen import frozen_dataclass

CUDA_MAJOR = "nvidia.com/cuda.runtime-version.major"
CUDA_MINOR = "nvidia.com/cuda.runtime-version.minor"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
PRODUCT = "nvidia.com/gpu.product"
REQUIRE_CUDA_ENV = "NVIDIA_REQUIRE_CUDA"

#: The oldest Linux driver of each CUDA release's GA (NVIDIA's CUDA Toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions").
MINIMUM_DRIVER: Mapping[tuple[int, int], str] = {
    (11, 0): "450.36.06",
    (11, 1): "455.23",
    (11, 2): "460.27.03",
    (11, 3): "465.19.01",
    (11, 4): "470.42.01",
    (11, 5): "495.29.05",
    (11, 6): "510.39.01",
    (11, 7): "515.43.04",
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}
#: Product names of GPUs on which NVIDIA does not support forward compatibility.
_CONSUMER = re.compile(r"geforce|titan", re.IGNORECASE)
#: Workstation RTX boards: only the NGC-ready SKUs NVIDIA lists are supported.
_WORKSTATION = re.compile(r"(^|-)(rtx|quadro)(-|$)", re.IGNORECASE)
_VERSION = re.compile(r"^(\d{1,3})\.(\d{1,3})$")
_CONDITION = re.compile(r"^cuda(>=|<=|==|=|>|<)(\d{1,3}\.\d{1,3})$")


def parse_cuda_version(text: str, where: str) -> tuple[int, int]:
    """``12.8`` → (12, 8); :class:`ConfigError` otherwise."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise ConfigError(f"{where}: {echo(text)} is not a CUDA version (write 12.8)")
    return int(match[1]), int(match[2])


def required_cuda(requirement: str) -> tuple[int, int] | None:
    """The CUDA version ``NVIDIA_REQUIRE_CUDA`` asks for: its ``cuda>=X.Y`` condition (the
    other alternatives only name driver branches where forward compatibility works)."""
    for alternative in requirement.split():
        for condition in alternative.split(","):
            match = _CONDITION.match(condition.strip())
            if match and match[1] in (">=", ">", "==", "="):
                return parse_cuda_version(match[2], REQUIRE_CUDA_ENV)
    return None


#: NVML's brands a product name can have (``nvmlDeviceGetBrand``, as NVIDIA's container
#: toolkit spells them); gfd does not label the brand, so a data center GPU may be either
#: of two (older drivers say Tesla, newer NVIDIA).
def possible_brands(product: str) -> tuple[str, ...]:
    lowered = product.lower()
    if "geforce" in lowered:
        return ("geforcertx", "geforce") if "rtx" in lowered else ("geforce",)
    if "titan" in lowered:
        return ("titanrtx", "titan") if "rtx" in lowered else ("titan",)
    if "quadro" in lowered:
        return ("quadrortx", "quadro") if "rtx" in lowered else ("quadro",)
    if _WORKSTATION.search(product):
        return ("nvidiartx", "quadrortx")
    return ("tesla", "nvidia")


_TERM = re.compile(r"^(cuda|driver|arch|brand)(>=|<=|==|=|>|<)([A-Za-z0-9.]+)$")


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    if not all(p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    while len(numbers) < 3:
        numbers.append(0)
    return tuple(numbers)


def _compare(have: tuple[int, ...], operator: str, want: tuple[int, ...]) -> bool:
    return {
        ">=": have >= want,
        ">": have > want,
        "<=": have <= want,
        "<": have < want,
        "==": have == want,
        "=": have == want,
    }[operator]


def requirement_met(requirement: str, labels: Mapping[str, str], brand: str) -> bool | None:
    """Whether NVIDIA's container toolkit would accept ``requirement`` on a node with
    ``labels`` and a GPU of ``brand``: any alternative whose conditions all hold. None:
    a condition gfd cannot judge (a malformed one, a label the node lacks)."""
    node = {
        "cuda": f"{labels.get(CUDA_MAJOR, '')}.{labels.get(CUDA_MINOR, '')}",
        "driver": labels.get(DRIVER_FULL, ""),
        "arch": f"{labels.get(COMPUTE_MAJOR, '')}.{labels.get(COMPUTE_MINOR, '')}",
    }
    unknown = False
    for alternative in requirement.split():
        verdict: bool | None = True
        for condition in alternative.split(","):
            match = _TERM.match(condition.strip())
            if match is None:
                verdict = None
                continue
            what, operator, value = match[1], match[2], match[3]
            if what == "brand":
                holds: bool | None = (value.lower() == brand) == (operator in ("=", "=="))
            else:
                have, want = _version(node[what]), _version(value)
                holds = None if have is None or want is None else _compare(have, operator, want)
            if holds is False:
                verdict = False
                break
            if holds is None:
                verdict = None
        if verdict is True:
            return True
        unknown = unknown or verdict is None
    return None if unknown else False


@frozen_dataclass
class CudaVerdict:
    """The node's driver CUDA against what the pod needs; ``fix`` when it falls short."""

    needed: tuple[int, int]
    node: tuple[int, int] | None
    ok: bool
    detail: str
    fix: str = ""


def forward_compatibility(product: str) -> str:
    """Whether NVIDIA supports the forward compatibility package on this GPU."""
    if _CONSUMER.search(product):
        return f"not on this GPU ({product}: NVIDIA supports it on data center GPUs only)"
    if _WORKSTATION.search(product):
        return (
            f"only if {product} is one of the NGC-ready RTX boards NVIDIA lists "
            "(it supports data center GPUs)"
        )
    return f"on this GPU ({product}, a data center GPU), with a driver branch the package supports"


def judge_cuda(
    needed: tuple[int, int], labels: Mapping[str, str], requirement: str | None = None
) -> CudaVerdict:
    """The node's driver CUDA (its gfd labels) against ``needed``; ``requirement``: the
    whole ``NVIDIA_REQUIRE_CUDA``, whose other alternatives (driver branches the image's
    forward compatibility libraries serve) may let an older driver start it."""
    show = f"{needed[0]}.{needed[1]}"
    major, minor = labels.get(CUDA_MAJOR, ""), labels.get(CUDA_MINOR, "")
    if not (major.isdigit() and minor.isdigit()):
        return CudaVerdict(
            needed,
            None,
            False,
            f"needs CUDA {show}; the node has no {CUDA_MAJOR} label (no driver, or no gfd)",
            "run gfd on the node (or check its driver: gfd doctor)",
        )
    node = (int(major), int(minor))
    driver = labels.get(DRIVER_FULL, "unknown")
    if node >= needed:
        return CudaVerdict(
            needed, node, True, f"needs CUDA {show}; driver {driver} supports {major}.{minor}"
        )
    product = labels.get(PRODUCT, "")
    if requirement:
        answers = {requirement_met(requirement, labels, b) for b in possible_brands(product)}
        if answers == {True}:
            return CudaVerdict(
                needed,
                node,
                True,
                f"needs CUDA {show}; driver {driver} supports {major}.{minor}, and the "
                f"image's {REQUIRE_CUDA_ENV} accepts this driver's branch (its forward "
                "compatibility libraries serve it)",
            )
        if True in answers:
            return CudaVerdict(
                needed,
                node,
                False,
                f"needs CUDA {show}; driver {driver} supports {major}.{minor}; the image "
                f"accepts this driver's branch only for some GPU brands, and the brand of "
                f"{product} (NVML's, which gfd does not label) decides",
                "nvidia-smi -q | grep 'Product Brand' on the node tells the brand; or "
                f"upgrade the driver to {MINIMUM_DRIVER.get(needed, 'one that supports it')}",
            )
    minimum = MINIMUM_DRIVER.get(needed)
    upgrade = (
        f"upgrade the driver to {minimum} or newer (CUDA {show}'s minimum)"
        if minimum
        else f"upgrade the driver to one that supports CUDA {show}"
    )
    compat = forward_compatibility(product) if product else "on data center GPUs only"
    return CudaVerdict(
        needed,
        node,
        False,
        f"needs CUDA {show}; driver {driver} supports only {major}.{minor}: the container "
        f"would fail to start (requirement error: unsatisfied condition: cuda>={show})",
        f"{upgrade}; or put CUDA {show}'s forward compatibility package "
        f"(cuda-compat-{needed[0]}-{needed[1]}) in the image, which works {compat}",
    )
