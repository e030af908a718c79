"""NVML faults: the agent keeps running, keeps the last good labels, and says what broke.

Whole agents (``python -m gfd --simulate PROFILE``) cover the stories end to end: a
driver that loads late, a GPU lost in the middle of a read, an UNKNOWN error after a
restart, NOT_SUPPORTED on every optional call. In-process sweeps then put one fault on
every NVML call the reader makes, so no call is left whose failure could slip a wrong
label out.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gfd.agent import Agent, compute_labels
from gfd.labels import LabelOptions, validated
from gfd.metrics import AgentTelemetry
from gfd.nvml.reader import NvmlReader, read_facts
from gfd.sim import CallError, Faults, GpuLost, SimulatedMachine, load_profile, simulate
from gfd.sim.faults import NVML_ERROR_CODES
from gfd.sinks import Publication
from gfd.sinks.featurefile import FeatureFileSink
from tests.emulator import ApiServerEmulator
from tests.reliability.agent_process import (
    AgentProcess,
    expected_labels,
    file_state,
    parse_label_lines,
    run_gfd,
    write_previous_file,
    write_profile,
)
from tests.reliability.conftest import FOREIGN_LABELS, NODE

UNKNOWN = NVML_ERROR_CODES["NVML_ERROR_UNKNOWN"]
NOT_SUPPORTED = NVML_ERROR_CODES["NVML_ERROR_NOT_SUPPORTED"]

#: The NVML symbols the reader calls on a DGX H100 (pynvml picks the versioned ones),
#: and the name the reader reports each under.
READER_CALLS: dict[str, str] = {
    "nvmlInitWithFlags": "nvmlInit",
    "nvmlSystemGetDriverVersion": "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion": "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount_v2": "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex_v2": "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName": "nvmlDeviceGetName",
    "nvmlDeviceGetUUID": "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo_v3": "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo": "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability": "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetArchitecture": "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetBrand": "nvmlDeviceGetBrand",
    "nvmlDeviceGetNumaNodeId": "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCpuAffinity": "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetMigMode": "nvmlDeviceGetMigMode",
    "nvmlDeviceGetFieldValues": "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetNvLinkState": "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2": "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType": "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetNvLinkVersion": "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetGpuFabricInfoV": "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetTopologyCommonAncestor": "nvmlDeviceGetTopologyCommonAncestor",
}
#: Calls whose NOT_SUPPORTED NVML uses for "this GPU does not have it": the fact is absent.
OPTIONAL_CALLS = tuple(
    call
    for call in READER_CALLS
    if call
    not in {
        "nvmlInitWithFlags",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo_v3",
    }
)
#: Calls whose NOT_SUPPORTED is NVML's way of saying "this GPU has none": MIG mode on a
#: GPU without MIG, NVLink state on a GPU without NVLink. The labels then state the
#: absence (``mig.capable=false``, a PCIe-only topology); every other label stays exact.
ABSENCE_LABELS: dict[str, dict[str, str]] = {
    "nvmlDeviceGetMigMode": {"nvidia.com/mig.capable": "false"},
    "nvmlDeviceGetNvLinkState": {
        "nvidia.com/gpu.interconnect": "pcie",
        "nvidia.com/gpu.nvlink-domains": "0",
        "nvidia.com/gpu.nvlink.largest-domain": "0",
        "nvidia.com/gpu.nvlink.min-links": "0",
        "nvidia.com/gpu.pcie.worst": "sys",
    },
}
#: Labels that come from the GPUs' identity or sysfs, which no optional NVML call touches.
IDENTITY_LABELS = (
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.machine",
    "nvidia.com/gpu.mode",
)


# --------------------------------------------------------------------------- #
# Whole agents


def test_driver_not_loaded_at_start_then_loaded(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, {"driver_not_loaded_inits": 2})
    output = tmp_path / "gfd"
    with AgentProcess(
        "--simulate", str(profile), "--sleep-interval", "1s", "--no-timestamp",
        "--fail-on-init-error=false", "-o", str(output),
    ) as agent:  # fmt: skip
        failures = agent.wait_for_event("cycle failed", count=2, kind="nvml-not-ready")
        assert all("NVML_ERROR_DRIVER_NOT_LOADED" in e["reason"] for e in failures)
        # Until then the node was labelled as one without GPUs, as the reference does.
        assert "labelled the node without GPUs" in failures[0]["reason"]
        assert "labelled the node without GPUs" not in failures[1]["reason"]
        agent.wait_for(
            lambda: parse_label_lines(output.read_text()) == expected_labels("dgx-h100"),
            "the GPU labels once the driver is up",
        )
        assert agent.alive()
        agent.wait_for(lambda: agent.get("/readyz")[0] == 200, "/readyz to turn 200")
        assert agent.metric("gfd_cycle_errors_total", kind="nvml-not-ready") == 2
        assert agent.metric("gfd_nvml_up") == 1
        assert agent.stop() == 0
    # The retries backed off instead of spinning.
    first, second = (e["timestamp"] for e in failures[:2])
    assert _seconds_between(first, second) >= 0.8


def test_driver_not_loaded_with_fail_on_init_error_exits_with_one_line(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, {"driver_not_loaded_inits": 1})
    output = tmp_path / "gfd"
    done = run_gfd(["--simulate", str(profile), "--sleep-interval", "1s", "-o", str(output)])
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("gfd: error: ")]
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in line and "--fail-on-init-error=false" in line
    assert not output.exists()


def test_gpu_lost_mid_read_keeps_the_last_labels_everywhere(
    tmp_path: Path, emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    first = calls_on_gpu_before("dgx-h100", gpu=2, reads=1)
    second = calls_on_gpu_before("dgx-h100", gpu=2, reads=2) - first
    assert 0 < second < first  # the second read asks less: the session cached the rest
    # The first read completes; the second loses GPU 2 halfway through.
    lost_after = first + second // 2
    profile = write_profile(tmp_path, {"gpu_lost": [{"gpu": 2, "after_calls": lost_after}]})
    output = tmp_path / "gfd"
    with AgentProcess(
        "--simulate", str(profile), "--sleep-interval", "1s", "--no-timestamp", "-o", str(output),
        "--patch-node", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
    ) as agent:  # fmt: skip
        agent.wait_for_event("labels published")
        good_file = file_state(output)
        good_metadata = {
            k: emulator.node(NODE)["metadata"].get(k) for k in ("labels", "annotations")
        }
        lost = agent.wait_for_event("cycle failed", count=2, kind="nvml-gpu-lost")
        assert "NVML_ERROR_GPU_IS_LOST" in lost[0]["reason"]
        assert "keeping the last published labels" in lost[0]["reason"]
        assert agent.alive()
        assert file_state(output) == good_file
        metadata = emulator.node(NODE)["metadata"]
        assert {k: metadata.get(k) for k in ("labels", "annotations")} == good_metadata
        # The lost GPU is what the health condition reports (docs/health.md).
        condition = emulator.node_condition(NODE, "GPUHealthy")
        assert condition is not None and condition["reason"] == "GPULost"
        assert condition["message"].startswith("GPU 2 (")
        assert agent.metric("gfd_cycle_errors_total", kind="nvml-gpu-lost") >= 2
        assert agent.metric("gfd_cycles_total", result="success") == 1
        assert agent.stop() == 0
    labels = emulator.node_labels(NODE)
    assert labels == {**FOREIGN_LABELS, **expected_labels("dgx-h100")}
    # One read and one write of the labels for the good cycle; a failed read touches no
    # label. The condition is written once, GPULost, with one Event: before, the device
    # plugin check was inside its grace period (the node advertises no GPUs), so nothing
    # was decided and nothing written.
    requests = [(r.method, r.path, r.status) for r in emulator.requests]
    node_path = f"/api/v1/nodes/{NODE}"
    assert [r for r in requests if r[1] == node_path] == [
        ("GET", node_path, 200),
        ("PATCH", node_path, 200),
    ]
    assert [r for r in requests if r[1] == node_path + "/status"] == [
        ("PATCH", node_path + "/status", 200)
    ]
    assert [r[0] for r in requests if r[1].endswith("/events")] == ["POST"]
    assert file_state(output) == good_file


def test_unknown_error_after_a_restart_keeps_the_previous_file(tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    good = expected_labels("dgx-h100")
    before = write_previous_file(output, good)
    profile = write_profile(
        tmp_path,
        {"errors": [{"call": "nvmlDeviceGetMemoryInfo", "error": "UNKNOWN", "gpu": 5, "times": 2}]},
    )
    with AgentProcess(
        "--simulate", str(profile), "--sleep-interval", "1s", "--no-timestamp", "-o", str(output),
    ) as agent:  # fmt: skip
        failed = agent.wait_for_event("cycle failed", count=2, kind="nvml")
        assert "nvmlDeviceGetMemoryInfo" in failed[0]["reason"]
        assert "NVML_ERROR_UNKNOWN" in failed[0]["reason"]
        agent.wait_for(
            lambda: agent.metric("gfd_cycles_total", result="success") >= 1, "a good cycle"
        )
        assert agent.metric("gfd_cycle_errors_total", kind="nvml") == 2
        assert agent.stop() == 0
        # The good cycle found the file already right and did not touch it.
        assert not agent.matching("labels published")
    assert file_state(output) == before


def test_not_supported_on_every_optional_call_gives_a_valid_smaller_label_set(
    tmp_path: Path,
) -> None:
    errors = [{"call": call, "error": "NOT_SUPPORTED"} for call in OPTIONAL_CALLS]
    profile = write_profile(tmp_path, {"errors": errors})
    output = tmp_path / "gfd"
    done = run_gfd(["--simulate", str(profile), "--oneshot", "--no-timestamp", "-o", str(output)])
    assert done.returncode == 0, done.stderr[-2000:]
    labels = parse_label_lines(output.read_text())
    full = expected_labels("dgx-h100")
    assert validated(labels).labels == labels
    for key in IDENTITY_LABELS:
        assert labels[key] == full[key]
    # Unknown facts give no label, never a made-up value.
    for absent in ("gpu.memory", "gpu.family", "gpu.compute.major", "cuda.driver-version.full"):
        assert f"nvidia.com/{absent}" not in labels
    assert set(labels) <= set(full)


# --------------------------------------------------------------------------- #
# In-process sweeps: one fault on each call the reader makes


class RecordingLog:
    """A structlog-shaped logger that keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        return lambda event, **fields: self.events.append((level, event, fields))


