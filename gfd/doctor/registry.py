"""The registry of the doctor's checks: the chain from the GPU to the labels, in order.

A new check is one module under :mod:`gfd.doctor.checks` and one line here. The order is
the chain's: NVML and where it comes from, the labels made from what it read, where they
go (the feature file, the API server, its authorisation and admission, NFD), and then
what else decides whether the GPUs are usable (the device plugin, their health).
"""

from __future__ import annotations

from collections.abc import Callable

from gfd.base.frozen import frozen_dataclass
from gfd.doctor.checks import (
    admission,
    cluster,
    device_plugin,
    driver_root,
    feature_file,
    health,
    labels,
    nfd,
    nvml,
    rbac,
)
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer


@frozen_dataclass
class DoctorCheck:
    """One link of the chain: its name (the report's second column), and how it
    examines the node."""

    name: str
    examine: Callable[[Examination], Answer]


DOCTOR_CHECKS: tuple[DoctorCheck, ...] = (
    DoctorCheck("nvml", nvml.examine),
    DoctorCheck("driver-root", driver_root.examine),
    DoctorCheck("labels", labels.examine),
    DoctorCheck("feature-file", feature_file.examine),
    DoctorCheck("cluster", cluster.examine),
    DoctorCheck("rbac", rbac.examine),
    DoctorCheck("admission", admission.examine),
    DoctorCheck("nfd", nfd.examine),
    DoctorCheck("device-plugin", device_plugin.examine),
    DoctorCheck("health", health.examine),
)
