"""Configuration: flags, environment variables and the config file, merged into Settings.

The package is split by what changes together: :mod:`gfd.config.options` (each
setting's flag, environment variables and config key), :mod:`gfd.config.file` (the
config file's schema and loader), :mod:`gfd.config.values` (duration, boolean and
log-level parsers), :mod:`gfd.config.effect` (which flags do nothing in which mode, and
what is said about them). This module owns :class:`Settings` and the precedence, as the reference
has it (``reference/GFD-COMPAT.md``): an explicitly set flag or environment variable
beats the config file, which beats the defaults; and the checks of how settings
combine. Everything callers need is re-exported here (the config file's names on first use).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.base.errors import ConfigError
from gfd.base.frozen import frozen_dataclass
from gfd.config.host import NODE_PATHS, HostPaths
from gfd.config.options import (
    DEFAULT_KERNEL_LOG,
    DEFAULT_MACHINE_TYPE_FILE,
    DEFAULT_ONESHOT_TIMEOUT,
    DEFAULT_OUTPUT_FILE,
    MIG_STRATEGIES,
    OPTIONS,
    OPTIONS_BY_NAME,
    Option,
    convert,
)
from gfd.config.values import (
    DEFAULT_IGNORED_XIDS,
    DEFAULT_PCIE_REPLAYS_PER_MINUTE,
    HEALTH_CHECKS,
    LABEL_MODE_AUTO,
    LABEL_MODE_DEVICE_PLUGIN,
    LABEL_MODE_HARDWARE,
    LABEL_MODES,
    LOG_LEVELS,
    MAX_DURATION_SECONDS,
    XidThreshold,
    format_duration,
    parse_bool,
    parse_duration,
)

if TYPE_CHECKING:
    from gfd.config.file import (
        CONFIG_VERSION,
        MAX_REPLICAS,
        ConfigFile,
        SharedResource,
        Sharing,
        load_config_file,
        parse_config,
        parse_sharing,
    )

#: The names above of :mod:`gfd.config.file`, imported when first asked for (PEP 562):
#: a run without a config file never loads its schema.
_FROM_THE_FILE_MODULE = frozenset(
    {
        "CONFIG_VERSION",
        "MAX_REPLICAS",
        "ConfigFile",
        "SharedResource",
        "Sharing",
        "load_config_file",
        "parse_config",
        "parse_sharing",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FROM_THE_FILE_MODULE:
        import gfd.config.file

        return getattr(gfd.config.file, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CONFIG_VERSION",
    "DEFAULT_MACHINE_TYPE_FILE",
    "DEFAULT_ONESHOT_TIMEOUT",
    "DEFAULT_OUTPUT_FILE",
    "LABEL_MODES",
    "LABEL_MODE_AUTO",
    "LABEL_MODE_DEVICE_PLUGIN",
    "LABEL_MODE_HARDWARE",
    "LOG_LEVELS",
    "MAX_DURATION_SECONDS",
    "MAX_REPLICAS",
    "MIG_STRATEGIES",
    "NODE_PATHS",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "ConfigError",
    "ConfigFile",
    "HostPaths",
    "Option",
    "Settings",
    "SharedResource",
    "Sharing",
    "convert",
    "format_duration",
    "load_config_file",
    "parse_bool",
    "parse_config",
    "parse_duration",
    "parse_sharing",
    "resolve_settings",
    "settings_fields",
]


@frozen_dataclass
class Settings:
    """Everything the agent runs with, after precedence has been applied."""

    mig_strategy: str = "none"
    #: --label-mode (:data:`gfd.config.values.LABEL_MODES`); auto is decided per cycle.
    label_mode: str = LABEL_MODE_DEVICE_PLUGIN
    fail_on_init_error: bool = True
    oneshot: bool = False
    #: Seconds a one-shot run may take in all (gfd.app.deadline); None: no bound.
    oneshot_timeout: float | None = DEFAULT_ONESHOT_TIMEOUT
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
    sysfs_root: str = NODE_PATHS.sysfs_root
    #: --driver-root-ctr-path; None: /driver-root when mounted (gfd.nvml.driver_root).
    driver_root_ctr_path: str | None = None
    config_file: str | None = None
    use_node_feature_api: bool = False
    patch_node: bool = False
    timestamp_annotation: bool = False
    kubeconfig: str | None = None
    node_name: str | None = None
    #: Of the NodeFeature object; None: unknown (not in a pod, and NAMESPACE unset).
    namespace: str | None = None
    pod_name: str | None = None
    log_level: str = "info"
    #: --log-format: auto (JSON unless stderr is a terminal), text or json (gfd.base.logs).
    log_format: str = "auto"
    metrics_address: str = ""
    simulate: str | None = None
    #: The GPU health checks to run (:data:`gfd.config.values.HEALTH_CHECKS`); empty: none.
    health_checks: tuple[str, ...] = HEALTH_CHECKS
    health_condition: bool = True
    health_label: bool = False
    #: Seconds a device plugin problem, or a PCIe link below its reach, must last before it
    #: is reported; None: none.
    health_grace_period: float | None = 300.0
    #: gfd's taint nvidia.com/gpu.health on an unhealthy node (gfd.health.taint).
    health_taint: bool = False
    health_taint_effect: str = "NoSchedule"
    #: On a node without the device plugin's resources, the cycles between two reads of
    #: the DRA driver's ResourceSlices (gfd.health.checks.device_plugin).
    health_resource_slice_interval: int = 5
    #: The xid check's Xids (gfd.health.checks.xid): those that mark a GPU unhealthy when
    #: given (the ignored ones are then not consulted), else every Xid not ignored.
    health_ignored_xids: tuple[int, ...] = DEFAULT_IGNORED_XIDS
    health_fatal_xids: tuple[int, ...] = ()
    #: Seconds a fatal Xid, an Xid storm or an ECC rise holds its GPU unhealthy; None: the
    #: process's life.
    health_event_hold: float | None = None
    #: PCIe replays a minute above which the pcie check reports a link (gfd.health.checks.pcie).
    health_pcie_replay_rate: int = DEFAULT_PCIE_REPLAYS_PER_MINUTE
    #: Xid storms: so many of the non-fatal Xids a rule names within its window.
    health_xid_threshold: tuple[XidThreshold, ...] = ()
    #: The kernel log read for Xids (gfd.nvml.kernel_xids); None: NVML's events alone.
    health_kernel_log: str | None = DEFAULT_KERNEL_LOG
    sharing: Sharing | None = None
    #: The host paths no setting names (``/proc``, the ServiceAccount's folder), and where
    #: the defaults above came from (:mod:`gfd.config.host`).
    host: HostPaths = NODE_PATHS


def resolve_settings(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    host: HostPaths = NODE_PATHS,
) -> Settings:
    """Apply precedence: explicit flags, then environment, then the config file, then defaults.

    ``explicit`` holds only the flags given on the command line, already converted. The
    namespace is the pod's own unless ``--namespace`` is given: the ServiceAccount's
    ``namespace`` file, then ``NAMESPACE``; never a guess such as ``default``, where the
    namespaced RBAC of gfd's ServiceAccount would refuse every write. ``host`` gives the
    defaults of the settings that name a host path, and the paths no setting names.
    """
    chosen: dict[str, Any] = {}
    for option in OPTIONS:
        if option.name in explicit:
            chosen[option.name] = explicit[option.name]
            continue
        if option.name == "namespace" and (own := _pod_namespace(host.namespace_file)):
            chosen["namespace"] = own
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
        from gfd.config.file import load_config_file

        loaded = load_config_file(config_file)
        sharing = loaded.sharing
        for name, value in loaded.values.items():
            chosen.setdefault(name, value)
    for name, default in (
        ("output_file", host.feature_file),
        ("machine_type_file", host.machine_type_file),
        ("sysfs_root", host.sysfs_root),
        ("health_kernel_log", host.kernel_log),
    ):
        chosen.setdefault(name, default)
    settings = Settings(**chosen, sharing=sharing, host=host)
    _check_combination(settings)
    return settings


def _pod_namespace(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _check_combination(settings: Settings) -> None:
    _check_expiry(settings)
    if settings.timestamp_annotation and not settings.patch_node:
        raise ConfigError(
            "--timestamp-annotation needs --patch-node (only the Node carries annotations)"
        )
    if settings.health_taint and not settings.patch_node:
        raise ConfigError("--health-taint needs --patch-node (gfd taints the Node it labels)")
    if settings.health_taint and not settings.health_checks:
        raise ConfigError(
            "--health-taint with --health-checks none: no check could ever taint the node; "
            "enable checks or drop the taint"
        )
    _check_thresholds(settings)
    needs_node = settings.patch_node or settings.use_node_feature_api
    if needs_node and not settings.node_name:
        raise ConfigError(
            "--patch-node and --use-node-feature-api need the node name: set --node-name or NODE_NAME"
        )
    if settings.use_node_feature_api and not settings.namespace:
        raise ConfigError(
            "--use-node-feature-api needs a namespace: not in a pod (no "
            f"{settings.host.namespace_file}) and NAMESPACE unset; set --namespace or NAMESPACE"
        )


def _check_thresholds(settings: Settings) -> None:
    """A storm rule counts Xids that are not fatal: a fatal one fails its GPU at the first."""
    for rule in settings.health_xid_threshold:
        fatal = sorted(
            xid
            for xid in rule.xids or ()
            if (xid in settings.health_fatal_xids)
            or (not settings.health_fatal_xids and xid not in settings.health_ignored_xids)
        )
        if fatal:
            listed = ", ".join(map(str, fatal))
            raise ConfigError(
                f"--health-xid-threshold {rule.describe()}: Xid {listed} "
                f"{'is' if len(fatal) == 1 else 'are'} fatal (one fails its GPU at once): a "
                "threshold counts ignored Xids; add them to --health-ignored-xids or drop them"
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
