"""The node reader logs each absent optional NVML fact once per process, not per cycle."""

from __future__ import annotations

import dataclasses
from typing import Any

from gfd.app.node_reader import NodeReader
from gfd.sim import load_profile, simulate


class RecordingLog:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def debug(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, "log_level": "debug", **fields})


def test_absent_facts_are_logged_once_per_cause() -> None:
    # Driver 535: no nvmlDeviceGetNumaNodeId, no ...FabricInfoV (fabric through the v1 call).
    facts = dataclasses.replace(load_profile("dgx1-v100").facts, driver_version="535.261.03")
    with simulate(facts) as machine:
        read = NodeReader(
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            library_path=machine.library_path,
            log=RecordingLog(),
        )
        for _ in range(3):
            assert read() == facts
    logs = read.log.lines
    absent = [(e["call"], e["cause"]) for e in logs if e["event"] == "NVML fact absent"]
    # Three reads, one line per (call, cause): the V100 has no MIG and no fabric either.
    assert len(absent) == len(set(absent))
    assert {
        ("nvmlDeviceGetGpuFabricInfoV", "NVML_ERROR_FUNCTION_NOT_FOUND"),
        ("nvmlDeviceGetNumaNodeId", "NVML_ERROR_FUNCTION_NOT_FOUND"),
        ("nvmlDeviceGetMigMode", "NVML_ERROR_NOT_SUPPORTED"),
    } <= set(absent)
    assert all(e["log_level"] == "debug" for e in logs if e["event"] == "NVML fact absent")
