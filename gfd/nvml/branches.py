"""NVIDIA driver branches and the NVML functions each one's library exports.

This module owns one fact about real drivers: which ``libnvidia-ml.so`` exports which
function, by driver branch (the major version: ``535.261.03`` is branch 535). The reader
uses it to document which calls an old driver lacks; the simulator uses it to export,
for a machine file that names a driver version, exactly what that branch's library
exports.

The table lists only functions that the simulator implements and that some supported
branch lacks; every other function the simulator implements is exported by every
branch from 470 on. It was taken from the export lists (``.dynsym``) of NVIDIA's
libraries 470.256.02, 525.147.05, 535.261.03 and 550.163.01; a test holds it against
those libraries whenever they are at hand.
"""

from __future__ import annotations

#: The branches whose export sets are emulated, oldest first. 570 stands for 570 and
#: every later branch: the newest NVML the simulator implements, every function exported.
EMULATED_BRANCHES: tuple[int, ...] = (470, 525, 535, 550, 570)
#: The branch a machine file without a driver version is served as.
LATEST_BRANCH = EMULATED_BRANCHES[-1]

#: The first emulated branch whose library exports the function (absent here: 470).
FIRST_EXPORTED_IN: dict[str, int] = {
    "nvmlDeviceGetGpuFabricInfo": 525,
    "nvmlDeviceGetGpuInstanceProfileInfoV": 525,
    "nvmlDeviceGetMemoryInfo_v2": 525,
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV": 525,
    "nvmlDeviceGetGpuFabricInfoV": 550,
    "nvmlDeviceGetNumaNodeId": 550,
}
OLDEST_BRANCH = EMULATED_BRANCHES[0]


class UnknownBranchError(ValueError):
    """A driver version whose branch has no known export set."""


def driver_branch(driver_version: str) -> int:
    """The emulated branch of a driver version: ``535.261.03`` → 535, ``580.105.08`` → 570.

    A version that does not start with a number names no branch and is served as the
    latest. Raises :class:`UnknownBranchError` for a branch older than 570 whose export
    set is not known here (for example 545, or 390).
    """
    digits = len(driver_version) - len(driver_version.lstrip("0123456789"))
    if digits == 0:
        return LATEST_BRANCH
    major = int(driver_version[:digits])
    if major >= LATEST_BRANCH:
        return LATEST_BRANCH
    if major in EMULATED_BRANCHES:
        return major
    known = ", ".join(str(b) for b in EMULATED_BRANCHES[:-1])
    raise UnknownBranchError(
        f"driver branch {major} (version {driver_version!r}) has no known NVML export set; "
        f"the simulator emulates branches {known} and {LATEST_BRANCH} or later"
    )


def exported_in(function: str, branch: int) -> bool:
    """Whether the library of ``branch`` exports ``function`` (one the simulator implements)."""
    return branch >= FIRST_EXPORTED_IN.get(function, OLDEST_BRANCH)
