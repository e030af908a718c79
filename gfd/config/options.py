"""The settings gfd has: each one's flag, environment variables, config-file key and kind.

This module owns the configuration surface of ``reference/GFD-COMPAT.md`` and gfd's
additions (:data:`OPTIONS`), and :func:`convert`, which turns a raw flag,
environment or config-file value into the setting's type. A new setting is one
:class:`Option` here and one field of :class:`gfd.config.Settings`.
"""

from __future__ import annotations

from typing import Any

from gfd.base.errors import ConfigError, echo
from gfd.base.frozen import frozen_dataclass
from gfd.base.logs import LOG_FORMATS
from gfd.config.host import NODE_PATHS
from gfd.config.values import (
    HEALTH_CHECKS,
    LABEL_MODES,
    LOG_LEVELS,
    parse_bool,
    parse_checks,
    parse_duration,
    parse_log_level,
    parse_xid_thresholds,
    parse_xids,
)

DEFAULT_OUTPUT_FILE = NODE_PATHS.feature_file
DEFAULT_MACHINE_TYPE_FILE = NODE_PATHS.machine_type_file
#: How long a one-shot run may take in all before it gives up (a Job's pod that cannot
#: reach the API server says so in half a minute, not after two).
DEFAULT_ONESHOT_TIMEOUT = 30.0
MIG_STRATEGIES = ("none", "single", "mixed")
#: The effects gfd's health taint may have: both keep new pods off; NoExecute also
#: evicts running pods that do not tolerate it.
HEALTH_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
#: Where the kernel log is read for Xids (``--health-kernel-log``).
DEFAULT_KERNEL_LOG = NODE_PATHS.kernel_log
#: The largest count option accepted: far past any use, and small enough to stay exact.
MAX_COUNT = 1_000_000


