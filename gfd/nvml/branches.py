"""NVIDIA driver branches and the NVML functions each one's library exports.

This module owns one fact about real drivers: which ``libnvidia-ml.so`` exports which
function, by driver branch (the major version: ``535.261.03`` is branch 535). The reader
uses it to document which calls an old driver lacks; the simulator uses it to export,
for a machine file that names a driver version, exactly what that branch's library
exports. Any driver version is served: one of a branch not emulated here (545, 560, 590)
with the export set of the nearest emulated branch at or below it, an older one than the
oldest emulated branch (450) with that branch's. Only a text that is no driver version
at all is refused.

The table lists only functions that the simulator implements and that some supported
branch lacks; every other function the simulator implements is exported by every
branch from 470 on. It was taken from the export lists (``.dynsym``) of NVIDIA's
libraries 470.256.02, 525.147.05, 535.261.03 and 550.163.01; a test holds it against
those libraries whenever they are at hand.
"""

from __future__ import annotations

import re

#: The branches whose export sets are emulated, oldest first. 570 stands for 570 and
#: every later branch: the newest NVML the simulator implements, every function exported.
EMULATED_BRANCHES: tuple[int, ...] = (470, 525, 535, 550, 570)
#: The branch a machine file without a driver version is served as.
LATEST_BRANCH = EMULATED_BRANCHES[-1]
#: The oldest emulated branch: it also serves every older driver.
OLDEST_BRANCH = EMULATED_BRANCHES[0]

#: The first emulated branch whose library exports the function (absent here: 470).
FIRST_EXPORTED_IN: dict[str, int] = {
    "nvmlDeviceGetGpuFabricInfo": 525,
    "nvmlDeviceGetGpuInstanceProfileInfoV": 525,
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": 525,
    "nvmlDeviceGetMemoryInfo_v2": 525,
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV": 525,
    "nvmlDeviceGetGpuFabricInfoV": 550,
    "nvmlDeviceGetNumaNodeId": 550,
}


#: A driver version as NVML reports it: a major number, then dot-separated numbers
#: (``550.107.02``, ``535.54``, ``550``; NVIDIA numbers every release this way).
DRIVER_VERSION_PATTERN = re.compile(r"^[0-9]{1,6}(\.[0-9]{1,9}){0,5}$")


class NotADriverVersion(ValueError):
    """A text that is no driver version at all (``custom-build``, ``12.x``, an empty string)."""


def driver_branch(driver_version: str) -> int:
    """The emulated branch whose export set serves ``driver_version``.

    The nearest emulated branch at or below the version's major number: ``535.261.03`` →
    535, ``560.35.03`` → 550, ``580.105.08`` → 570. A release older than the oldest
    emulated branch is served as that branch (``450.80.02`` → 470; see
    :func:`older_than_emulated`). Raises :class:`NotADriverVersion` for a text that is no
    driver version (:data:`DRIVER_VERSION_PATTERN`).
    """
    if not DRIVER_VERSION_PATTERN.match(driver_version):
        raise NotADriverVersion(
            f"{driver_version!r} is not an NVIDIA driver version "
            "(numbers separated by dots, like 550.107.02)"
        )
    major = int(driver_version.split(".", 1)[0])
    at_or_below = [branch for branch in EMULATED_BRANCHES if branch <= major]
    return at_or_below[-1] if at_or_below else OLDEST_BRANCH


def older_than_emulated(driver_version: str) -> str | None:
    """One line saying that ``driver_version`` is served as the oldest emulated branch, or None.

    NVIDIA's libraries before 470 are not at hand, so what such a driver exports is not
    known here; 470's export set (the smallest emulated) stands in for it.
    """
    if not DRIVER_VERSION_PATTERN.match(driver_version):
        return None
    major = int(driver_version.split(".", 1)[0])
    if major >= OLDEST_BRANCH:
        return None
    return (
        f"driver {driver_version} is older than branch {OLDEST_BRANCH}, the oldest whose NVML "
        f"exports the simulator knows; it is served with {OLDEST_BRANCH}'s export set"
    )


def exported_in(function: str, branch: int) -> bool:
    """Whether the library of ``branch`` exports ``function`` (one the simulator implements)."""
    return branch >= FIRST_EXPORTED_IN.get(function, OLDEST_BRANCH)
