"""The ``fabric`` check (gfd.health.checks.fabric): a registration that failed or is late is
``FabricNotReady``, a completed one whose health mask says degraded is ``FabricDegraded``,
and a GPU without a fabric is not judged.

The health mask's layout is read from NVIDIA's ``nvml.h`` (the nvidia-nvml-dev wheel the
simulator is built against), not restated here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gfd.facts import FabricInfo
from gfd.health import FABRIC, FAILING, OK, PENDING, UNKNOWN, HealthMonitor
from gfd.health.checks.fabric import (
    DEGRADED_BANDWIDTH,
    JUDGED_HEALTH_FIELDS,
    REASON_DEGRADED,
    REASON_NOT_READY,
    ROUTE_UNHEALTHY,
)
from tests.factories import make_facts, make_gpu
from tests.health.doubles import Clock

GRACE = 300.0
NVML_ERROR_UNKNOWN = 999


def nvml_header() -> str:
    for entry in sys.path:
        for found in Path(entry).glob("nvidia/*/include/nvml.h"):
            return found.read_text(encoding="utf-8", errors="replace")
    pytest.skip("nvml.h (nvidia-nvml-dev) is not installed beside gfd")


def define(header: str, name: str) -> int:
    match = re.search(rf"^#define {name}\s+(0x[0-9a-fA-F]+|\d+)", header, re.MULTILINE)
    assert match, f"{name} is not in nvml.h"
    return int(match.group(1), 0)


def fabric(state: str = "completed", status: int = 0, health_mask: int | None = 0) -> FabricInfo:
    return FabricInfo(
        cluster_uuid="00000000-0000-0000-0000-000000000000",
        clique_id=0,
        state=state,  # type: ignore[arg-type]
        status=status,
        health_mask=health_mask,
    )


def monitor(tmp_path: Path, clock: Clock) -> HealthMonitor:
    return HealthMonitor(sysfs_root=tmp_path, checks=[FABRIC], clock=clock, grace_period=GRACE)


def test_the_judged_health_fields_are_nvml_hs() -> None:
    header = nvml_header()
    for field in JUDGED_HEALTH_FIELDS:
        assert field.shift == define(header, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{field.name}")
        assert field.width == define(header, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{field.name}")
        assert field.bad == define(header, f"NVML_GPU_FABRIC_HEALTH_MASK_{field.name}_TRUE")
    assert [field.name for field in JUDGED_HEALTH_FIELDS] == ["DEGRADED_BW", "ROUTE_UNHEALTHY"]


def test_gpus_without_a_fabric_pass(tmp_path: Path) -> None:
    """Before Hopper NVML answers NOT_SUPPORTED (no fabric facts); the real H200 captured
    (../shared/reference/real-gpu-h200-*, facts.yaml) answered state not-supported."""
    check = monitor(tmp_path, Clock())
    facts = make_facts([make_gpu(0), make_gpu(1, fabric=fabric("not-supported", health_mask=0))])
    assert check.observe(facts).results[0].state == OK
    assert check.observe(None).results[0].state == UNKNOWN


def test_a_completed_healthy_registration_passes(tmp_path: Path) -> None:
    # Healthy: each supported field reads its FALSE value (2), the rest NOT_SUPPORTED (0).
    header = nvml_header()
    healthy = (
        define(header, "NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE")
        << define(header, "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW")
    ) | (
        define(header, "NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE")
        << define(header, "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY")
    )
    check = monitor(tmp_path, Clock())
    facts = make_facts(
        [make_gpu(0, fabric=fabric(health_mask=healthy)), make_gpu(1, fabric=fabric())]
    )
    assert check.observe(facts).results[0].state == OK


def test_a_failed_registration_is_not_ready_at_once(tmp_path: Path) -> None:
    check = monitor(tmp_path, Clock())
    facts = make_facts([make_gpu(0, fabric=fabric(status=NVML_ERROR_UNKNOWN))])
    result = check.observe(facts).results[0]
    assert result.state == FAILING
    assert [(p.reason, p.message) for p in result.problems] == [
        (
            REASON_NOT_READY,
            "GPU 0 (0000:1b:00.0): NVLink fabric registration failed (NVML status 999): "
            "CUDA jobs fail on this GPU",
        )
    ]


@pytest.mark.parametrize("state", ["not-started", "in-progress"])
def test_a_registration_not_done_is_not_ready_after_the_grace_period(
    tmp_path: Path, state: str
) -> None:
    clock = Clock()
    check = monitor(tmp_path, clock)
    registering = make_facts([make_gpu(0, fabric=fabric(state))])
    pending = check.observe(registering).results[0]
    assert pending.state == PENDING
    clock.now += GRACE - 1
    assert check.observe(registering).results[0].state == PENDING
    clock.now += 1
    failing = check.observe(registering).results[0]
    assert failing.state == FAILING
    assert failing.problems[0].reason == REASON_NOT_READY
    assert failing.problems[0].message == (
        f"GPU 0 (0000:1b:00.0): NVLink fabric registration {state} past the grace period: "
        "CUDA jobs fail until it completes (is the fabric manager running?)"
    )
    # The fabric manager came up: healthy at once, and a later registration starts afresh.
    assert check.observe(make_facts([make_gpu(0, fabric=fabric())])).results[0].state == OK
    assert check.observe(registering).results[0].state == PENDING


def test_one_gpu_failing_is_reported_while_another_is_still_in_its_grace_period(
    tmp_path: Path,
) -> None:
    """As the bundled gb200-nvl4-fabric-broken profile models: three GPUs whose
    registration ended with an error, one still registering."""
    check = monitor(tmp_path, Clock())
    facts = make_facts(
        [
            make_gpu(0, fabric=fabric(status=NVML_ERROR_UNKNOWN)),
            make_gpu(1, fabric=fabric("in-progress")),
        ]
    )
    result = check.observe(facts).results[0]
    assert result.state == FAILING
    assert [p.message.split(":")[0] for p in result.problems] == ["GPU 0 (0000"]


@pytest.mark.parametrize(
    ("field", "words"),
    [(DEGRADED_BANDWIDTH, "bandwidth degraded"), (ROUTE_UNHEALTHY, "a route unhealthy")],
)
def test_health_bits_that_say_degraded_are_fabric_degraded(
    tmp_path: Path, field: object, words: str
) -> None:
    header = nvml_header()
    name = field.name  # type: ignore[attr-defined]
    mask = define(header, f"NVML_GPU_FABRIC_HEALTH_MASK_{name}_TRUE") << define(
        header, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}"
    )
    check = monitor(tmp_path, Clock())
    result = check.observe(make_facts([make_gpu(2, fabric=fabric(health_mask=mask))])).results[0]
    assert result.state == FAILING
    assert [(p.reason, p.message) for p in result.problems] == [
        (
            REASON_DEGRADED,
            f"GPU 2 (0000:1d:00.0): NVLink fabric health: {words} (health mask {mask:#x})",
        )
    ]


def test_the_bits_not_judged_pass(tmp_path: Path) -> None:
    """Recoveries in progress, the partition, the global fabric manager's connection and the
    configuration: each field's every value but degraded bandwidth and unhealthy routes."""
    header = nvml_header()
    others = 0
    for name in (
        "ROUTE_RECOVERY",
        "ACCESS_TIMEOUT_RECOVERY",
        "INCORRECT_CONFIGURATION",
        "PARTITION_ASSIGNED",
        "GFM_STATE",
    ):
        others |= define(header, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{name}") << define(
            header, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}"
        )
    check = monitor(tmp_path, Clock())
    facts = make_facts([make_gpu(0, fabric=fabric(health_mask=others))])
    assert check.observe(facts).results[0].state == OK


def test_a_reload_keeps_a_grace_period_running(tmp_path: Path) -> None:
    clock = Clock()
    first = monitor(tmp_path, clock)
    registering = make_facts([make_gpu(0, fabric=fabric("in-progress"))])
    assert first.observe(registering).results[0].state == PENDING
    clock.now += GRACE
    reloaded = HealthMonitor(
        sysfs_root=tmp_path, checks=[FABRIC], clock=clock, grace_period=GRACE, previous=first
    )
    assert reloaded.observe(registering).results[0].state == FAILING