@functools.cache
def _dgx_h100() -> Any:
    return load_profile("dgx-h100")


def _reader(machine: SimulatedMachine) -> Callable[[], Any]:
    return lambda: read_facts(
        library_path=machine.library_path,
        sysfs_root=machine.sysfs_root,
        machine_type_file=machine.machine_type_file,
    )


def calls_on_gpu_before(profile: str, *, gpu: int, reads: int) -> int:
    """How many NVML calls the first ``reads`` reads of one agent's session make on ``gpu``
    (the smallest loss they survive). A session's later reads ask less than its first."""
    base = load_profile(profile)
    low, high = 0, 4096
    while low < high:
        middle = (low + high) // 2
        faults = Faults(gpu_lost=(GpuLost(gpu=gpu, after_calls=middle),))
        with simulate(dataclasses.replace(base, faults=faults)) as machine:
            reader = NvmlReader(
                library_path=machine.library_path,
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
            )
            try:
                for _ in range(reads):
                    reader.read()
                high = middle
            except Exception:
                low = middle + 1
            finally:
                reader.close()
    assert low < 4096, "the reads never completed"
    return low


@functools.cache
def _good_publication() -> Publication:
    with simulate(_dgx_h100()) as machine:
        facts = _reader(machine)()
    label_set, _ = compute_labels(facts, LabelOptions())
    return Publication(dict(label_set.labels))


