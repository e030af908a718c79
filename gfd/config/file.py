"""The config file: its ``version: v1`` schema, how it is read, and the sharing section.

This module owns the file's shape (which keys exist, where each setting lives) and
its loading: read bounded, YAML checked for depth and aliases, then every key and
type checked; errors name the file and the dotted key. The values themselves are
converted by :func:`gfd.config.options.convert`, as flags and variables are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from gfd.base.errors import ConfigError, echo, shorten
from gfd.base.frozen import frozen_dataclass
from gfd.config.options import OPTIONS, convert

CONFIG_VERSION = "v1"
#: The reference's replicas are a Go int; more could not be a label value anyway.
MAX_REPLICAS = 2**63 - 1


@frozen_dataclass
class SharedResource:
    """One entry of ``sharing.<strategy>.resources``."""

    name: str
    replicas: int
    rename: str | None = None
    devices: tuple[str, ...] = ()


@frozen_dataclass
class Sharing:
    """GPU sharing from the config file: time-slicing or MPS (MPS wins when both are given)."""

    strategy: str  # "time-slicing" | "mps"
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[SharedResource, ...] = ()


_CONFIG_TREE: dict[str, Any] = {
    "version": None,
    "flags": {
        "migStrategy": None,
        "failOnInitError": None,
        "useNodeFeatureAPI": None,
        "gfd": {
            "labelMode": None,
            "oneshot": None,
            "oneshotTimeout": None,
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
            "logFormat": None,
            "healthChecks": None,
            "healthCondition": None,
            "healthLabel": None,
            "healthGracePeriod": None,
            "healthTaint": None,
            "healthTaintEffect": None,
            "healthResourceSliceInterval": None,
            "healthIgnoredXids": None,
            "healthFatalXids": None,
            "healthEventHold": None,
            "healthPcieReplayRate": None,
            "healthXidThreshold": None,
            "healthKernelLog": None,
        },
        # Device-plugin flags that share the reference's config file; accepted and ignored.
        "plugin": "*",
    },
    # Checked by parse_sharing, whose keys follow.
    "sharing": "*",
    "resources": "*",
}
#: ``sharing``'s strategies (MPS wins when both are given), the keys of each, and those of
#: an entry of its ``resources`` list.
SHARING_STRATEGIES = ("timeSlicing", "mps")
SHARING_KEYS = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
SHARED_RESOURCE_KEYS = ("name", "replicas", "rename", "devices")


def config_keys() -> frozenset[str]:
    """Every leaf key a config file may hold, dotted (``flags.gfd.oneshot``); the entries of
    a list as ``[]`` (``sharing.mps.resources[].name``); a subtree gfd accepts without
    reading it (the device plugin's) as ``.*`` (``flags.plugin.*``). The complete example
    in docs/config-file.md is held to this set."""
    keys: set[str] = set()

    def walk(tree: Mapping[str, Any], at: str) -> None:
        for key, schema in tree.items():
            dotted = f"{at}{key}"
            if isinstance(schema, dict):
                walk(schema, f"{dotted}.")
            elif key == "sharing" and not at:
                for strategy in SHARING_STRATEGIES:
                    for entry in SHARING_KEYS:
                        if entry != "resources":
                            keys.add(f"sharing.{strategy}.{entry}")
                    keys.update(
                        f"sharing.{strategy}.resources[].{field}" for field in SHARED_RESOURCE_KEYS
                    )
            elif schema == "*":
                keys.add(f"{dotted}.*")
            else:
                keys.add(dotted)

    walk(_CONFIG_TREE, "")
    return frozenset(keys)


@frozen_dataclass
class ConfigFile:
    """What a config file set: option values by setting name, and sharing."""

    values: Mapping[str, Any] = field(default_factory=dict)
    sharing: Sharing | None = None


def load_config_file(path: str) -> ConfigFile:
    """Read and check a config file; every error names the file and the key.

    The file is read bounded (:data:`gfd.base.inputs.CONFIG_FILE_LIMIT`) and its YAML
    checked for depth and aliases before it is loaded.
    """
    import yaml

    from gfd.base.inputs import CONFIG_FILE_LIMIT, InputRejected, check_yaml, read_bounded_text

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
        if key not in SHARING_STRATEGIES:
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
    for key in block:
        if key not in SHARING_KEYS:
            raise ConfigError(
                f"{where}.{shorten(str(key), 80)}: unknown key (expected one of: {', '.join(SHARING_KEYS)})"
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
        if key not in SHARED_RESOURCE_KEYS:
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