@frozen_dataclass
class Option:
    """One setting: its flag, environment variables, config-file path and parser."""

    name: str
    flag: str
    env: tuple[str, ...]
    config_path: tuple[str, ...] | None
    # bool | str | optional-path | duration | optional-duration | choice | log-level |
    # checks | count | xids | xid-thresholds
    kind: str
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
        "label_mode",
        "--label-mode",
        ("GFD_LABEL_MODE",),
        ("flags", "gfd", "labelMode"),
        "choice",
        "which labels to publish: device-plugin (the device plugin's view, as the reference), "
        "hardware (only facts of the hardware and driver, for NVIDIA's DRA driver), or auto "
        "(hardware where the DRA driver hands out the node's GPUs; needs --patch-node)",
        LABEL_MODES,
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
        "oneshot_timeout",
        "--oneshot-timeout",
        ("GFD_ONESHOT_TIMEOUT",),
        ("flags", "gfd", "oneshotTimeout"),
        "duration",
        "with --oneshot: give up this long after the start, whatever the run is doing "
        "(retries of the API server included), with one line (infinite: no bound)",
        metavar="DURATION",
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
        "driver_root_ctr_path",
        "--driver-root-ctr-path",
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        None,
        "str",
        "where the NVIDIA driver's root is mounted in the container: NVML is loaded from "
        "under it (default: /driver-root when mounted, else where the container toolkit "
        "puts it; empty: the latter)",
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
        "health_checks",
        "--health-checks",
        ("GFD_HEALTH_CHECKS",),
        ("flags", "gfd", "healthChecks"),
        "checks",
        f"GPU health checks to run each cycle: a comma-separated list of "
        f"{', '.join(HEALTH_CHECKS)} (none: no checks)",
        metavar="LIST",
    ),
    Option(
        "health_condition",
        "--health-condition",
        ("GFD_HEALTH_CONDITION",),
        ("flags", "gfd", "healthCondition"),
        "bool",
        "with --patch-node: write the GPUHealthy node condition and an Event per change",
    ),
    Option(
        "health_label",
        "--health-label",
        ("GFD_HEALTH_LABEL",),
        ("flags", "gfd", "healthLabel"),
        "bool",
        "publish the label nvidia.com/gpu.health (healthy, or the problem's reason)",
    ),
    Option(
        "health_grace_period",
        "--health-grace-period",
        ("GFD_HEALTH_GRACE_PERIOD",),
        ("flags", "gfd", "healthGracePeriod"),
        "optional-duration",
        "how long a device plugin problem, a fabric registration not done, or a PCIe link "
        "below what it could reach, must last before it is reported (0: at once)",
        metavar="DURATION",
    ),
    Option(
        "health_taint",
        "--health-taint",
        ("GFD_HEALTH_TAINT",),
        ("flags", "gfd", "healthTaint"),
        "bool",
        "with --patch-node: taint the node nvidia.com/gpu.health=<reason>:<effect> while its "
        "GPUs are unhealthy, and remove the taint when they recover",
    ),
    Option(
        "health_taint_effect",
        "--health-taint-effect",
        ("GFD_HEALTH_TAINT_EFFECT",),
        ("flags", "gfd", "healthTaintEffect"),
        "choice",
        "the health taint's effect: NoSchedule (no new pods) or NoExecute (also evicts "
        "pods that do not tolerate it)",
        HEALTH_TAINT_EFFECTS,
    ),
    Option(
        "health_resource_slice_interval",
        "--health-resource-slice-interval",
        ("GFD_HEALTH_RESOURCE_SLICE_INTERVAL",),
        ("flags", "gfd", "healthResourceSliceInterval"),
        "count",
        "on a node without the device plugin's resources: read the ResourceSlices of "
        "NVIDIA's DRA driver every this many cycles, and when the node's allocatable changes",
        metavar="CYCLES",
    ),
    Option(
        "health_ignored_xids",
        "--health-ignored-xids",
        ("GFD_HEALTH_IGNORED_XIDS",),
        ("flags", "gfd", "healthIgnoredXids"),
        "xids",
        "critical Xids the xid check ignores, as an application's fault rather than the "
        "GPU's (default: 13,31,43,45,68,109, as NVIDIA's device plugin; none: ignore none)",
        metavar="LIST",
    ),
    Option(
        "health_fatal_xids",
        "--health-fatal-xids",
        ("GFD_HEALTH_FATAL_XIDS",),
        ("flags", "gfd", "healthFatalXids"),
        "xids",
        "only these critical Xids mark a GPU unhealthy, whatever --health-ignored-xids says "
        "(default: every Xid not ignored)",
        metavar="LIST",
    ),
    Option(
        "health_event_hold",
        "--health-event-hold",
        ("GFD_HEALTH_EVENT_HOLD",),
        ("flags", "gfd", "healthEventHold"),
        "optional-duration",
        "how long a fatal Xid or a rise of uncorrectable ECC errors keeps its GPU unhealthy "
        "after the last one (0 or infinite: until gfd restarts)",
        metavar="DURATION",
    ),
    Option(
        "health_pcie_replay_rate",
        "--health-pcie-replay-rate",
        ("GFD_HEALTH_PCIE_REPLAY_RATE",),
        ("flags", "gfd", "healthPcieReplayRate"),
        "count",
        "PCIe replays a minute above which the pcie check reports a GPU's link "
        "(PCIeReplaysRising; default 8, NVIDIA's limit)",
        metavar="REPLAYS",
    ),
    Option(
        "health_xid_threshold",
        "--health-xid-threshold",
        ("GFD_HEALTH_XID_THRESHOLD",),
        ("flags", "gfd", "healthXidThreshold"),
        "xid-thresholds",
        "Xid storms: XIDS:COUNT/WINDOW rules, ';'-separated (13,31,43:10/5m: 10 of these "
        "ignored Xids on a GPU within 5 minutes make it unhealthy as XidStorm, held as a fatal "
        "Xid; XIDS 'ignored': every ignored Xid; default none)",
        metavar="RULES",
    ),
    Option(
        "health_kernel_log",
        "--health-kernel-log",
        ("GFD_HEALTH_KERNEL_LOG",),
        ("flags", "gfd", "healthKernelLog"),
        "optional-path",
        "the kernel log the xid check reads for the Xids NVML's events miss (before gfd "
        f"started, during a restart): {DEFAULT_KERNEL_LOG} (default; where it cannot be read, "
        "said once, NVML's events alone), a file or FIFO in its format, or none",
        metavar="PATH",
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
        "namespace of the NodeFeature object (default: the pod's own)",
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
        "log-level",
        f"log level: {', '.join(LOG_LEVELS)} (any case)",
        LOG_LEVELS,
        metavar="LEVEL",
    ),
    Option(
        "log_format",
        "--log-format",
        ("GFD_LOG_FORMAT",),
        ("flags", "gfd", "logFormat"),
        "choice",
        "log line format: text (time, level, event, key=value), json (one object a line), or "
        "auto (json unless stderr is a terminal, then lines for a person)",
        LOG_FORMATS,
        metavar="FORMAT",
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
    if option.kind == "count":
        return _count(raw, where, from_text=from_text, unit=(option.metavar or "").lower())
    if option.kind == "xids":
        return parse_xids(raw, where)
    if option.kind == "log-level":
        return parse_log_level(raw, where)
    if option.kind == "xid-thresholds":
        return parse_xid_thresholds(raw, where)
    if option.kind == "checks" and isinstance(raw, list):
        if not all(isinstance(item, str) for item in raw):
            raise ConfigError(f"{where}: expected a list of check names, got {echo(raw)}")
        raw = ",".join(raw) if raw else "none"
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: expected a string, got {echo(raw)}")
    if option.kind == "checks":
        return parse_checks(raw, where)
    if option.kind == "optional-path":
        return None if raw.strip() in ("", "none") else raw
    if option.kind == "choice" and raw not in option.choices:
        raise ConfigError(f"{where}: {echo(raw)} is not one of {', '.join(option.choices)}")
    return raw


def _count(raw: Any, where: str, *, from_text: bool, unit: str) -> int:
    """A whole number of at least 1 (of ``unit``: cycles, replays): digits in a flag or
    variable, an integer in the file."""
    if from_text and isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        raw = int(raw.strip())
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ConfigError(f"{where}: expected a whole number of {unit}, got {echo(raw)}")
    if not 1 <= raw <= MAX_COUNT:
        raise ConfigError(f"{where}: {raw} is not between 1 and {MAX_COUNT}")
    return raw
