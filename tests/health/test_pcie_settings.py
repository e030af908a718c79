"""The pcie check's setting: the replay rate, as a flag, an environment variable and a
config-file key, with the configuration's precedence and refusals naming the setting; and
what the run gives the check (the rate, and the grace period as the settle time, none in
a one-shot run)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gfd.app.health_setup import HealthSetup
from gfd.app.node_reader import NodeReader
from gfd.app.sinks import SinkSet
from gfd.base.logs import get_logger
from gfd.config import ConfigError, Settings
from gfd.health import PCIE, PcieRules
from gfd.health.checks.pcie import PcieCheck

from .test_taint_settings import config_file, settings_for


def test_eight_a_minute_by_default() -> None:
    assert settings_for([]).health_pcie_replay_rate == 8


def test_flag_environment_and_file_with_their_precedence(tmp_path: Path) -> None:
    assert settings_for(["--health-pcie-replay-rate", "20"]).health_pcie_replay_rate == 20
    env = {"GFD_HEALTH_PCIE_REPLAY_RATE": "30"}
    assert settings_for([], env).health_pcie_replay_rate == 30
    path = config_file(tmp_path, "healthPcieReplayRate: 40")
    assert settings_for(["--config-file", path]).health_pcie_replay_rate == 40
    assert settings_for(["--config-file", path], env).health_pcie_replay_rate == 30
    argv = ["--config-file", path, "--health-pcie-replay-rate=50"]
    assert settings_for(argv, env).health_pcie_replay_rate == 50


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--health-pcie-replay-rate", "0"], {}, "--health-pcie-replay-rate: 0 is not between 1"),
        (
            [],
            {"GFD_HEALTH_PCIE_REPLAY_RATE": "8/min"},
            "environment variable GFD_HEALTH_PCIE_REPLAY_RATE: expected a whole number of "
            "replays, got '8/min'",
        ),
    ],
)
def test_refused(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_for(argv, env)


def test_refused_in_the_config_file_by_key(tmp_path: Path) -> None:
    path = config_file(tmp_path, "healthPcieReplayRate: 2.5")
    with pytest.raises(ConfigError, match="expected a whole number of replays, got 2.5"):
        settings_for(["--config-file", path])


def rules_of(settings: Settings, tmp_path: Path) -> PcieRules:
    """The rules the run's health set-up gives the pcie check."""
    setup = HealthSetup(threading.Event())
    read = NodeReader(sysfs_root=tmp_path, machine_type_file=tmp_path / "product_name")
    reporter = setup.reporter(settings, SinkSet([]), read, log=get_logger(), telemetry=None)
    assert reporter is not None
    setup.close()
    return reporter.monitor.setup.pcie


def test_the_run_gives_the_check_its_rate_and_the_grace_period(tmp_path: Path) -> None:
    periodic = settings_for(["--health-pcie-replay-rate", "12", "--health-grace-period", "2m"])
    assert rules_of(periodic, tmp_path) == PcieRules(replays_per_minute=12, settle=120.0)
    # A one-shot run reads once: what that read shows is reported.
    oneshot = settings_for(["--oneshot", "--health-grace-period", "2m"])
    assert rules_of(oneshot, tmp_path) == PcieRules(replays_per_minute=8, settle=0.0)
    assert PCIE in settings_for([]).health_checks
    assert PcieCheck.name == PCIE