def _agent(machine: SimulatedMachine, output: Path) -> tuple[Agent, AgentTelemetry, RecordingLog]:
    telemetry = AgentTelemetry(sleep_interval=None, registry=CollectorRegistry())
    log = RecordingLog()
    agent = Agent(
        read_facts=_reader(machine),
        sinks=[FeatureFileSink(output)],
        options=LabelOptions(),
        log=log,
        telemetry=telemetry,
    )
    return agent, telemetry, log


def _errors(telemetry: AgentTelemetry, kind: str) -> float:
    value = telemetry.registry.get_sample_value("gfd_cycle_errors_total", {"kind": kind})
    return float(value or 0.0)


@pytest.mark.parametrize("call", sorted(READER_CALLS))
def test_unknown_on_any_call_keeps_the_last_labels_and_recovers(call: str, tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    before = write_previous_file(output, _good_publication().labels)
    faults = Faults(errors=(CallError(call=call, code=UNKNOWN, times=1),))
    with simulate(dataclasses.replace(_dgx_h100(), faults=faults)) as machine:
        agent, telemetry, log = _agent(machine, output)
        failed = agent.cycle()
        assert not failed.ok and failed.kind == "nvml"
        assert READER_CALLS[call] in failed.reason and "NVML_ERROR_UNKNOWN" in failed.reason
        assert file_state(output) == before
        assert _errors(telemetry, "nvml") == 1
        assert telemetry.registry.get_sample_value("gfd_nvml_up") == (call != "nvmlInitWithFlags")
        assert ("error", "cycle failed") in [(level, event) for level, event, _ in log.events]
        recovered = agent.cycle()
    assert recovered.ok and recovered.wrote == ()
    assert file_state(output) == before


#: NOT_SUPPORTED for the remote type of an *active* link (older NVSwitch firmware) must
#: not turn an NVSwitch node into a PCIe one: the topology infers the type from the bus id.
@pytest.mark.parametrize("call", sorted(OPTIONAL_CALLS))
def test_not_supported_on_one_optional_call_never_changes_a_label(call: str) -> None:
    """A fact NVML does not report removes its labels; every other label stays exact."""
    faults = Faults(errors=(CallError(call=call, code=NOT_SUPPORTED),))
    with simulate(dataclasses.replace(_dgx_h100(), faults=faults)) as machine:
        facts = _reader(machine)()
    labels = dict(compute_labels(facts, LabelOptions())[0].labels)
    full = dict(_good_publication().labels)
    changed = {k: v for k, v in labels.items() if full.get(k) != v}
    assert changed == ABSENCE_LABELS.get(call, {})
    assert set(labels) <= set(full)


@pytest.mark.parametrize("gpu", [0, 7])
def test_a_gpu_lost_on_any_index_fails_the_cycle_not_the_agent(gpu: int, tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    before = write_previous_file(output, _good_publication().labels)
    faults = Faults(gpu_lost=(GpuLost(gpu=gpu, after_calls=3),))
    with simulate(dataclasses.replace(_dgx_h100(), faults=faults)) as machine:
        agent, telemetry, _ = _agent(machine, output)
        outcomes = [agent.cycle() for _ in range(3)]
    assert [o.kind for o in outcomes] == ["nvml-gpu-lost"] * 3
    assert _errors(telemetry, "nvml-gpu-lost") == 3
    assert file_state(output) == before


def _seconds_between(first: str, second: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(second) - datetime.fromisoformat(first)).total_seconds()
