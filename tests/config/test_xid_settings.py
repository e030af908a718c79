"""The Xid settings: the ignored and fatal lists, and the storm rules (``--health-xid-threshold``)
as a flag, an environment variable and a config-file key, each mistake refused in one line
naming the option and the item."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.cli import parse_command_line
from gfd.config import ConfigError, Settings, resolve_settings
from gfd.config.values import XidThreshold
from tests.host import NOT_IN_A_POD


def settings_for(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    _, explicit = parse_command_line(argv)
    return resolve_settings(explicit, env or {}, host=NOT_IN_A_POD)


def test_no_storm_rule_by_default() -> None:
    assert settings_for([]).health_xid_threshold == ()


def test_storm_rules_from_the_flag_in_their_order() -> None:
    settings = settings_for(["--health-xid-threshold", "13,31,43:10/5m; ignored:100/1h"])
    assert settings.health_xid_threshold == (
        XidThreshold(frozenset({13, 31, 43}), 10, 300.0),
        XidThreshold(None, 100, 3600.0),
    )
    assert [rule.describe() for rule in settings.health_xid_threshold] == [
        "13,31,43:10/5m",
        "ignored:100/1h",
    ]


def test_storm_rules_from_the_environment_and_none() -> None:
    env = {"GFD_HEALTH_XID_THRESHOLD": "109:3/30s"}
    assert settings_for([], env).health_xid_threshold == (XidThreshold(frozenset({109}), 3, 30.0),)
    assert settings_for(["--health-xid-threshold", "none"], env).health_xid_threshold == ()


def test_storm_rules_from_the_config_file_as_a_list_or_text(tmp_path: Path) -> None:
    listed = tmp_path / "listed.yaml"
    listed.write_text(
        "version: v1\nflags:\n  gfd:\n    healthXidThreshold: ['13:10/5m', '43,45:5/1m']\n"
        "    healthIgnoredXids: [13, 43, 45]\n    healthEventHold: 24h\n"
    )
    settings = settings_for(["--config-file", str(listed)])
    assert [rule.describe() for rule in settings.health_xid_threshold] == [
        "13:10/5m",
        "43,45:5/1m",
    ]
    assert settings.health_ignored_xids == (13, 43, 45)
    assert settings.health_event_hold == 24 * 3600
    text = tmp_path / "text.yaml"
    text.write_text("version: v1\nflags: {gfd: {healthXidThreshold: '13:10/5m'}}\n")
    assert settings_for(["--config-file", str(text)]).health_xid_threshold == (
        XidThreshold(frozenset({13}), 10, 300.0),
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("13:10", "--health-xid-threshold: '13:10' is not a rule (XIDS:COUNT/WINDOW like "),
        ("13,abc:3/5m", "--health-xid-threshold: '13,abc:3/5m': 'abc' is not an Xid"),
        ("13:1/5m", "--health-xid-threshold: '13:1/5m': the count must be from 2 to 10000"),
        ("13:20000/5m", "the count must be from 2 to 10000"),
        ("13:3/0s", "--health-xid-threshold: '13:3/0s': the window must be a duration above 0"),
        ("13:3/5", "--health-xid-threshold: '13:3/5': '5' has no unit; write 5s"),
        ("13:3/infinite", "the window must be a duration above 0"),
        ("13:3/5m;13:3/5m", "--health-xid-threshold: '13:3/5m' is given twice"),
        ("none:3/5m", "--health-xid-threshold: 'none:3/5m' names no Xid"),
        (
            "13,79:5/1m",
            "--health-xid-threshold 13,79:5/1m: Xid 79 is fatal (one fails its GPU at once)",
        ),
    ],
)
def test_bad_storm_rules_are_one_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_for(["--health-xid-threshold", value])
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_rule_of_an_xid_made_fatal_is_refused_and_one_made_ignored_accepted() -> None:
    with pytest.raises(ConfigError, match="Xid 13 is fatal"):
        settings_for(["--health-xid-threshold", "13:5/1m", "--health-fatal-xids", "13,79"])
    accepted = settings_for(["--health-xid-threshold", "79:5/1m", "--health-ignored-xids", "13,79"])
    assert accepted.health_xid_threshold == (XidThreshold(frozenset({79}), 5, 60.0),)


def test_bad_config_file_rules_name_the_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags: {gfd: {healthXidThreshold: [13]}}\n")
    with pytest.raises(ConfigError) as refused:
        settings_for(["--config-file", str(config)])
    assert "flags.gfd.healthXidThreshold" in str(refused.value)
    assert "13 is not a rule" in str(refused.value)
