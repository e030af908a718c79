"""The health taint's and the ResourceSlice read's settings: each as a flag, an environment
variable and a config-file key, with the configuration's precedence, and the combinations
and values refused with the setting named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.cli import parse_command_line
from gfd.config import ConfigError, Settings, resolve_settings
from tests.host import test_host

NODE = ["--patch-node", "--node-name", "gpu-node-1"]
#: Where no ServiceAccount namespace file is: the tests must not depend on running in a pod.


def settings_for(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    """Settings on the running test's host: a run built from them (the pcie tests' health
    set-up) reads the test's kernel log, not the machine's /dev/kmsg."""
    _, explicit = parse_command_line(argv)
    return resolve_settings(explicit, env or {}, host=test_host())


def config_file(tmp_path: Path, gfd_flags: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"version: v1\nflags: {{gfd: {{{gfd_flags}}}}}\n", encoding="utf-8")
    return str(path)


def taint_settings(s: Settings) -> tuple[bool, str, int]:
    return s.health_taint, s.health_taint_effect, s.health_resource_slice_interval


def test_off_by_default_with_noschedule_and_five_cycles() -> None:
    assert taint_settings(settings_for(NODE)) == (False, "NoSchedule", 5)


def test_flags() -> None:
    argv = [*NODE, "--health-taint", "--health-taint-effect", "NoExecute"]
    assert taint_settings(settings_for([*argv, "--health-resource-slice-interval=3"])) == (
        True,
        "NoExecute",
        3,
    )
    # A bare boolean flag, then a subcommand: the flag does not take it as its value.
    assert settings_for([*NODE, "--health-taint", "run"]).health_taint is True


def test_environment() -> None:
    env = {
        "GFD_HEALTH_TAINT": "true",
        "GFD_HEALTH_TAINT_EFFECT": "NoExecute",
        "GFD_HEALTH_RESOURCE_SLICE_INTERVAL": "10",
    }
    assert taint_settings(settings_for(NODE, env)) == (True, "NoExecute", 10)


def test_config_file_and_precedence(tmp_path: Path) -> None:
    path = config_file(
        tmp_path,
        "healthTaint: true, healthTaintEffect: NoExecute, healthResourceSliceInterval: 7",
    )
    from_file = settings_for([*NODE, "--config-file", path])
    assert taint_settings(from_file) == (True, "NoExecute", 7)
    # A flag beats the environment, which beats the file.
    env = {"GFD_HEALTH_TAINT_EFFECT": "NoSchedule", "GFD_HEALTH_RESOURCE_SLICE_INTERVAL": "2"}
    argv = [*NODE, "--config-file", path, "--health-resource-slice-interval", "4"]
    assert taint_settings(settings_for(argv, env)) == (True, "NoSchedule", 4)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--health-taint"], {}, "--health-taint needs --patch-node"),
        ([*NODE, "--health-taint", "--health-checks", "none"], {}, "--health-checks none"),
        (
            [*NODE, "--health-taint-effect", "PreferNoSchedule"],
            {},
            "--health-taint-effect: 'PreferNoSchedule' is not one of NoSchedule, NoExecute",
        ),
        ([*NODE, "--health-resource-slice-interval", "0"], {}, "0 is not between 1 and"),
        (
            NODE,
            {"GFD_HEALTH_RESOURCE_SLICE_INTERVAL": "5m"},
            "environment variable GFD_HEALTH_RESOURCE_SLICE_INTERVAL: expected a whole "
            "number of cycles, got '5m'",
        ),
        ([*NODE, "--health-resource-slice-interval", "-1"], {}, "a whole number of cycles"),
    ],
    ids=["no-node-sink", "no-checks", "soft-effect", "zero", "a-duration", "negative"],
)
def test_refused(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_for(argv, env)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("healthResourceSliceInterval: true", "expected a whole number of cycles, got True"),
        ("healthResourceSliceInterval: 2.5", "expected a whole number of cycles, got 2.5"),
        ("healthTaint: yes please", "expected true or false"),
        ("healthTaintEffect: noschedule", "'noschedule' is not one of NoSchedule, NoExecute"),
    ],
)
def test_refused_in_the_config_file_by_key(tmp_path: Path, value: str, message: str) -> None:
    path = config_file(tmp_path, value)
    with pytest.raises(ConfigError, match=message):
        settings_for([*NODE, "--config-file", path])
