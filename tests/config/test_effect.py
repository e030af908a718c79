"""Flags without effect (:mod:`gfd.config.effect`): refused on the command line, warned
about where the reference accepts them, never judged from the environment or the file."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from gfd.cli import parse_command_line
from gfd.config import OPTIONS, OPTIONS_BY_NAME, resolve_settings
from gfd.config.effect import (
    IDLE_RULES,
    PRINTING_COMMANDS,
    PRINTING_SETTINGS,
    RUN_IDLE_RULES,
    IdleFlags,
    idle_flags,
)
from tests.host import NOT_IN_A_POD
from tests.host import gfd_main as main

#: A value each kind of setting accepts, to give any flag on a command line.
SAMPLE = {
    "bool": None,
    "str": "x",
    "duration": "5m",
    "optional-duration": "5m",
    "count": "3",
    "xids": "13",
    "checks": "gpu-lost",
    "log-level": "info",
    "optional-path": "/dev/kmsg",
    "xid-thresholds": "13:10/5m",
}


def judge(argv: list[str], env: dict[str, str] | None = None) -> IdleFlags:
    namespace, explicit = parse_command_line(argv)
    settings = resolve_settings(explicit, env or {}, host=NOT_IN_A_POD)
    return idle_flags(namespace.command or "run", explicit, settings)


def words(name: str) -> list[str]:
    option = OPTIONS_BY_NAME[name]
    if option.kind == "choice":
        return [option.flag, option.choices[-1]]
    value = SAMPLE[option.kind]
    return [option.flag] if value is None else [option.flag, value]


def test_every_rule_names_a_setting_and_every_printing_setting_exists() -> None:
    names = {option.name for option in OPTIONS}
    assert {rule.setting for rule in IDLE_RULES + RUN_IDLE_RULES} <= names
    for used in PRINTING_SETTINGS.values():
        assert used <= names
    assert PRINTING_SETTINGS.keys() == PRINTING_COMMANDS.keys()


PRINTING_CASES = [
    pytest.param(command, option.name, id=f"{command}-{option.flag}")
    for command in PRINTING_SETTINGS
    for option in OPTIONS
    if option.name not in PRINTING_SETTINGS[command]
    # Flags whose own combination checks refuse them first (they need --patch-node).
    and option.name not in {"timestamp_annotation", "health_taint"}
]


@pytest.mark.parametrize(("command", "name"), PRINTING_CASES)
def test_a_flag_a_printing_subcommand_does_not_use_is_refused(command: str, name: str) -> None:
    argv = [*words(name), command]
    if name in ("patch_node", "use_node_feature_api"):
        argv = ["--node-name", "n1", "--namespace", "ns", *argv]
    idle = judge(argv)
    flag = "-o/--output-file" if name == "output_file" else OPTIONS_BY_NAME[name].flag
    expected = (
        f"{flag} has no effect on 'gfd {command}', which {PRINTING_COMMANDS[command]}; drop it"
    )
    assert any(error.startswith(expected) for error in idle.errors), idle


@pytest.mark.parametrize("command", sorted(PRINTING_SETTINGS))
def test_what_a_printing_subcommand_uses_is_accepted(command: str, tmp_path: Path) -> None:
    config = tmp_path / "gfd.yaml"
    config.write_text("version: v1\n")
    if command == "fleet":
        # It reads the cluster, never the node: the node's reading settings are idle there.
        assert judge([command, "--config-file", str(config), "--log-level", "DEBUG"]) == IdleFlags()
        assert judge([command, "--sysfs-root", "/sys"]).errors
        return
    argv = [command, "--fail-on-init-error=false", "--config-file", str(config)]
    argv += ["--log-level", "DEBUG", "--sysfs-root", "/sys", "--machine-type-file", "/m"]
    argv += ["--driver-root-ctr-path", "/driver-root"]
    if command == "labels":
        argv += ["--mig-strategy", "mixed"]
    if command == "facts":
        argv += ["-o", "node.yaml"]
    assert judge(argv) == IdleFlags()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--oneshot", "--metrics-address", ":8079"],
            "--metrics-address has no effect with --oneshot: the run ends before anything could "
            "scrape it; drop it",
        ),
        (
            ["--simulate", "t4-single", "--machine-type-file", "/sys/class/dmi/id/product_name"],
            "--machine-type-file has no effect with --simulate: the simulated machine's type is "
            "its profile's machine_type; drop it",
        ),
        (
            ["labels", "--simulate", "t4-single", "--sysfs-root", "/host/sys"],
            "--sysfs-root has no effect with --simulate",
        ),
        (
            ["topo", "--simulate", "t4-single", "--driver-root-ctr-path", "/driver-root"],
            "--driver-root-ctr-path has no effect with --simulate",
        ),
        (["--no-output-file", "--print-labels", "-o", "f"], "-o/--output-file has no effect with --no-output-file"),
        (["-o", "-", "--output-file-expiry", "1h"], "--output-file-expiry has no effect without a feature file"),
        (["--health-taint-effect", "NoExecute"], "--health-taint-effect has no effect without --health-taint"),
        (["--health-condition"], "--health-condition has no effect without --patch-node"),
        (["--health-label", "--health-checks", "none"], "--health-label has no effect with --health-checks none"),
        (
            ["--health-checks", "gpu-lost,device-plugin", "--health-grace-period", "1m"],
            "--health-grace-period has no effect without a check it delays",
        ),
        (
            ["--oneshot", "--health-kernel-log", "none", "--health-ignored-xids", "13"],
            "--health-ignored-xids has no effect without the xid check, or with --oneshot and "
            "--health-kernel-log none",
        ),
        (["--health-checks", "gpu-lost", "--health-fatal-xids", "79"], "--health-fatal-xids has no effect"),
        (
            ["--oneshot", "--health-kernel-log", "none", "--health-event-hold", "1h"],
            "--health-event-hold has no effect without an event to hold",
        ),
        (["--health-checks", "gpu-lost", "--health-kernel-log", "none"], "--health-kernel-log has no effect without the xid check"),
        (["--health-checks", "gpu-lost", "--health-xid-threshold", "13:10/5m"], "--health-xid-threshold has no effect"),
        (
            ["--patch-node", "--node-name", "n", "--oneshot", "--health-resource-slice-interval", "2"],
            "--health-resource-slice-interval has no effect outside a periodic run",
        ),
    ],
)  # fmt: skip
def test_a_run_flag_that_does_nothing_here_is_refused(argv: list[str], error: str) -> None:
    idle = judge(argv)
    assert idle.errors and idle.errors[0].startswith(error), idle
    assert idle.warnings == ()


@pytest.mark.parametrize(
    ("argv", "warning"),
    [
        (["--oneshot", "--sleep-interval", "5m"], "--sleep-interval has no effect with --oneshot"),
        (["--node-name", "n1"], "--node-name has no effect without --patch-node, --use-node-feature-api or --metrics-address"),
        (["--kubeconfig", "kc"], "--kubeconfig has no effect without --patch-node"),
        (["--patch-node", "--node-name", "n", "--namespace", "ns"], "--namespace has no effect without --use-node-feature-api"),
        (["--pod-name", "p"], "--pod-name has no effect without --use-node-feature-api"),
    ],
)  # fmt: skip
def test_a_reference_flag_in_a_combination_the_reference_accepts_is_a_warning(
    argv: list[str], warning: str
) -> None:
    idle = judge(argv)
    assert idle.errors == ()
    assert len(idle.warnings) == 1 and idle.warnings[0].startswith(warning), idle


def test_the_same_settings_from_environment_or_config_file_are_not_judged(tmp_path: Path) -> None:
    """A DaemonSet's environment and a shared config file serve every mode."""
    env = {"GFD_METRICS_ADDRESS": ":8079", "GFD_SLEEP_INTERVAL": "5m", "NODE_NAME": "n1"}
    assert judge(["--oneshot"], env) == IdleFlags()
    assert judge(["labels"], {"GFD_HEALTH_LABEL": "true", "GFD_ONESHOT": "true"}) == IdleFlags()
    config = tmp_path / "gfd.yaml"
    config.write_text("version: v1\nflags: {gfd: {oneshot: true, metricsAddress: ':8079'}}\n")
    assert judge(["--config-file", str(config)]) == IdleFlags()
    # ... but a flag judged against the file's settings is: the file made it a one-shot.
    hold = ["--health-kernel-log", "none", "--health-event-hold", "1h"]
    assert judge(["--config-file", str(config), *hold]).errors


