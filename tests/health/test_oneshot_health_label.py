"""``gfd --simulate P --oneshot --health-label -o -``, in process through gfd's own entry point:
each fault of issue 33 prints its reason, and every bundled profile without faults prints
``healthy`` (no false alarm, on GPUs without a fabric or without NVLink too).

The one exception is the bundled ``gb200-nvl4-fabric-broken``: its facts are a fault (three
GPUs whose fabric registration ended with NVML_ERROR_UNKNOWN), modelled to withhold
``gpu.clique``, and it prints ``FabricNotReady``, which is what it models.

Xids reach a one-shot run only through the kernel log (NVML delivers an event only to a
set registered when it happened): a record in ``/dev/kmsg``'s format written before gfd
starts, given by ``--health-kernel-log``, is reported. The periodic agent's Xids from
NVML, and the storm, are in ``tests/health/test_health_reasons_agent.py``.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from gfd.app.health_setup import kernel_log_path
from gfd.config import Settings
from gfd.facts import dump_facts
from gfd.sim import BUNDLED_PROFILES, load_profile
from tests.host import gfd_main
from tests.sim import FAULTY_PROFILES


def health_label(profile: str | Path, *flags: str) -> str:
    out = io.StringIO()
    code = gfd_main(
        [
            "--simulate", str(profile), "--oneshot", "--health-label", "--no-timestamp",
            "--log-level", "error", "-o", "-", *flags,
        ],
        env={},
        stdout=out,
    )  # fmt: skip
    assert code == 0
    labels = dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)
    return labels["nvidia.com/gpu.health"]


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_every_bundled_profile_without_faults_is_healthy(profile: str) -> None:
    assert health_label(profile) == FAULTY_PROFILES.get(profile, "healthy")


def with_faults(tmp_path: Path, profile: str, faults: str) -> Path:
    path = tmp_path / f"{profile}-faulty.yaml"
    path.write_text(dump_facts(load_profile(profile).facts) + "faults:\n" + faults)
    return path


@pytest.mark.parametrize(
    ("profile", "faults", "flags", "reason"),
    [
        # The fabric manager never came: GPU 1 still registering (grace period 0).
        (
            "dgx-h100",
            "  fabric: [{gpu: 1, after_calls: 0, state: in-progress}]\n",
            ("--health-grace-period", "0"),
            "FabricNotReady",
        ),
        # Registration ended with an error: reported at once, whatever the grace period.
        (
            "gb200-nvl4",
            "  fabric: [{gpu: 2, after_calls: 0, status: NVML_ERROR_UNKNOWN}]\n",
            (),
            "FabricNotReady",
        ),
        # nvml.h: NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE (1) at shift 0.
        ("gb200-nvl4", "  fabric: [{gpu: 0, after_calls: 0, health_mask: 1}]\n", (), "FabricDegraded"),
        # NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE (1) at shift 4.
        ("hgx-h200", "  fabric: [{gpu: 7, after_calls: 0, health_mask: 0x10}]\n", (), "FabricDegraded"),
        # Two of GPU 3's 18 links down from the start: seen in the one cycle there is.
        (
            "dgx-h100",
            "  nvlink_down: [{gpu: 3, after_calls: 0, links: [4, 11]}]\n",
            (),
            "NVLinkDegraded",
        ),
        ("dgx-a100", "  nvlink_down: [{gpu: 5, after_calls: 0, links: [0]}]\n", (), "NVLinkDegraded"),
        ("dgx1-v100", "  nvlink_down: [{gpu: 0, after_calls: 0}]\n", (), "NVLinkDegraded"),
    ],
)  # fmt: skip
def test_each_fault_prints_its_reason(
    tmp_path: Path, profile: str, faults: str, flags: tuple[str, ...], reason: str
) -> None:
    assert health_label(with_faults(tmp_path, profile, faults), *flags) == reason


def kernel_log(tmp_path: Path, *lines: tuple[float, str]) -> Path:
    """A kernel log in /dev/kmsg's record format, each line logged that many seconds ago."""
    now = time.monotonic()
    path = tmp_path / "kmsg"
    path.write_text(
        "6,1,0,-;Linux version 6.8.0\n"
        + "".join(
            f"3,{sequence},{int((now - ago) * 1e6)},-;{text}\n"
            for sequence, (ago, text) in enumerate(lines, start=2)
        )
    )
    return path


def test_an_xid_logged_before_gfd_started_is_reported_by_a_one_shot_run(tmp_path: Path) -> None:
    # dgx-h100's GPU 3 is at 0000:61:00.0.
    log = kernel_log(
        tmp_path,
        (120.0, "NVRM: Xid (PCI:0000:61:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus."),
    )  # fmt: skip
    assert health_label("dgx-h100", "--health-kernel-log", str(log)) == "XidError"


def test_an_xid_storm_in_the_kernel_log_is_reported_by_a_one_shot_run(tmp_path: Path) -> None:
    storm = [
        (60.0 - i, "NVRM: Xid (PCI:0000:43:00): 13, pid=4242, name=python, Graphics Exception")
        for i in range(10)
    ]
    log = kernel_log(tmp_path, *storm)
    assert health_label("dgx-h100", "--health-kernel-log", str(log)) == "healthy"
    assert (
        health_label(
            "dgx-h100", "--health-kernel-log", str(log), "--health-xid-threshold", "13:10/5m"
        )
        == "XidStorm"
    )


def test_an_ignored_xid_or_one_of_a_gpu_of_another_machine_changes_nothing(
    tmp_path: Path,
) -> None:
    log = kernel_log(
        tmp_path,
        (30.0, "NVRM: Xid (PCI:0000:43:00): 13, pid=4242, name=python, Graphics Exception"),
    )
    assert health_label("dgx-h100", "--health-kernel-log", str(log)) == "healthy"


def test_the_hosts_kernel_log_is_never_read_for_a_simulated_machine() -> None:
    """``--simulate`` with the default /dev/kmsg: the host's Xids are not the simulated
    GPUs'. A test kernel log is read under ``--simulate``; the host's is read on a host."""
    assert kernel_log_path(Settings(simulate="t4-single")) is None
    assert (
        kernel_log_path(Settings(simulate="t4-single", health_kernel_log="kmsg.txt")) == "kmsg.txt"
    )
    assert kernel_log_path(Settings()) == "/dev/kmsg"
    assert kernel_log_path(Settings(health_kernel_log=None)) is None
