"""Which settings take effect in which mode, and what gfd says about a flag given for nothing.

The rule: a flag typed on the command line that does nothing in the mode chosen is a
mistake in that command, so gfd refuses it (a usage error, exit 2) with one line that
names the flag, why it does nothing there, and what to do. Two kinds of exception:

- a flag of NVIDIA's GFD in a combination the reference accepts silently (``--oneshot
  --sleep-interval 60s``, ``--node-name`` without a Kubernetes sink) only draws a
  warning, so that a command line written for the reference still runs;
- a boolean flag set false asks for nothing, and is never refused.

Settings from the environment or the config file are not judged: a DaemonSet's
environment and a shared config file serve every mode (``kubectl exec`` into the pod for
``gfd labels`` sees the agent's ``GFD_SLEEP_INTERVAL``).

This module owns that rule: :data:`PRINTING_SETTINGS` (what ``labels``, ``facts`` and
``topo`` use), :data:`IDLE_RULES` (when a setting is idle in a run or under the
simulator) and :func:`idle_flags`, which judges one command line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gfd.base.frozen import frozen_dataclass
from gfd.config.options import OPTIONS_BY_NAME
from gfd.config.values import (
    DEVICE_PLUGIN_CHECK,
    FABRIC_CHECK,
    MEMORY_CHECK,
    PCIE_CHECK,
    XID_CHECK,
)

if TYPE_CHECKING:
    from gfd.config import Settings

#: What each printing subcommand does, for the line that refuses a flag it ignores.
PRINTING_COMMANDS = {
    "labels": "prints the labels and publishes nothing",
    "facts": "prints what NVML reads",
    "topo": "prints the GPU topology matrix",
    "explain": "judges a pod against the nodes",
    "select": "writes a node affinity",
    "fleet": "prints every GPU node",
}

#: Settings that say where and how the node is read: every subcommand uses them.
_READING = frozenset(
    {
        "fail_on_init_error",
        "simulate",
        "sysfs_root",
        "machine_type_file",
        "driver_root_ctr_path",
        "config_file",
        "log_level",
        "log_format",
    }
)
#: The settings each printing subcommand uses; any other flag is idle there.
PRINTING_SETTINGS: Mapping[str, frozenset[str]] = {
    # --no-timestamp asks for what labels prints anyway (no timestamp); capture scripts
    # written before that was so pass it (scripts/real-gpu-capture.sh).
    "labels": _READING | {"mig_strategy", "label_mode", "no_timestamp"},
    # -o FILE: the capture file, written whole or not at all.
    "facts": _READING | {"output_file"},
    "topo": _READING,
    # The nodes come from the API server (--kubeconfig), or one simulated node labelled
    # as gfd would (--simulate, with the labels' own settings).
    "explain": _READING | {"kubeconfig", "mig_strategy", "label_mode"},
    "select": _READING | {"kubeconfig", "mig_strategy"},
    "fleet": frozenset({"kubeconfig", "config_file", "log_level", "log_format"}),
}


@frozen_dataclass
class IdleRule:
    """A setting that does nothing when ``idle`` says so, and why."""

    setting: str
    idle: Callable[[Settings], bool]
    #: Completes "<flag> has no effect ...".
    why: str
    #: The reference accepts the combination silently: a warning, not an error.
    warn_only: bool = False


def _feature_file_written(settings: Settings) -> bool:
    return not settings.no_output_file and settings.output_file not in ("", "-")


def _grace_delays(settings: Settings) -> bool:
    """Whether a check that waits out the grace period runs: device-plugin (with the node
    sink's Node), fabric (a registration not done yet) and pcie (a link below its reach)."""
    checks = set(settings.health_checks)
    plugin = settings.patch_node and DEVICE_PLUGIN_CHECK in checks
    return plugin or bool({FABRIC_CHECK, PCIE_CHECK} & checks)


def _xids_seen(settings: Settings) -> bool:
    """Whether the xid check sees any Xid: a periodic run watches NVML's events; a one-shot
    run sees only the kernel log's (read since boot)."""
    if XID_CHECK not in settings.health_checks:
        return False
    return not settings.oneshot or settings.health_kernel_log is not None


_NO_XIDS = (
    "without the xid check, or with --oneshot and --health-kernel-log none (one cycle "
    "receives no NVML event, so only the kernel log's Xids reach it)"
)


def _kubernetes_used(settings: Settings) -> bool:
    return settings.patch_node or settings.use_node_feature_api


#: When a setting is idle, in every subcommand (the simulator) or in a run.
IDLE_RULES: tuple[IdleRule, ...] = (
    IdleRule(
        "machine_type_file",
        lambda s: s.simulate is not None,
        "with --simulate: the simulated machine's type is its profile's machine_type",
    ),
    IdleRule(
        "sysfs_root",
        lambda s: s.simulate is not None,
        "with --simulate: the simulator serves its machine's own sysfs tree",
    ),
    IdleRule(
        "driver_root_ctr_path",
        lambda s: s.simulate is not None,
        "with --simulate: the simulator's NVML library is loaded, not the driver's",
    ),
)
RUN_IDLE_RULES: tuple[IdleRule, ...] = (
    IdleRule(
        "oneshot_timeout",
        lambda s: not s.oneshot,
        "without --oneshot (a periodic agent keeps retrying, and is never bounded)",
    ),
    IdleRule(
        "sleep_interval",
        lambda s: s.oneshot,
        "with --oneshot (a one-shot run labels once and exits)",
        warn_only=True,
    ),
    IdleRule(
        "metrics_address",
        lambda s: s.oneshot and bool(s.metrics_address),
        "with --oneshot: the run ends before anything could scrape it",
    ),
    IdleRule(
        "output_file",
        lambda s: s.no_output_file,
        "with --no-output-file",
    ),
    IdleRule(
        "output_file_expiry",
        lambda s: not _feature_file_written(s),
        "without a feature file (--no-output-file, or --output-file - prints to stdout)",
    ),
    IdleRule(
        "health_taint_effect",
        lambda s: not s.health_taint,
        "without --health-taint",
    ),
    IdleRule(
        "health_condition",
        lambda s: not s.patch_node or not s.health_checks,
        "without --patch-node and a health check (the condition is the Node's)",
    ),
    IdleRule(
        "health_label",
        lambda s: not s.health_checks,
        "with --health-checks none",
    ),
    IdleRule(
        "health_grace_period",
        lambda s: not _grace_delays(s),
        "without a check it delays (device-plugin with --patch-node, fabric, pcie)",
    ),
    IdleRule(
        "health_resource_slice_interval",
        lambda s: s.oneshot or not s.patch_node or "device-plugin" not in s.health_checks,
        "outside a periodic run with --patch-node and the device-plugin check",
    ),
    IdleRule(
        "health_ignored_xids",
        lambda s: not _xids_seen(s),
        _NO_XIDS,
    ),
    IdleRule(
        "health_fatal_xids",
        lambda s: not _xids_seen(s),
        _NO_XIDS,
    ),
    IdleRule(
        "health_xid_threshold",
        lambda s: not _xids_seen(s),
        _NO_XIDS,
    ),
    IdleRule(
        "health_kernel_log",
        lambda s: XID_CHECK not in s.health_checks,
        "without the xid check (it alone reads the kernel log)",
    ),
    IdleRule(
        "health_event_hold",
        lambda s: not _xids_seen(s) and (s.oneshot or MEMORY_CHECK not in s.health_checks),
        "without an event to hold: no xid check that sees Xids (in a one-shot run only the "
        "kernel log's reach it), and no memory check over several cycles",
    ),
    IdleRule(
        "health_pcie_replay_rate",
        lambda s: s.oneshot or PCIE_CHECK not in s.health_checks,
        "with --oneshot (one read measures no rate) or without the pcie check",
    ),
    IdleRule(
        "kubeconfig",
        lambda s: not _kubernetes_used(s),
        "without --patch-node or --use-node-feature-api (nothing talks to Kubernetes)",
        warn_only=True,
    ),
    IdleRule(
        "node_name",
        # The metrics name the node too (the per-GPU series' node label).
        lambda s: not _kubernetes_used(s) and not s.metrics_address,
        "without --patch-node, --use-node-feature-api or --metrics-address",
        warn_only=True,
    ),
    IdleRule(
        "namespace",
        lambda s: not s.use_node_feature_api,
        "without --use-node-feature-api (it is the NodeFeature object's)",
        warn_only=True,
    ),
    IdleRule(
        "pod_name",
        lambda s: not s.use_node_feature_api,
        "without --use-node-feature-api (it owns the NodeFeature object)",
        warn_only=True,
    ),
)


@frozen_dataclass
class IdleFlags:
    """The command line's flags that do nothing: refused (``errors``) or only warned about."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _asks_for_something(value: Any) -> bool:
    # A boolean set false asks for nothing; any other given value asks for something.
    return value is not False


def idle_flags(command: str, given: Mapping[str, Any], settings: Settings) -> IdleFlags:
    """Judge the settings ``given`` on the command line (name → value) for ``command``
    (``run``, ``labels``, ``facts``, ``topo``, ``doctor`` or ``cleanup``) with the
    resolved ``settings``."""
    errors: list[str] = []
    warnings: list[str] = []
    asked = [name for name, value in given.items() if _asks_for_something(value)]
    if command in PRINTING_SETTINGS:
        for name in asked:
            if name not in PRINTING_SETTINGS[command]:
                errors.append(
                    f"{_flag(name)} has no effect on 'gfd {command}', which "
                    f"{PRINTING_COMMANDS[command]}; drop it{_printing_hint(name)}"
                )
    # doctor and cleanup take the run's settings to examine or undo what a run does: only
    # what the simulator makes idle is idle there.
    rules = IDLE_RULES + (RUN_IDLE_RULES if command == "run" else ())
    own = (
        PRINTING_SETTINGS.get(command, frozenset())
        if command in ("explain", "select", "fleet")
        else ()
    )
    for rule in rules:
        if rule.setting in own:
            continue  # the command uses it itself (explain's --kubeconfig)
        if rule.setting in asked and rule.idle(settings):
            line = f"{_flag(rule.setting)} has no effect {rule.why}"
            (warnings if rule.warn_only else errors).append(
                line if rule.warn_only else f"{line}; drop it"
            )
    return IdleFlags(tuple(errors), tuple(warnings))


def _flag(name: str) -> str:
    flag = OPTIONS_BY_NAME[name].flag
    return f"-o/{flag}" if name == "output_file" else flag


def _printing_hint(name: str) -> str:
    if name == "output_file":
        return " (redirect stdout; gfd --oneshot -o FILE publishes a feature file)"
    return ""
