"""Configuration: precedence (flag/env > file > default) and every error path, with what and where."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.cli import UsageError, parse_command_line
from gfd.config import (
    DEFAULT_OUTPUT_FILE,
    OPTIONS,
    ConfigError,
    HostPaths,
    Settings,
    SharedResource,
    Sharing,
    parse_duration,
    resolve_settings,
)
from tests.host import NOT_IN_A_POD

#: Where no ServiceAccount namespace file is: the tests must not depend on running in a pod.


def settings_for(
    argv: list[str], env: dict[str, str] | None = None, *, host: HostPaths = NOT_IN_A_POD
) -> Settings:
    _, explicit = parse_command_line(argv)
    return resolve_settings(explicit, env or {}, host=host)


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_match_the_reference() -> None:
    s = settings_for([])
    assert (s.mig_strategy, s.fail_on_init_error, s.oneshot, s.no_timestamp) == (
        "none",
        True,
        False,
        False,
    )
    assert s.sleep_interval == 60.0
    assert s.output_file == DEFAULT_OUTPUT_FILE
    assert s.machine_type_file == "/sys/class/dmi/id/product_name"
    # Unlike the reference, no "default": the namespace is the pod's own, or unknown.
    assert s.namespace is None


def test_namespace_is_the_pods_own(tmp_path: Path) -> None:
    (tmp_path / "own").mkdir()
    write(tmp_path / "own", "gpu-operator\n", name="namespace")
    own = HostPaths(service_account_dir=str(tmp_path / "own"))
    env = {"NAMESPACE": "from-env"}
    assert settings_for([], env, host=own).namespace == "gpu-operator"
    assert settings_for([], env).namespace == "from-env"
    assert settings_for(["--namespace", "flag"], env, host=own).namespace == "flag"
    (tmp_path / "empty").mkdir()
    write(tmp_path / "empty", "\n", name="namespace")
    empty = HostPaths(service_account_dir=str(tmp_path / "empty"))
    assert settings_for([], env, host=empty).namespace == "from-env"


def test_the_defaults_of_host_paths_come_from_the_host_given() -> None:
    host = HostPaths.under("/elsewhere")
    settings = resolve_settings({}, {}, host=host)
    assert settings.host == host
    assert settings.output_file == "/elsewhere/etc/kubernetes/node-feature-discovery/features.d/gfd"
    assert settings.sysfs_root == "/elsewhere/sys"
    assert settings.machine_type_file == "/elsewhere/sys/class/dmi/id/product_name"
    assert settings.health_kernel_log == "/elsewhere/dev/kmsg"
    assert host.token_file == "/elsewhere/var/run/secrets/kubernetes.io/serviceaccount/token"
    # What is given still wins over the host's defaults.
    _, explicit = parse_command_line(["--sysfs-root", "/mnt/sys", "--output-file", "-"])
    given = resolve_settings(explicit, {}, host=host)
    assert (given.sysfs_root, given.output_file) == ("/mnt/sys", "-")


def test_node_feature_api_without_a_namespace_is_an_error() -> None:
    with pytest.raises(ConfigError, match="needs a namespace.*set --namespace or NAMESPACE"):
        settings_for(["--use-node-feature-api", "--node-name", "n1"])


def test_flags_in_either_position_and_bool_forms() -> None:
    s = settings_for(["--oneshot", "labels", "--no-timestamp=true", "--fail-on-init-error=false"])
    assert s.oneshot and s.no_timestamp and not s.fail_on_init_error


@pytest.mark.parametrize(
    ("env", "attr", "value"),
    [
        ({"GFD_MIG_STRATEGY": "mixed"}, "mig_strategy", "mixed"),
        ({"MIG_STRATEGY": "single"}, "mig_strategy", "single"),
        ({"GFD_LABEL_MODE": "hardware"}, "label_mode", "hardware"),
        ({"GFD_LABEL_MODE": "auto"}, "label_mode", "auto"),
        ({"GFD_FAIL_ON_INIT_ERROR": "false"}, "fail_on_init_error", False),
        ({"FAIL_ON_INIT_ERROR": "0"}, "fail_on_init_error", False),
        ({"GFD_ONESHOT": "true"}, "oneshot", True),
        ({"GFD_NO_TIMESTAMP": "TRUE"}, "no_timestamp", True),
        ({"GFD_SLEEP_INTERVAL": "5m"}, "sleep_interval", 300.0),
        ({"GFD_SLEEP_INTERVAL": "infinite"}, "sleep_interval", None),
        ({"GFD_OUTPUT_FILE": ""}, "output_file", ""),
        ({"GFD_OUTPUT_FILE": "/tmp/x"}, "output_file", "/tmp/x"),
        ({"GFD_MACHINE_TYPE_FILE": "/m"}, "machine_type_file", "/m"),
        (
            {"USE_NODE_FEATURE_API": "true", "NODE_NAME": "n1", "NAMESPACE": "gpu-operator"},
            "use_node_feature_api",
            True,
        ),
        ({"NODE_NAME": "gpu-node-1"}, "node_name", "gpu-node-1"),
        ({"NAMESPACE": "gpu-system"}, "namespace", "gpu-system"),
        ({"KUBECONFIG": ""}, "kubeconfig", None),
    ],
)
def test_environment_variables(env: dict[str, str], attr: str, value: object) -> None:
    assert getattr(settings_for([], env), attr) == value


@pytest.mark.parametrize("spelling", ["DEBUG", "Debug", "debug", " debug "])
def test_the_log_level_is_read_in_any_case(tmp_path: Path, spelling: str) -> None:
    assert settings_for(["--log-level", spelling]).log_level == "debug"
    assert settings_for([], {"GFD_LOG_LEVEL": spelling}).log_level == "debug"
    config = write(tmp_path, f"version: v1\nflags: {{gfd: {{logLevel: '{spelling}'}}}}\n")
    assert settings_for(["--config-file", config]).log_level == "debug"


@pytest.mark.parametrize("log_format", ["auto", "text", "json"])
def test_the_log_format_from_flag_environment_and_file(tmp_path: Path, log_format: str) -> None:
    assert settings_for([]).log_format == "auto"
    assert settings_for(["--log-format", log_format]).log_format == log_format
    assert settings_for([], {"GFD_LOG_FORMAT": log_format}).log_format == log_format
    config = write(tmp_path, f"version: v1\nflags: {{gfd: {{logFormat: {log_format}}}}}\n")
    assert settings_for(["--config-file", config]).log_format == log_format
    # The environment over the file, as for every setting.
    other = "json" if log_format != "json" else "text"
    assert settings_for(["--config-file", config], {"GFD_LOG_FORMAT": other}).log_format == other


def test_a_log_format_that_is_no_format_names_the_formats(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^--log-format: 'logfmt' is not one of auto, text, json$"
    ):
        settings_for(["--log-format", "logfmt"])


def test_a_log_level_that_is_no_level_names_the_levels(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^--log-level: 'TRACE' is not one of debug, info, warning, error$"
    ):
        settings_for(["--log-level", "TRACE"])
    config = write(tmp_path, "version: v1\nflags: {gfd: {logLevel: 10}}\n")
    with pytest.raises(
        ConfigError,
        match=r"flags.gfd.logLevel: expected a log level \(debug, info, warning, error\), got 10$",
    ):
        settings_for(["--config-file", config])


def test_gfd_prefixed_variable_wins_over_the_plain_one() -> None:
    assert (
        settings_for([], {"GFD_MIG_STRATEGY": "mixed", "MIG_STRATEGY": "single"}).mig_strategy
        == "mixed"
    )


def test_precedence_flag_beats_env_beats_file_beats_default(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "version: v1\nflags:\n  migStrategy: single\n  gfd:\n    sleepInterval: 30s\n    oneshot: true\n",
    )
    s = settings_for(["--config-file", config])
    assert (s.mig_strategy, s.sleep_interval, s.oneshot) == ("single", 30.0, True)
    s = settings_for(["--config-file", config], {"GFD_MIG_STRATEGY": "mixed"})
    assert s.mig_strategy == "mixed"
    s = settings_for(
        ["--config-file", config, "--mig-strategy", "none", "--oneshot=false"],
        {"GFD_MIG_STRATEGY": "mixed"},
    )
    assert (s.mig_strategy, s.oneshot, s.sleep_interval) == ("none", False, 30.0)


def test_label_mode_from_flag_env_and_file(tmp_path: Path) -> None:
    # gfd's own setting: under flags.gfd in the config file, device-plugin by default.
    assert settings_for([]).label_mode == "device-plugin"
    config = write(tmp_path, "version: v1\nflags:\n  gfd:\n    labelMode: auto\n")
    assert settings_for(["--config-file", config]).label_mode == "auto"
    env = {"GFD_LABEL_MODE": "hardware"}
    assert settings_for(["--config-file", config], env).label_mode == "hardware"
    flag = ["--config-file", config, "--label-mode", "device-plugin"]
    assert settings_for(flag, env).label_mode == "device-plugin"


def test_config_file_from_environment(tmp_path: Path) -> None:
    config = write(tmp_path, '{"version": "v1", "flags": {"failOnInitError": false}}', "c.json")
    assert settings_for([], {"CONFIG_FILE": config}).fail_on_init_error is False


def test_sleep_interval_as_integer_nanoseconds(tmp_path: Path) -> None:
    config = write(tmp_path, "version: v1\nflags: {gfd: {sleepInterval: 90000000000}}\n")
    assert settings_for(["--config-file", config]).sleep_interval == 90.0


def test_health_settings_from_the_config_file(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "version: v1\nflags: {gfd: {healthChecks: [nvlink, gpu-lost], healthLabel: true, "
        "healthCondition: false, healthGracePeriod: 2m}}\n",
    )
    s = settings_for(["--config-file", config])
    assert (s.health_checks, s.health_label, s.health_condition, s.health_grace_period) == (
        ("gpu-lost", "nvlink"),
        True,
        False,
        120.0,
    )
    none = write(tmp_path, "version: v1\nflags: {gfd: {healthChecks: []}}\n", "none.yaml")
    assert settings_for(["--config-file", none]).health_checks == ()


def test_sharing_parsed(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n",
    )
    assert settings_for(["--config-file", config]).sharing == Sharing(
        strategy="time-slicing",
        rename_by_default=True,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=4),),
    )


def test_mps_wins_over_time_slicing(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "version: v1\nsharing:\n  timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}\n"
        "  mps: {resources: [{name: nvidia.com/gpu, replicas: 3}]}\n",
    )
    sharing = settings_for(["--config-file", config]).sharing
    assert sharing is not None and sharing.strategy == "mps" and sharing.resources[0].replicas == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flags: {}\n", "version: None is not supported (use version: v1)"),
        ("version: v2\n", "version: 'v2' is not supported"),
        ("version: v1\nflagz: {}\n", "flagz: unknown key"),
        (
            "version: v1\nflags: {gfd: {sleepInterval: soon}}\n",
            "flags.gfd.sleepInterval: 'soon' is not a duration",
        ),
        (
            "version: v1\nflags: {gfd: {sleepInterval: true}}\n",
            "flags.gfd.sleepInterval: expected a duration",
        ),
        ("version: v1\nflags: {gfd: {sleepInterval: 0s}}\n", "the interval must be positive"),
        ("version: v1\nflags: {gfd: {sleepInterval: -5}}\n", "must not be negative"),
        (
            "version: v1\nflags: {gfd: {oneshot: maybe}}\n",
            "flags.gfd.oneshot: expected true or false",
        ),
        ("version: v1\nflags: {gfd: {outputFile: 5}}\n", "flags.gfd.outputFile: expected a string"),
        (
            "version: v1\nflags: {migStrategy: all}\n",
            "flags.migStrategy: 'all' is not one of none, single, mixed",
        ),
        (
            "version: v1\nflags: {gfd: {labelMode: dra}}\n",
            "flags.gfd.labelMode: 'dra' is not one of device-plugin, hardware, auto",
        ),
        (
            "version: v1\nflags: {labelMode: auto}\n",
            "flags.labelMode: unknown key",
        ),
        ("version: v1\nflags: {gfd: {colour: red}}\n", "flags.gfd.colour: unknown key"),
        ("version: v1\nflags: [1, 2]\n", "flags: expected a mapping"),
        ("- just\n- a list\n", "expected a mapping at the top level"),
        ("version: v1\nflags: {gfd: {oneshot: [unclosed\n", "not valid YAML/JSON at line"),
        (
            "version: v1\nsharing: {timeSlicing: {resources: []}}\n",
            "sharing.timeSlicing.resources: must be a non-empty list",
        ),
        (
            "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n",
            "resources[0].replicas: must be at least 2",
        ),
        (
            "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: two}]}}\n",
            "resources[0].replicas: expected an integer",
        ),
        (
            "version: v1\nsharing: {timeSlicing: {resources: [{replicas: 2}]}}\n",
            "resources[0].name: required",
        ),
        (
            "version: v1\nsharing: {timeSlicing: {resources: [{name: g, replicas: 2, extra: 1}]}}\n",
            "resources[0].extra: unknown key",
        ),
        (
            "version: v1\nsharing: {timeSlicing: {renameByDefault: yes please, resources: [{name: g, replicas: 2}]}}\n",
            "renameByDefault: expected true or false",
        ),
        ("version: v1\nsharing: {slicing: {}}\n", "sharing.slicing: unknown key"),
        (
            "version: v1\nflags: {gfd: {healthChecks: [gpu-lost, 7]}}\n",
            "flags.gfd.healthChecks: expected a list of check names",
        ),
        (
            "version: v1\nflags: {gfd: {healthChecks: [gpu-lost, xids]}}\n",
            "flags.gfd.healthChecks: 'xids' is not a health check",
        ),
        (
            "version: v1\nsharing: {mps: {resources: {name: g}}}\n",
            "sharing.mps.resources: must be a non-empty list",
        ),
    ],
)
def test_config_file_errors_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        settings_for(["--config-file", config])
    assert f"config file {config}" in str(caught.value)
    assert message in str(caught.value)


def test_unreadable_and_non_utf8_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        settings_for(["--config-file", str(tmp_path / "absent.yaml")])
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        settings_for(["--config-file", str(bad)])


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--mig-strategy", "all"], {}, "--mig-strategy: 'all' is not one of"),
        (["--label-mode", "dra"], {}, "--label-mode: 'dra' is not one of"),
        ([], {"GFD_LABEL_MODE": "Hardware"}, "environment variable GFD_LABEL_MODE: 'Hardware'"),
        (["--sleep-interval", "10x"], {}, "--sleep-interval: '10x' is not a duration"),
        (["--oneshot=perhaps"], {}, "--oneshot: 'perhaps' is not a boolean"),
        ([], {"GFD_SLEEP_INTERVAL": "fast"}, "environment variable GFD_SLEEP_INTERVAL"),
        ([], {"GFD_ONESHOT": "2"}, "environment variable GFD_ONESHOT: '2' is not a boolean"),
        (["--log-level", "loud"], {}, "--log-level"),
        (["--patch-node"], {}, "need the node name"),
        (["--timestamp-annotation"], {}, "--timestamp-annotation needs --patch-node"),
    ],
)
def test_flag_and_env_errors(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        settings_for(argv, env)


def test_unknown_flag_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"^unknown flag '--colour' \(gfd --help lists them\)$"):
        parse_command_line(["--colour"])


def _every_abbreviation() -> list[list[str]]:
    """Each flag of every parser cut short by one or more characters, with its value."""
    from gfd.cli import build_parser

    parser = build_parser()
    flags = {flag for action in parser._actions for flag in action.option_strings}
    cases = []
    for option in OPTIONS:
        for end in range(3, len(option.flag)):
            prefix = option.flag[:end]
            if prefix not in flags:
                value = [] if option.kind == "bool" else ["x"]
                cases.append([prefix, *value])
    cases.append(["facts", "--form", "json"])
    cases.append(["topo", "--fo", "json"])
    cases.append(["explain", "--require", "12.8"])
    cases.append(["select", "--min-mem", "80GB"])
    return cases


def test_a_subcommands_flag_elsewhere_names_the_subcommands_that_have_it() -> None:
    with pytest.raises(
        UsageError,
        match=r"^unknown flag '--all-nodes' here; --all-nodes is a flag of cleanup, explain only "
        r"\(gfd cleanup --all-nodes \.\.\.\)$",
    ):
        parse_command_line(["labels", "--all-nodes"])
    with pytest.raises(
        UsageError, match=r"did you mean --pod-name\?\); --pod is a flag of explain"
    ):
        parse_command_line(["--pod", "ml/a"])


@pytest.mark.parametrize("argv", _every_abbreviation(), ids=lambda argv: " ".join(argv))
def test_no_flag_is_ever_abbreviated(argv: list[str]) -> None:
    """As in Go's flag package: a prefix that matches one flag today could silently pick
    another when a flag is added; so every prefix is an unknown flag, subcommands' too."""
    given = next(word for word in argv if word.startswith("-"))
    with pytest.raises(UsageError, match=f"^unknown flag '{given}' .*did you mean --"):
        parse_command_line(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--mig", "mixed"],
            "unknown flag '--mig' (flags are never abbreviated: did you mean --mig-strategy?)",
        ),
        (
            ["--oneshot", "yes"],
            "--oneshot yes: a boolean flag takes its value after '=' (write --oneshot=yes, or --oneshot alone for true), as in NVIDIA's GFD; a separate word is read as a subcommand",
        ),
        (
            ["labels", "--no-timestamp", "FALSE"],
            "--no-timestamp FALSE: a boolean flag takes its value after '='",
        ),
        (
            ["--oneshot", "soon"],
            "unexpected word 'soon': gfd takes flags and at most one subcommand (run, labels, facts, topo, cleanup, doctor, explain, select, fleet)",
        ),
        (["labels", "topo"], "unexpected word 'topo': gfd takes flags and at most one subcommand"),
        (["--", "labels"], "unexpected word '--'"),
        (
            ["--format", "json", "labels"],
            "--format applies to facts, topo, doctor, explain, select, fleet only (gfd facts --format json), not to labels",
        ),
        (
            ["--format=json"],
            "--format applies to facts, topo, doctor, explain, select, fleet only (gfd facts --format json), not to run",
        ),
        (
            ["--simulat", "t4-single"],
            "unknown flag '--simulat' (flags are never abbreviated: did you mean --simulate?)",
        ),
        (["--slep-interval=5s"], "unknown flag '--slep-interval' (did you mean --sleep-interval?)"),
    ],
)
def test_command_line_mistakes_say_what_was_meant(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_command_line(argv)
    assert str(refused.value).startswith(message)


def test_a_boolean_flag_before_a_subcommand_or_a_flag_stays_a_bare_true() -> None:
    namespace, explicit = parse_command_line(["--oneshot", "labels", "--no-timestamp", "-o", "-"])
    assert namespace.command == "labels"
    assert explicit["oneshot"] and explicit["no_timestamp"] and explicit["output_file"] == "-"
    _, explicit = parse_command_line(["--oneshot=no", "--print-labels=Yes"])
    assert (explicit["oneshot"], explicit["print_labels"]) == (False, True)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("50ms", 0.05),
        ("1.5s", 1.5),
        ("infinite", None),
        ("2h", 7200.0),
        ("0", 0.0),
        ("2562047h", 2562047 * 3600.0),
    ],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text, "x") == seconds


