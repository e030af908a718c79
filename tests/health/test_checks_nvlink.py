"""The ``nvlink`` check (gfd.health.checks.nvlink): links seen up that go down, by GPU."""

from __future__ import annotations

from pathlib import Path

from gfd.health import FAILING, NVLINK, OK, HealthMonitor
from tests.factories import make_facts, make_gpu
from tests.health.doubles import links


def test_links_that_were_up_and_are_down_degrade_until_they_come_back(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    up = make_facts([make_gpu(0, nvlinks=links(True, True, True, True))])
    assert monitor.observe(up).results[0].state == OK
    down = make_facts([make_gpu(0, nvlinks=links(True, False, True, False))])
    result = monitor.observe(down).results[0]
    assert result.state == FAILING
    assert result.problems[0].message == "GPU 0 (0000:1b:00.0): NVLinks 1, 3 down (active earlier)"
    # A link that vanished from NVML's answers altogether is down too.
    gone = make_facts([make_gpu(0, nvlinks=links(True, True, True))])
    assert "NVLink 3 down" in monitor.observe(gone).results[0].problems[0].message
    assert monitor.observe(up).results[0].state == OK


def test_links_never_seen_up_are_not_reported(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=tmp_path, checks=[NVLINK])
    facts = make_facts([make_gpu(0, nvlinks=links(True, False))])
    assert monitor.observe(facts).results[0].state == OK
    assert monitor.observe(facts).results[0].state == OK
