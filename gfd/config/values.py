"""Value parsers: the text forms of booleans and durations, as the reference reads them.

This module owns what a duration is (Go's syntax: ``90s``, ``1h30m``, ``500ms``;
``infinite``; integer nanoseconds in the config file, with the mistakes that form
invites refused), which words are booleans, the log levels (in any case: ``DEBUG`` is
``debug``), the names of the label modes, and the names of the health checks a user
may ask for (the checks themselves are :mod:`gfd.health`'s, whose registry names each
check by its constant here, and a test holds the two to the same names: configuration
never imports the checks). Pure functions; errors are
:class:`~gfd.base.errors.ConfigError` naming ``where`` the value came from.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gfd.base.errors import ConfigError, echo
from gfd.base.frozen import frozen_dataclass

#: Go's strconv.ParseBool words, lower-cased, and yes/no/on/off.
BOOL_WORDS = {
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
        return BOOL_WORDS[text.strip().lower()]
    except KeyError:
        raise ConfigError(f"{where}: {echo(text)} is not a boolean (use true or false)") from None


#: The log levels a user may ask for, quietest last.
LOG_LEVELS = ("debug", "info", "warning", "error")


def parse_log_level(value: Any, where: str) -> str:
    """A log level in any case (``DEBUG``, ``Info``), as its lower-case name."""
    if not isinstance(value, str):
        raise ConfigError(
            f"{where}: expected a log level ({', '.join(LOG_LEVELS)}), got {echo(value)}"
        )
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{where}: {echo(value)} is not one of {', '.join(LOG_LEVELS)}")
    return level


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


#: ``--label-mode``: today's label set, as the device plugin's GFD publishes it.
LABEL_MODE_DEVICE_PLUGIN = "device-plugin"
#: ``--label-mode``: only facts of the hardware and driver (docs/labels.md, "Label modes").
LABEL_MODE_HARDWARE = "hardware"
#: ``--label-mode``: hardware where NVIDIA's DRA driver hands out the GPUs, else device-plugin.
LABEL_MODE_AUTO = "auto"
LABEL_MODES = (LABEL_MODE_DEVICE_PLUGIN, LABEL_MODE_HARDWARE, LABEL_MODE_AUTO)

GPU_LOST_CHECK = "gpu-lost"
DEVICE_PLUGIN_CHECK = "device-plugin"
FABRIC_CHECK = "fabric"
NVLINK_CHECK = "nvlink"
XID_CHECK = "xid"
MEMORY_CHECK = "memory"
PCIE_CHECK = "pcie"
#: Every health check, in the order their problems are reported (the registry's order,
#: :data:`gfd.health.registry.REGISTRY`).
HEALTH_CHECKS = (
    GPU_LOST_CHECK,
    DEVICE_PLUGIN_CHECK,
    FABRIC_CHECK,
    NVLINK_CHECK,
    XID_CHECK,
    MEMORY_CHECK,
    PCIE_CHECK,
)

#: PCIe replays a minute above which the pcie check reports a link: NVIDIA's own limit,
#: DCGM's ``DCGM_LIMIT_MAX_PCIREPLAY_RATE`` ("8 replays per minute is the maximum
#: recommended by RM", the driver's resource manager), which its PCIe health watch applies.
DEFAULT_PCIE_REPLAYS_PER_MINUTE = 8

#: The Xids NVIDIA's device plugin (v0.20.0) treats as an application's fault, not the
#: GPU's: 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
#: processing, 45 preemptive cleanup, 68 video processor exception, 109 context switch
#: timeout. Every other critical Xid marks the GPU unhealthy, there and here by default.
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
#: The largest Xid a list may name: NVIDIA's catalogue numbers them in the hundreds, and
#: a value past 16 bits is a typo, not an Xid.
MAX_XID = 65535


def parse_xids(value: Any, where: str) -> tuple[int, ...]:
    """A list of Xids: comma-separated text, or (in the config file) a list of integers;
    ``none`` or an empty list: none. Sorted, each once."""
    if isinstance(value, list):
        items: list[Any] = value
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
        if items == ["none"]:
            items = []
    else:
        raise ConfigError(f"{where}: expected a list of Xids like '13,31,43', got {echo(value)}")
    xids = set()
    for item in items:
        if isinstance(item, str) and item.isascii() and item.isdigit():
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_XID:
            raise ConfigError(
                f"{where}: {echo(item)} is not an Xid (a whole number from 1 to {MAX_XID}; "
                "none: no Xids)"
            )
        xids.add(item)
    return tuple(sorted(xids))


#: The most Xids one threshold counts before it fires: the xid check keeps that many
#: arrival times per GPU and rule, so the count bounds what it remembers.
MAX_THRESHOLD_COUNT = 10_000
#: Spelling of one ``--health-xid-threshold`` rule, for messages.
THRESHOLD_FORM = "XIDS:COUNT/WINDOW like 13,31,43:10/5m; XIDS 'ignored' counts every ignored Xid"


@frozen_dataclass
class XidThreshold:
    """``count`` or more of the Xids ``xids`` (None: every Xid not fatal) on one GPU within
    ``window`` seconds: an Xid storm (the ``xid`` check's ``XidStorm``)."""

    xids: frozenset[int] | None
    count: int
    window: float

    def describe(self) -> str:
        """The rule as written: ``13,31,43:10/5m``."""
        xids = "ignored" if self.xids is None else ",".join(map(str, sorted(self.xids)))
        return f"{xids}:{self.count}/{format_duration(self.window)}"


_THRESHOLD = re.compile(r"\s*([^:]+):\s*([0-9]+)\s*/\s*(\S+)\s*")


def parse_xid_thresholds(value: Any, where: str) -> tuple[XidThreshold, ...]:
    """Xid storm rules: ``;``-separated text (``13,31,43:10/5m;45:3/1m``), or (in the config
    file) a list of such rules; ``none`` or empty: none. Each rule once, in the order given."""
    if isinstance(value, list):
        texts: list[Any] = value
    elif isinstance(value, str):
        texts = [part for part in value.split(";") if part.strip()]
        if [text.strip() for text in texts] == ["none"]:
            texts = []
    else:
        raise ConfigError(
            f"{where}: expected Xid thresholds like '13,31,43:10/5m', got {echo(value)}"
        )
    rules: list[XidThreshold] = []
    for text in texts:
        if not isinstance(text, str):
            raise ConfigError(f"{where}: {echo(text)} is not a rule ({THRESHOLD_FORM})")
        match = _THRESHOLD.fullmatch(text)
        if match is None:
            raise ConfigError(f"{where}: {echo(text)} is not a rule ({THRESHOLD_FORM})")
        listed, count_text, window_text = match.groups()
        rule_where = f"{where}: {echo(text.strip())}"
        xids = None if listed.strip() == "ignored" else frozenset(parse_xids(listed, rule_where))
        if xids is not None and not xids:
            raise ConfigError(f"{where}: {echo(text)} names no Xid ({THRESHOLD_FORM})")
        count = int(count_text)
        if not 2 <= count <= MAX_THRESHOLD_COUNT:
            raise ConfigError(
                f"{where}: {echo(text)}: the count must be from 2 to {MAX_THRESHOLD_COUNT} "
                "(one Xid is no storm: make it fatal with --health-fatal-xids instead)"
            )
        window = parse_duration(window_text, rule_where)
        if window is None or window <= 0:
            raise ConfigError(
                f"{where}: {echo(text)}: the window must be a duration above 0, like 5m"
            )
        rule = XidThreshold(xids, count, window)
        if rule in rules:
            raise ConfigError(f"{where}: {echo(text)} is given twice")
        rules.append(rule)
    return tuple(rules)


def parse_checks(value: str, where: str) -> tuple[str, ...]:
    """The health checks named in a comma-separated ``value`` (``none`` or empty: none)."""
    names = [part.strip() for part in value.split(",") if part.strip()]
    if names == ["none"]:
        return ()
    for name in names:
        if name not in HEALTH_CHECKS:
            raise ConfigError(
                f"{where}: {echo(name)} is not a health check (expected a comma-separated "
                f"list of {', '.join(HEALTH_CHECKS)}, or none)"
            )
    return tuple(check for check in HEALTH_CHECKS if check in names)