def test_a_boolean_flag_set_false_asks_for_nothing() -> None:
    assert (
        judge(["labels", "--oneshot=false", "--patch-node=false", "--print-labels=no"])
        == IdleFlags()
    )
    assert judge(["--health-condition=false"]) == IdleFlags()


def test_several_flags_without_effect_make_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--oneshot", "--metrics-address", ":1", "--health-kernel-log", "none"]
    code = main([*argv, "--health-event-hold", "1h"], env={})
    assert code == 2
    assert capsys.readouterr().err == (
        "gfd: error: --metrics-address has no effect with --oneshot: the run ends before "
        "anything could scrape it; drop it (and 1 more such flag(s))\n"
    )


def test_a_warning_is_one_log_line_and_the_run_goes_on(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        argv = ["--simulate", "t4-single", "--oneshot", "--sleep-interval", "5m"]
        argv += ["--log-level", "warning", "--health-checks", "none", "-o", str(tmp_path / "gfd")]
        code = main(
            argv,
            env={},
            stdout=out,
        )
    assert code == 0
    records = [json.loads(line) for line in err.getvalue().splitlines()]
    ignored = [record for record in records if record["event"] == "flag ignored"]
    assert [record["problem"] for record in ignored] == [
        "--sleep-interval has no effect with --oneshot (a one-shot run labels once and exits)"
    ]
    assert ignored[0]["level"] == "warning"
    assert (tmp_path / "gfd").exists()
