"""Configuration: flags, environment variables and the config file, merged into Settings.

This module owns the reference's configuration surface (``reference/GFD-COMPAT.md``)
and gfd's additions, and their precedence: an explicitly set flag or environment
variable beats the config file, which beats the defaults. The config file is YAML
or JSON with ``version: v1``; unknown keys, wrong types and bad durations are
errors that name the file and the key.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gfd.errors import ConfigError, echo, shorten

DEFAULT_OUTPUT_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
MIG_STRATEGIES = ("none", "single", "mixed")
LOG_LEVELS = ("debug", "info", "warning", "error")
CONFIG_VERSION = "v1"
#: The reference's replicas are a Go int; more could not be a label value anyway.
MAX_REPLICAS = 2**63 - 1


@dataclass(frozen=True)
class SharedResource:
    """One entry of ``sharing.<strategy>.resources``."""

    name: str
    replicas: int
    rename: str | None = None
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sharing:
    """GPU sharing from the config file: time-slicing or MPS (MPS wins when both are given)."""

    strategy: str  # "time-slicing" | "mps"
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[SharedResource, ...] = ()


@dataclass(frozen=True)
class Settings:
    """Everything the agent runs with, after precedence has been applied."""

    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    oneshot: bool = False
    no_timestamp: bool = False
    #: Seconds between cycles; None means ``infinite`` (label once, then idle).
    sleep_interval: float | None = 60.0
    #: Feature file path; "" or "-" prints to stdout.
    output_file: str = DEFAULT_OUTPUT_FILE
    no_output_file: bool = False
    #: Print labels to stdout on change in addition to the other sinks.
    print_labels: bool = False
    #: Lifetime written as ``# +expiry-time=`` into the feature file; None: no directive.
    output_file_expiry: float | None = None
    machine_type_file: str = DEFAULT_MACHINE_TYPE_FILE
    sysfs_root: str = "/sys"
    config_file: str | None = None
    use_node_feature_api: bool = False
    patch_node: bool = False
    timestamp_annotation: bool = False
    kubeconfig: str | None = None
    node_name: str | None = None
    namespace: str = "default"
    pod_name: str | None = None
    log_level: str = "info"
    metrics_address: str = ""
    simulate: str | None = None
    sharing: Sharing | None = None


@dataclass(frozen=True)
class Option:
    """One setting: its flag, environment variables, config-file path and parser."""

    name: str
    flag: str
    env: tuple[str, ...]
    config_path: tuple[str, ...] | None
    kind: str  # bool | str | duration | optional-duration | choice
    help: str
    choices: tuple[str, ...] = ()
    metavar: str | None = None


OPTIONS: tuple[Option, ...] = (
    Option(
        "mig_strategy",
        "--mig-strategy",
        ("GFD_MIG_STRATEGY", "MIG_STRATEGY"),
        ("flags", "migStrategy"),
        "choice",
        "how MIG devices are labelled",
        MIG_STRATEGIES,
    ),
    Option(
        "fail_on_init_error",
        "--fail-on-init-error",
        ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"),
        ("flags", "failOnInitError"),
        "bool",
        "exit when NVML cannot be initialised (false: keep retrying with backoff)",
    ),
    Option(
        "oneshot",
        "--oneshot",
        ("GFD_ONESHOT",),
        ("flags", "gfd", "oneshot"),
        "bool",
        "label once and exit",
    ),
    Option(
        "no_timestamp",
        "--no-timestamp",
        ("GFD_NO_TIMESTAMP",),
        ("flags", "gfd", "noTimestamp"),
        "bool",
        "do not emit the gfd.timestamp label",
    ),
    Option(
        "sleep_interval",
        "--sleep-interval",
        ("GFD_SLEEP_INTERVAL",),
        ("flags", "gfd", "sleepInterval"),
        "duration",
        "time between labelling cycles (60s, 5m, or infinite)",
        metavar="DURATION",
    ),
    Option(
        "output_file",
        "--output-file",
        ("GFD_OUTPUT_FILE",),
        ("flags", "gfd", "outputFile"),
        "str",
        "NFD feature file to write ('-' or empty: print to stdout)",
        metavar="PATH",
    ),
    Option(
        "no_output_file",
        "--no-output-file",
        ("GFD_NO_OUTPUT_FILE",),
        ("flags", "gfd", "noOutputFile"),
        "bool",
        "write no feature file (use with --patch-node or --use-node-feature-api)",
    ),
    Option(
        "print_labels",
        "--print-labels",
        ("GFD_PRINT_LABELS",),
        ("flags", "gfd", "printLabels"),
        "bool",
        "also print the labels to stdout whenever they change, beside the other sinks",
    ),
    Option(
        "output_file_expiry",
        "--output-file-expiry",
        ("GFD_OUTPUT_FILE_EXPIRY",),
        ("flags", "gfd", "outputFileExpiry"),
        "optional-duration",
        "write '# +expiry-time=' this far ahead so NFD drops labels of a dead agent (0: off)",
        metavar="DURATION",
    ),
    Option(
        "machine_type_file",
        "--machine-type-file",
        ("GFD_MACHINE_TYPE_FILE",),
        ("flags", "gfd", "machineTypeFile"),
        "str",
        "file holding the machine type",
        metavar="PATH",
    ),
    Option(
        "sysfs_root",
        "--sysfs-root",
        ("GFD_SYSFS_ROOT",),
        ("flags", "gfd", "sysfsRoot"),
        "str",
        "where sysfs is mounted",
        metavar="PATH",
    ),
    Option(
        "use_node_feature_api",
        "--use-node-feature-api",
        ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"),
        ("flags", "useNodeFeatureAPI"),
        "bool",
        "publish a NodeFeature object for NFD",
    ),
    Option(
        "patch_node",
        "--patch-node",
        ("GFD_PATCH_NODE",),
        ("flags", "gfd", "patchNode"),
        "bool",
        "label the Node object directly (clusters without NFD)",
    ),
    Option(
        "timestamp_annotation",
        "--timestamp-annotation",
        ("GFD_TIMESTAMP_ANNOTATION",),
        ("flags", "gfd", "timestampAnnotation"),
        "bool",
        "with --patch-node: put gfd.timestamp in a node annotation instead of a label",
    ),
    Option(
        "kubeconfig",
        "--kubeconfig",
        ("KUBECONFIG",),
        None,
        "str",
        "kubeconfig file (default: in-cluster configuration)",
        metavar="PATH",
    ),
    Option("node_name", "--node-name", ("NODE_NAME",), None, "str", "this node's name"),
    Option(
        "namespace",
        "--namespace",
        ("NAMESPACE",),
        None,
        "str",
        "namespace of the NodeFeature object",
    ),
    Option(
        "pod_name",
        "--pod-name",
        ("POD_NAME",),
        None,
        "str",
        "this pod's name (owner reference of the NodeFeature object)",
    ),
    Option(
        "log_level",
        "--log-level",
        ("GFD_LOG_LEVEL",),
        ("flags", "gfd", "logLevel"),
        "choice",
        "log level",
        LOG_LEVELS,
    ),
    Option(
        "metrics_address",
        "--metrics-address",
        ("GFD_METRICS_ADDRESS",),
        ("flags", "gfd", "metricsAddress"),
        "str",
        "serve /metrics, /healthz and /readyz on HOST:PORT, e.g. :8079 (empty: off)",
        metavar="HOST:PORT",
    ),
    Option(
        "config_file",
        "--config-file",
        ("GFD_CONFIG_FILE", "CONFIG_FILE"),
        None,
        "str",
        "YAML or JSON config file (version: v1)",
        metavar="PATH",
    ),
    Option(
        "simulate",
        "--simulate",
        ("GFD_SIMULATE",),
        None,
        "str",
        "use the built-in NVML simulator: a bundled profile name or a facts file",
        metavar="PROFILE",
    ),
)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}

# --------------------------------------------------------------------------- #
# Value parsers

_BOOL_WORDS = {
    "1": True,
    "t": True,
    "true": True,
    "yes": True,
    "y": True,
    "on": True,
    "0": False,
    "f": False,
    "false": False,
    "no": False,
    "n": False,
    "off": False,
}
# ASCII digits only, as Go's parser: "\d" would also take fullwidth or Arabic-Indic digits.
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
#: The longest duration Go can represent (int64 nanoseconds, about 292 years), which is
#: also the reference's limit; longer ones overflow timers instead of meaning "forever".
MAX_DURATION_NANOSECONDS = 2**63 - 1
MAX_DURATION_SECONDS = MAX_DURATION_NANOSECONDS / 1e9
#: A config-file integer is nanoseconds (Go's JSON duration); one below a second is
#: almost surely seconds written without a unit (``sleepInterval: 60``).
MIN_PLAUSIBLE_NANOSECONDS = 1_000_000_000


def parse_bool(text: str, where: str) -> bool:
    """Go's strconv.ParseBool words, plus yes/no/on/off."""
    try:
        return _BOOL_WORDS[text.strip().lower()]
    except KeyError:
        raise ConfigError(f"{where}: {echo(text)} is not a boolean (use true or false)") from None