@pytest.mark.parametrize("text", ["", "s", "5 m", "5d", "m5", "1h-5m", "five", "1e3s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a duration"):
        parse_duration(text, "x")


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["--sleep-interval", "60"], {}, "--sleep-interval: '60' has no unit; write 60s"),
        (["--sleep-interval=1.5"], {}, "--sleep-interval: '1.5' has no unit; write 1.5s"),
        (
            [],
            {"GFD_SLEEP_INTERVAL": "60"},
            "environment variable GFD_SLEEP_INTERVAL: '60' has no unit; write 60s",
        ),
        (
            ["--output-file-expiry", "3600"],
            {},
            "--output-file-expiry: '3600' has no unit; write 3600s",
        ),
        (
            [],
            {"GFD_OUTPUT_FILE_EXPIRY": "3600"},
            "environment variable GFD_OUTPUT_FILE_EXPIRY: '3600' has no unit; write 3600s",
        ),
        (["--sleep-interval=-5s"], {}, "--sleep-interval: a duration must not be negative"),
    ],
)
def test_a_duration_without_a_unit_is_refused_in_flags_and_environment(
    argv: list[str], env: dict[str, str], line: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_for(argv, env)
    assert str(caught.value) == line or str(caught.value).startswith(line)


def test_an_explicit_small_duration_with_a_unit_is_allowed() -> None:
    assert settings_for(["--sleep-interval", "50ms"]).sleep_interval == 0.05
    assert settings_for([], {"GFD_SLEEP_INTERVAL": "60s"}).sleep_interval == 60.0


@pytest.mark.parametrize("value", ["99999999999h", "2562048h", "9" * 400 + "s"])
def test_a_duration_too_large_to_represent_is_one_line(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_for(["--sleep-interval", value])
    message = str(caught.value)
    assert "is too large" in message and "\n" not in message
    assert len(message) < 200, "the value is echoed cut short"


def test_config_file_integer_nanoseconds_are_kept(tmp_path: Path) -> None:
    config = write(tmp_path, "version: v1\nflags: {gfd: {sleepInterval: 60000000000}}\n")
    assert settings_for(["--config-file", config]).sleep_interval == 60.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "sleepInterval: 60",
            "flags.gfd.sleepInterval: 60 is read as 60 nanoseconds (an integer here is "
            "nanoseconds); if you meant seconds, write '60s'",
        ),
        ("outputFileExpiry: 3600", "flags.gfd.outputFileExpiry: 3600 is read as 3600 nanoseconds"),
        ("sleepInterval: 999999999", "999999999 is read as 999999999 nanoseconds"),
        ("sleepInterval: '60'", "flags.gfd.sleepInterval: '60' has no unit; write 60s"),
        ("sleepInterval: 9223372036854775808", "9223372036854775808ns is too large"),
        ("sleepInterval: 10000000000000000000000000h", "is too large"),
    ],
)
def test_config_file_durations_that_are_likely_mistakes(
    tmp_path: Path, text: str, message: str
) -> None:
    config = write(tmp_path, f"version: v1\nflags: {{gfd: {{{text}}}}}\n")
    with pytest.raises(ConfigError) as caught:
        settings_for(["--config-file", config])
    assert str(caught.value).startswith(f"config file {config}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--output-file-expiry", "30s", "--sleep-interval", "1m"],
            "--output-file-expiry 30s is shorter than --sleep-interval 1m: the feature file "
            "would expire between cycles",
        ),
        (
            ["--output-file-expiry", "59s"],
            "--output-file-expiry 59s is shorter than --sleep-interval 1m",
        ),
        (
            ["--output-file-expiry", "1h", "--sleep-interval", "infinite"],
            "--output-file-expiry 1h with --sleep-interval infinite",
        ),
    ],
)
def test_an_expiry_the_loop_cannot_refresh_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_for(argv)


def test_an_expiry_the_loop_refreshes_in_time_is_accepted(tmp_path: Path) -> None:
    assert settings_for(["--output-file-expiry", "1m"]).output_file_expiry == 60.0
    assert settings_for(["--output-file-expiry", "0"]).output_file_expiry is None
    # A one-shot Job writes once: its expiry is how long the labels should live.
    assert settings_for(["--oneshot", "--output-file-expiry", "10s"]).output_file_expiry == 10.0
    config = write(
        tmp_path, "version: v1\nflags: {gfd: {sleepInterval: 10s, outputFileExpiry: 5s}}\n"
    )
    with pytest.raises(ConfigError, match="--output-file-expiry 5s is shorter than"):
        settings_for(["--config-file", config])


def test_print_labels_from_flag_env_and_file(tmp_path: Path) -> None:
    assert settings_for(["--print-labels"]).print_labels is True
    assert settings_for([], {"GFD_PRINT_LABELS": "true"}).print_labels is True
    config = write(tmp_path, "version: v1\nflags: {gfd: {printLabels: true}}\n")
    assert settings_for(["--config-file", config]).print_labels is True
    assert settings_for([]).print_labels is False
