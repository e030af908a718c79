"""What the health tests share: a settable clock, a recording log, a sysfs PCI tree as the
kernel lays it out, NVLink states, and a Node body as the API server returns it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gfd.facts import NvLink
from tests.factories import make_facts, make_gpu


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))


def pci_device(
    root: Path,
    address: str,
    *,
    vendor: int = 0x10DE,
    pci_class: int = 0x030200,
    driver: str | None = "nvidia",
    virtual_function: bool = False,
) -> None:
    device = root / "bus" / "pci" / "devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"0x{vendor:04x}\n")
    (device / "class").write_text(f"0x{pci_class:06x}\n")
    if driver is not None:
        drivers = root / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        os.symlink(drivers, device / "driver")
    if virtual_function:
        os.symlink(device, device / "physfn")


def sysfs_for(root: Path, count: int) -> Path:
    """One 3D controller per ``make_gpu`` index, at the bus ids ``make_gpu`` gives."""
    for index in range(count):
        pci_device(root, f"0000:{0x1B + index:02x}:00.0")
    return root


def node(allocatable: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "gpu-node-1", "uid": "u-1"}, "status": status}
    if allocatable is not None:
        body["status"]["allocatable"] = allocatable
    return body


#: A PCIe card whose NVLinks are bridges to another card: the nvlink check expects no
#: count of it (gfd.health.checks.nvlink), so its links are judged only as seen earlier.
BRIDGED_CARD = "NVIDIA A100 80GB PCIe"


def links(*states: bool) -> tuple[NvLink, ...]:
    return tuple(NvLink(index=i, active=up) for i, up in enumerate(states))


EIGHT = make_facts([make_gpu(i) for i in range(8)])