def format_duration(seconds: float) -> str:
    """Seconds as a short Go-style duration (``90s``, ``5m``, ``1h30m``, ``50ms``)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)


def parse_duration(value: Any, where: str, *, from_text: bool = True) -> float | None:
    """A Go duration (``90s``, ``1h30m``, ``500ms``) or ``infinite`` (None), in seconds.

    ``from_text``: the value is a flag or environment variable, where Go's parser
    rejects a number without a unit. Otherwise it comes from the config file, where
    an integer is nanoseconds (Go's JSON duration), but one below a second is refused
    as the likely mistake of writing seconds without a unit. ``0`` is zero everywhere.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a duration like '60s', got a boolean")
    if isinstance(value, int) and not from_text:
        if value < 0:
            raise ConfigError(f"{where}: a duration must not be negative, got {echo(value)}ns")
        if value > MAX_DURATION_NANOSECONDS:
            raise ConfigError(f"{where}: {echo(value)}ns is too large (at most about 292 years)")
        if 0 < value < MIN_PLAUSIBLE_NANOSECONDS:
            raise ConfigError(
                f"{where}: {value} is read as {value} nanoseconds (an integer here is "
                f"nanoseconds); if you meant seconds, write '{value}s'"
            )
        return value / 1e9
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a duration like '60s', got {type(value).__name__}")
    text = value.strip()
    if text.lower() == "infinite":
        return None
    if text in ("0", "-0", "+0"):
        return 0.0
    if text.startswith("-"):
        raise ConfigError(f"{where}: a duration must not be negative, got {echo(value)}")
    if re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", text):
        hint = f"; write {text}s" if len(text) <= 20 else " (write a unit: ns, us, ms, s, m, h)"
        raise ConfigError(f"{where}: {echo(value)} has no unit{hint}")
    total = 0.0
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ConfigError(
            f"{where}: {echo(value)} is not a duration (examples: 60s, 5m, 1h30m, 500ms, infinite)"
        )
    if not math.isfinite(total) or total > MAX_DURATION_SECONDS:
        raise ConfigError(
            f"{where}: {echo(value)} is too large (at most about 292 years; "
            "use 'infinite' for no repetition)"
        )
    return total


def convert(option: Option, raw: Any, where: str, *, from_text: bool) -> Any:
    """Turn a raw flag/env string (``from_text``) or config-file value into the setting's type."""
    if option.kind == "bool":
        if from_text:
            return parse_bool(str(raw), where)
        if not isinstance(raw, bool):
            raise ConfigError(f"{where}: expected true or false, got {echo(raw)}")
        return raw
    if option.kind in ("duration", "optional-duration"):
        seconds = parse_duration(raw, where, from_text=from_text)
        if option.kind == "optional-duration":
            return seconds if seconds else None
        if seconds == 0:
            raise ConfigError(f"{where}: the interval must be positive (or 'infinite')")
        return seconds
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: expected a string, got {echo(raw)}")
    if option.kind == "choice" and raw not in option.choices:
        raise ConfigError(f"{where}: {echo(raw)} is not one of {', '.join(option.choices)}")
    return raw


# --------------------------------------------------------------------------- #
# Config file

_CONFIG_TREE: dict[str, Any] = {
    "version": None,
    "flags": {
        "migStrategy": None,
        "failOnInitError": None,
        "useNodeFeatureAPI": None,
        "gfd": {
            "oneshot": None,
            "noTimestamp": None,
            "sleepInterval": None,
            "outputFile": None,
            "noOutputFile": None,
            "printLabels": None,
            "outputFileExpiry": None,
            "machineTypeFile": None,
            "sysfsRoot": None,
            "patchNode": None,
            "timestampAnnotation": None,
            "metricsAddress": None,
            "logLevel": None,
        },
        # Device-plugin flags that share the reference's config file; accepted and ignored.
        "plugin": "*",
    },
    "sharing": "*",
    "resources": "*",
}


@dataclass(frozen=True)
class ConfigFile:
    """What a config file set: option values by setting name, and sharing."""

    values: Mapping[str, Any] = field(default_factory=dict)
    sharing: Sharing | None = None


def load_config_file(path: str) -> ConfigFile:
    """Read and check a config file; every error names the file and the key.

    The file is read bounded (:data:`gfd.inputs.CONFIG_FILE_LIMIT`) and its YAML
    checked for depth and aliases before it is loaded.
    """
    import yaml

    from gfd.inputs import CONFIG_FILE_LIMIT, InputRejected, check_yaml, read_bounded_text

    try:
        text = read_bounded_text(path, CONFIG_FILE_LIMIT)
        check_yaml(text)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text") from exc
    except InputRejected as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = shorten(str(exc.problem), 200)
        raise ConfigError(f"config file {path}: not valid YAML/JSON{where}: {problem}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"config file {path}: not valid YAML/JSON: {shorten(str(exc), 200)}"
        ) from exc
    except RecursionError as exc:
        raise ConfigError(f"config file {path}: nested too deeply") from exc
    return parse_config(data, path)


def parse_config(data: Any, path: str) -> ConfigFile:
    """Check a parsed config document against the v1 schema."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    version = data.get("version")
    if version != CONFIG_VERSION:
        raise ConfigError(
            f"config file {path}: version: {echo(version)} is not supported (use version: {CONFIG_VERSION})"
        )
    _check_keys(data, _CONFIG_TREE, path, ())
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if option.config_path is None:
            continue
        node: Any = data
        for part in option.config_path:
            node = node.get(part) if isinstance(node, Mapping) else None
            if node is None:
                break
        if node is None:
            continue
        where = f"config file {path}: {'.'.join(option.config_path)}"
        values[option.name] = convert(option, node, where, from_text=False)
    sharing = parse_sharing(data.get("sharing"), path)
    return ConfigFile(values=values, sharing=sharing)


def _check_keys(
    data: Mapping[str, Any], tree: Mapping[str, Any], path: str, at: tuple[str, ...]
) -> None:
    for key, value in data.items():
        dotted = shorten(".".join((*at, str(key))), 120)
        if key not in tree:
            raise ConfigError(
                f"config file {path}: {dotted}: unknown key (expected one of: {', '.join(tree)})"
            )
        schema = tree[key]
        if isinstance(schema, dict):
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(f"config file {path}: {dotted}: expected a mapping")
            _check_keys(value, schema, path, (*at, str(key)))


def parse_sharing(data: Any, path: str) -> Sharing | None:
    """``sharing.timeSlicing`` / ``sharing.mps``; MPS wins when both are present."""
    if data is None:
        return None
    where = f"config file {path}: sharing"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping")
    for key in data:
        if key not in ("timeSlicing", "mps"):
            raise ConfigError(
                f"{where}.{shorten(str(key), 80)}: unknown key (expected timeSlicing or mps)"
            )
    chosen = "mps" if data.get("mps") is not None else "timeSlicing"
    block = data.get(chosen)
    if block is None:
        return None
    where = f"{where}.{chosen}"
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where}: expected a mapping")
    allowed = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
    for key in block:
        if key not in allowed:
            raise ConfigError(
                f"{where}.{shorten(str(key), 80)}: unknown key (expected one of: {', '.join(allowed)})"
            )
    rename_by_default = _config_bool(block, "renameByDefault", where)
    fail_gt_one = _config_bool(block, "failRequestsGreaterThanOne", where)
    resources_raw = block.get("resources")
    if not isinstance(resources_raw, list) or not resources_raw:
        raise ConfigError(f"{where}.resources: must be a non-empty list")
    resources = tuple(
        _parse_resource(item, f"{where}.resources[{i}]") for i, item in enumerate(resources_raw)
    )
    return Sharing(
        strategy="mps" if chosen == "mps" else "time-slicing",
        rename_by_default=rename_by_default,
        fail_requests_greater_than_one=fail_gt_one,
        resources=resources,
    )


def _config_bool(block: Mapping[str, Any], key: str, where: str) -> bool:
    value = block.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: expected true or false, got {echo(value)}")
    return value


def _parse_resource(item: Any, where: str) -> SharedResource:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: expected a mapping with name and replicas")
    for key in item:
        if key not in ("name", "replicas", "rename", "devices"):
            raise ConfigError(
                f"{where}.{shorten(str(key), 80)}: unknown key (expected name, replicas, rename, devices)"
            )
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: required, a resource name like nvidia.com/gpu")
    replicas = item.get("replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ConfigError(f"{where}.replicas: expected an integer, got {echo(replicas)}")
    if replicas < 2:
        raise ConfigError(f"{where}.replicas: must be at least 2, got {echo(replicas)}")
    if replicas > MAX_REPLICAS:
        raise ConfigError(f"{where}.replicas: must be at most {MAX_REPLICAS}, got {echo(replicas)}")
    rename = item.get("rename")
    if rename is not None and not isinstance(rename, str):
        raise ConfigError(f"{where}.rename: expected a string")
    devices_raw = item.get("devices", ())
    if devices_raw == "all":
        devices_raw = ()
    if not isinstance(devices_raw, list | tuple):
        raise ConfigError(f"{where}.devices: expected a list of GPU indices or UUIDs, or 'all'")
    devices = tuple(str(d) for d in devices_raw)
    return SharedResource(name=name, replicas=replicas, rename=rename, devices=devices)


# --------------------------------------------------------------------------- #
# Precedence


def resolve_settings(explicit: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Apply precedence: explicit flags, then environment, then the config file, then defaults.

    ``explicit`` holds only the flags given on the command line, already converted.
    """
    chosen: dict[str, Any] = {}
    for option in OPTIONS:
        if option.name in explicit:
            chosen[option.name] = explicit[option.name]
            continue
        for variable in option.env:
            raw = env.get(variable)
            # An empty variable is unset, except an empty output file, which means stdout.
            if raw is None or (raw == "" and option.name != "output_file"):
                continue
            chosen[option.name] = convert(
                option, raw, f"environment variable {variable}", from_text=True
            )
            break
    config_file = chosen.get("config_file")
    sharing = None
    if config_file:
        loaded = load_config_file(config_file)
        sharing = loaded.sharing
        for name, value in loaded.values.items():
            chosen.setdefault(name, value)
    settings = Settings(**chosen, sharing=sharing)
    _check_combination(settings)
    return settings


def _check_combination(settings: Settings) -> None:
    _check_expiry(settings)
    if settings.timestamp_annotation and not settings.patch_node:
        raise ConfigError(
            "--timestamp-annotation needs --patch-node (only the Node carries annotations)"
        )
    needs_node = settings.patch_node or settings.use_node_feature_api
    if needs_node and not settings.node_name:
        raise ConfigError(
            "--patch-node and --use-node-feature-api need the node name: set --node-name or NODE_NAME"
        )


def _check_expiry(settings: Settings) -> None:
    """An expiry the loop cannot refresh in time makes NFD drop every GPU label."""
    expiry = settings.output_file_expiry
    if expiry is None or settings.oneshot or settings.no_output_file:
        return
    interval = settings.sleep_interval
    if interval is None:
        raise ConfigError(
            f"--output-file-expiry {format_duration(expiry)} with --sleep-interval infinite: "
            "the feature file would expire and never be refreshed; drop the expiry or set an interval"
        )
    if expiry < interval:
        raise ConfigError(
            f"--output-file-expiry {format_duration(expiry)} is shorter than --sleep-interval "
            f"{format_duration(interval)}: the feature file would expire between cycles and NFD "
            "would drop every GPU label; make the expiry at least the interval (several is better)"
        )


def settings_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Settings))
