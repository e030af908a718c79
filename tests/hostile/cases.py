"""The hostile-input corpus: one row per input an operator's mistake or an attacker can give.

Each :class:`Case` names its input (flags, environment, files it plants in a scratch
directory, a raw answer of the API server), the exit code gfd must give and the line
it must print: the first line of stderr that is not a JSON log record, matched as a
prefix after the placeholders are filled in. ``{tmp}`` is the scratch directory,
``{good}`` the pre-existing good feature file, ``{kubeconfig}`` a working kubeconfig
for the API emulator (``node`` cases).

Bases: ``run`` is a one-shot run on the simulated T4 publishing to ``{good}``;
``env`` is the same without ``--no-timestamp`` (so environment variables can set it);
``host`` reads this machine (no simulator), for inputs checked before NVML starts;
``kube`` publishes to the emulator's node only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Fifo:
    """A named pipe with no writer: reading it naively blocks for ever."""


@dataclass(frozen=True)
class Directory:
    """A directory where a file is expected."""


@dataclass(frozen=True)
class CharDevice:
    """A character device with the numbers of ``/dev/null`` (made with mknod; root only)."""


@dataclass(frozen=True)
class Symlink:
    """A symbolic link to ``target`` (placeholders allowed)."""

    target: str


@dataclass(frozen=True)
class Sparse:
    """A sparse regular file of ``size`` bytes: huge to read, free to make."""

    size: int


FileSpec = bytes | Fifo | Directory | CharDevice | Symlink | Sparse


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    args: tuple[str, ...] = ()
    code: int = 2
    line: str = ""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, FileSpec] = field(default_factory=dict)
    base: str = "run"
    #: The emulator answers the node GET with exactly these bytes (``node`` cases).
    node_reply: bytes | None = None
    #: Also run as a real ``gfd`` process.
    process: bool = False
    #: Files (placeholders allowed) that must be left byte-for-byte as they were.
    untouched: tuple[str, ...] = ()


BASES: dict[str, tuple[str, ...]] = {
    "run": ("--simulate", "t4-single", "--oneshot", "--no-timestamp", "-o", "{good}"),
    "env": ("--simulate", "t4-single", "--oneshot", "-o", "{good}"),
    "env-no-output": ("--simulate", "t4-single", "--oneshot"),
    "periodic": ("--simulate", "t4-single", "-o", "{good}"),
    "host": ("--oneshot", "-o", "{good}"),
    "kube": (
        "--simulate",
        "t4-single",
        "--oneshot",
        "--no-timestamp",
        "--no-output-file",
        "--patch-node",
        "--node-name",
        "gpu-node-1",
        "--kubeconfig",
        "{kubeconfig}",
    ),
    "labels": ("--simulate", "t4-single", "labels"),
}

HUGE = "x" * 100_000
CFG = "gfd: error: config file {tmp}/c.yaml: "


def _laughs(levels: int = 9, width: int = 9) -> bytes:
    lines = ['a0: &a0 "lol"']
    for level in range(1, levels + 1):
        refs = ", ".join(f"*a{level - 1}" for _ in range(width))
        lines.append(f"a{level}: &a{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def _deep_block(levels: int) -> bytes:
    return "".join("  " * i + "k:\n" for i in range(levels)).encode() + b"  " * levels + b"1\n"


def flag(id: str, *args: str, line: str, code: int = 2, **kw: Any) -> Case:
    return Case(id, "flags", args, code, line, **kw)


def env(id: str, variables: dict[str, str], *, line: str, code: int = 2, **kw: Any) -> Case:
    kw.setdefault("base", "env")
    return Case(id, "env", (), code, line, env=variables, **kw)


def config(id: str, content: bytes | FileSpec, *, line: str, code: int = 2, **kw: Any) -> Case:
    args = kw.pop("args", ("--config-file", "{tmp}/c.yaml"))
    return Case(id, "config", args, code, line, files={"c.yaml": content}, **kw)


def facts(id: str, content: bytes | FileSpec, *, line: str, code: int = 2, **kw: Any) -> Case:
    return Case(
        id, "facts", ("--simulate", "{tmp}/f.yaml"), code, line, files={"f.yaml": content}, **kw
    )


def kubeconfig(
    id: str,
    content: bytes | FileSpec,
    *,
    line: str,
    code: int = 2,
    files: dict[str, FileSpec] | None = None,
) -> Case:
    return Case(
        id,
        "kubeconfig",
        ("--kubeconfig", "{tmp}/kc"),
        code,
        line,
        files={"kc": content, **(files or {})},
        base="kube",
    )


def node(id: str, reply: bytes, *, line: str) -> Case:
    return Case(id, "node", (), 1, line, base="kube", node_reply=reply)


def output(id: str, target: FileSpec | None, *, line: str, code: int = 1, **kw: Any) -> Case:
    files: dict[str, FileSpec] = {"out": target} if target is not None else {}
    files.update(kw.pop("files", {}))
    args = kw.pop("args", ("-o", "{tmp}/out"))
    return Case(id, "output", args, code, line, files=files, **kw)


_NO_UNIT = "--sleep-interval: '{0}' has no unit; write {0}s"
_NOT_DURATION = (
    "--sleep-interval: {0!r} is not a duration (examples: 60s, 5m, 1h30m, 500ms, infinite)"
)
_TOO_LARGE = "--sleep-interval: {0} is too large (at most about 292 years; use 'infinite'"

FLAGS = [
    flag("sleep-no-unit", "--sleep-interval", "60", line=f"gfd: error: {_NO_UNIT.format(60)}",
         process=True),
    flag("sleep-no-unit-fraction", "--sleep-interval=1.5", line=f"gfd: error: {_NO_UNIT.format(1.5)}"),
    flag("sleep-no-unit-leading-dot", "--sleep-interval=.5", line=f"gfd: error: {_NO_UNIT.format('.5')}"),
    flag("sleep-negative", "--sleep-interval=-1s",
         line="gfd: error: --sleep-interval: a duration must not be negative, got '-1s'"),
    flag("sleep-zero", "--sleep-interval=0s",
         line="gfd: error: --sleep-interval: the interval must be positive (or 'infinite')"),
    flag("sleep-exponent", "--sleep-interval=1e3s", line=f"gfd: error: {_NOT_DURATION.format('1e3s')}"),
    flag("sleep-unknown-unit", "--sleep-interval=5d", line=f"gfd: error: {_NOT_DURATION.format('5d')}"),
    flag("sleep-space", "--sleep-interval=5 m", line=f"gfd: error: {_NOT_DURATION.format('5 m')}"),
    flag("sleep-word", "--sleep-interval=soon", line=f"gfd: error: {_NOT_DURATION.format('soon')}"),
    flag("sleep-nan", "--sleep-interval=nan", line=f"gfd: error: {_NOT_DURATION.format('nan')}"),
    flag("sleep-inf", "--sleep-interval=inf", line=f"gfd: error: {_NOT_DURATION.format('inf')}"),
    flag("sleep-unit-first", "--sleep-interval=s5", line=f"gfd: error: {_NOT_DURATION.format('s5')}"),
    flag("sleep-fullwidth-digits", "--sleep-interval=６０s",
         line=f"gfd: error: {_NOT_DURATION.format('６０s')}"),
    flag("sleep-arabic-digits", "--sleep-interval=٦٠", line="gfd: error: --sleep-interval: '٦٠' is not a duration"),
    flag("sleep-too-large", "--sleep-interval=99999999999h",
         line=f"gfd: error: {_TOO_LARGE.format(repr('99999999999h'))}"),
    flag("sleep-one-past-go", "--sleep-interval=2562048h",
         line=f"gfd: error: {_TOO_LARGE.format(repr('2562048h'))}"),
    flag("sleep-thousand-digits", "--sleep-interval=" + "9" * 1000 + "s",
         line="gfd: error: --sleep-interval: '" + "9" * 79 + "… is too large"),
    flag("sleep-huge-garbage", "--sleep-interval=" + HUGE,
         line="gfd: error: --sleep-interval: '" + "x" * 79 + "… is not a duration"),
    flag("sleep-missing-value", "--sleep-interval",
         line="gfd: error: argument --sleep-interval: expected one argument"),
    flag("expiry-no-unit", "--output-file-expiry", "3600",
         line="gfd: error: --output-file-expiry: '3600' has no unit; write 3600s", process=True),
    flag("expiry-shorter-than-interval", "--oneshot=false", "--output-file-expiry=30s",
         line="gfd: error: --output-file-expiry 30s is shorter than --sleep-interval 1m: the "
              "feature file would expire between cycles"),
    flag("expiry-with-infinite", "--oneshot=false", "--sleep-interval=infinite",
         "--output-file-expiry=1h",
         line="gfd: error: --output-file-expiry 1h with --sleep-interval infinite: the feature "
              "file would expire and never be refreshed"),
    flag("expiry-negative", "--output-file-expiry=-5m",
         line="gfd: error: --output-file-expiry: a duration must not be negative, got '-5m'"),
    flag("expiry-too-large", "--output-file-expiry=9999999999999h",
         line="gfd: error: --output-file-expiry: '9999999999999h' is too large"),
    flag("bool-word", "--oneshot=maybe",
         line="gfd: error: --oneshot: 'maybe' is not a boolean (use true or false)"),
    flag("bool-number", "--fail-on-init-error=2",
         line="gfd: error: --fail-on-init-error: '2' is not a boolean (use true or false)"),
    flag("bool-empty", "--no-timestamp=",
         line="gfd: error: --no-timestamp: '' is not a boolean (use true or false)"),
    flag("bool-huge", "--print-labels=" + HUGE,
         line="gfd: error: --print-labels: '" + "x" * 79 + "… is not a boolean"),
    flag("mig-unknown", "--mig-strategy", "all",
         line="gfd: error: --mig-strategy: 'all' is not one of none, single, mixed"),
    flag("mig-case", "--mig-strategy", "MIXED",
         line="gfd: error: --mig-strategy: 'MIXED' is not one of none, single, mixed"),
    flag("mig-empty", "--mig-strategy=",
         line="gfd: error: --mig-strategy: '' is not one of none, single, mixed"),
    flag("mig-huge", "--mig-strategy=" + HUGE,
         line="gfd: error: --mig-strategy: '" + "x" * 79 + "… is not one of"),
    flag("log-level-unknown", "--log-level", "loud",
         line="gfd: error: --log-level: 'loud' is not one of debug, info, warning, error"),
    flag("metrics-no-port", "--metrics-address", "nonsense",
         base="periodic", line="gfd: error: --metrics-address 'nonsense': port 'nonsense' is not a number"),
    flag("metrics-port-too-big", "--metrics-address", ":99999",
         base="periodic", line="gfd: error: --metrics-address ':99999': port 99999 is outside 0-65535"),
    flag("metrics-port-digits-galore", "--metrics-address", ":" + "9" * 5000,
         base="periodic", line="gfd: error: --metrics-address ':" + "9" * 78 + "…: port '" + "9" * 79 + "… is outside 0-65535"),
    flag("metrics-port-fullwidth", "--metrics-address", ":８０７９",
         base="periodic", line="gfd: error: --metrics-address ':８０７９': port '８０７９' is not a number"),
    flag("metrics-port-underscore", "--metrics-address", ":80_79",
         base="periodic", line="gfd: error: --metrics-address ':80_79': port '80_79' is not a number"),
    flag("metrics-ipv6-unbracketed", "--metrics-address", "::1:8079",
         base="periodic", line="gfd: error: --metrics-address '::1:8079': write an IPv6 host in brackets"),
    flag("metrics-huge", "--metrics-address", HUGE,
         base="periodic", line="gfd: error: --metrics-address '" + "x" * 79 + "…: port '" + "x" * 79 + "… is not a number"),
    flag("timestamp-annotation-alone", "--timestamp-annotation",
         line="gfd: error: --timestamp-annotation needs --patch-node"),
    flag("patch-node-without-name", "--patch-node",
         line="gfd: error: --patch-node and --use-node-feature-api need the node name"),
    flag("nodefeature-without-name", "--use-node-feature-api=true",
         line="gfd: error: --patch-node and --use-node-feature-api need the node name"),
    flag("unknown-flag", "--colour=red", line="gfd: error: unknown flag '--colour' (gfd --help lists them)"),
    flag("abbreviated-flag", "--mig", "mixed",
         line="gfd: error: unknown flag '--mig' (flags are never abbreviated: did you mean --mig-strategy?)"),
    flag("metrics-with-oneshot", "--metrics-address", ":8079",
         line="gfd: error: --metrics-address has no effect with --oneshot: the run ends before "
              "anything could scrape it; drop it", process=True),
    flag("machine-type-with-simulate", "--machine-type-file", "{tmp}/dmi",
         line="gfd: error: --machine-type-file has no effect with --simulate: the simulated "
              "machine's type is its profile's machine_type; drop it"),
    flag("health-with-labels", "--health-label", base="labels",
         line="gfd: error: --health-label has no effect on 'gfd labels', which prints the labels "
              "and publishes nothing; drop it"),
    flag("output-with-labels", "-o", "{tmp}/labels.txt", base="labels",
         line="gfd: error: -o/--output-file has no effect on 'gfd labels'"),
    flag("bool-separate-word", "--print-labels", "yes",
         line="gfd: error: --print-labels yes: a boolean flag takes its value after '='", process=True),
    flag("simulate-unknown-profile", "--simulate", "no-such-machine",
         line="gfd: error: simulation profile 'no-such-machine' is neither a bundled profile"),
    flag("config-missing", "--config-file", "{tmp}/absent.yaml",
         line="gfd: error: config file {tmp}/absent.yaml: cannot read: No such file or directory"),
    flag("config-dev-zero", "--config-file", "/dev/zero",
         line="gfd: error: config file /dev/zero: is a character device, not a regular file",
         process=True),
    flag("config-directory", "--config-file", "{tmp}",
         line="gfd: error: config file {tmp}: is a directory, not a regular file"),
    flag("config-fifo", "--config-file", "{tmp}/fifo", files={"fifo": Fifo()},
         line="gfd: error: config file {tmp}/fifo: is a FIFO, not a regular file"),
    flag("machine-type-dev-zero", "--machine-type-file", "/dev/zero", base="host",
         line="gfd: error: --machine-type-file /dev/zero: is a character device, not a regular file"),
    flag("machine-type-fifo", "--machine-type-file", "{tmp}/fifo", base="host",
         files={"fifo": Fifo()},
         line="gfd: error: --machine-type-file {tmp}/fifo: is a FIFO, not a regular file"),
    flag("machine-type-directory", "--machine-type-file", "{tmp}", base="host",
         line="gfd: error: --machine-type-file {tmp}: is a directory, not a regular file"),
    flag("machine-type-huge", "--machine-type-file", "{tmp}/big", base="host",
         files={"big": Sparse(1 << 30)},
         line="gfd: error: --machine-type-file {tmp}/big: is larger than 4 KiB, the most gfd reads"),
]  # fmt: skip

ENV = [
    env("sleep-no-unit", {"GFD_SLEEP_INTERVAL": "60"},
        line="gfd: error: environment variable GFD_SLEEP_INTERVAL: '60' has no unit; write 60s",
        process=True),
    env("sleep-no-unit-fraction", {"GFD_SLEEP_INTERVAL": "0.5"},
        line="gfd: error: environment variable GFD_SLEEP_INTERVAL: '0.5' has no unit; write 0.5s"),
    env("sleep-negative", {"GFD_SLEEP_INTERVAL": "-60s"},
        line="gfd: error: environment variable GFD_SLEEP_INTERVAL: a duration must not be negative"),
    env("sleep-too-large", {"GFD_SLEEP_INTERVAL": "1" + "0" * 30 + "h"},
        line="gfd: error: environment variable GFD_SLEEP_INTERVAL: '1" + "0" * 30 + "h' is too large"),
    env("sleep-garbage", {"GFD_SLEEP_INTERVAL": "fast"},
        line="gfd: error: environment variable GFD_SLEEP_INTERVAL: 'fast' is not a duration"),
    env("sleep-huge", {"GFD_SLEEP_INTERVAL": HUGE},
        line="gfd: error: environment variable GFD_SLEEP_INTERVAL: '" + "x" * 79 + "… is not a duration"),
    env("expiry-no-unit", {"GFD_OUTPUT_FILE_EXPIRY": "3600"},
        line="gfd: error: environment variable GFD_OUTPUT_FILE_EXPIRY: '3600' has no unit; write 3600s"),
    env("expiry-too-short", {"GFD_OUTPUT_FILE_EXPIRY": "10s"}, base="periodic",
        line="gfd: error: --output-file-expiry 10s is shorter than --sleep-interval 1m"),
    env("no-timestamp-number", {"GFD_NO_TIMESTAMP": "2"},
        line="gfd: error: environment variable GFD_NO_TIMESTAMP: '2' is not a boolean"),
    env("fail-on-init-word", {"GFD_FAIL_ON_INIT_ERROR": "perhaps"},
        line="gfd: error: environment variable GFD_FAIL_ON_INIT_ERROR: 'perhaps' is not a boolean"),
    env("fail-on-init-plain-name", {"FAIL_ON_INIT_ERROR": "sometimes"},
        line="gfd: error: environment variable FAIL_ON_INIT_ERROR: 'sometimes' is not a boolean"),
    env("mig-unknown", {"GFD_MIG_STRATEGY": "all"},
        line="gfd: error: environment variable GFD_MIG_STRATEGY: 'all' is not one of none, single, mixed"),
    env("mig-plain-name", {"MIG_STRATEGY": "both"},
        line="gfd: error: environment variable MIG_STRATEGY: 'both' is not one of"),
    env("mig-huge", {"GFD_MIG_STRATEGY": HUGE},
        line="gfd: error: environment variable GFD_MIG_STRATEGY: '" + "x" * 79 + "… is not one of"),
    env("log-level", {"GFD_LOG_LEVEL": "trace"},
        line="gfd: error: environment variable GFD_LOG_LEVEL: 'trace' is not one of"),
    env("metrics-address", {"GFD_METRICS_ADDRESS": "localhost:http"},
        line="gfd: error: --metrics-address 'localhost:http': port 'http' is not a number"),
    env("config-dev-zero", {"GFD_CONFIG_FILE": "/dev/zero"},
        line="gfd: error: config file /dev/zero: is a character device, not a regular file"),
    env("config-missing", {"CONFIG_FILE": "{tmp}/absent.yaml"},
        line="gfd: error: config file {tmp}/absent.yaml: cannot read: No such file or directory"),
    env("patch-node-without-name", {"GFD_PATCH_NODE": "1"},
        line="gfd: error: --patch-node and --use-node-feature-api need the node name"),
    env("nodefeature-without-name", {"USE_NODE_FEATURE_API": "true"},
        line="gfd: error: --patch-node and --use-node-feature-api need the node name"),
    env("timestamp-annotation-alone", {"GFD_TIMESTAMP_ANNOTATION": "yes"},
        line="gfd: error: --timestamp-annotation needs --patch-node"),
    env("output-dot-file", {"GFD_OUTPUT_FILE": "{tmp}/.hidden"}, base="env-no-output", code=1,
        line="gfd: error: feature file {tmp}/.hidden: NFD ignores files whose names begin with '.'"),
    env("output-fifo", {"GFD_OUTPUT_FILE": "{tmp}/fifo"}, base="env-no-output", code=1,
        files={"fifo": Fifo()},
        line="gfd: error: feature-file: feature file {tmp}/fifo: exists and is a FIFO, not a regular file"),
    env("machine-type-dev-zero", {"GFD_MACHINE_TYPE_FILE": "/dev/zero"}, base="host",
        line="gfd: error: --machine-type-file /dev/zero: is a character device"),
]  # fmt: skip

_V1 = b"version: v1\n"

CONFIG = [
    config("alias-bomb", _laughs(),
           line=CFG + "expands to more than 1,000,000 YAML nodes through its aliases", process=True),
    config("alias-budget", _V1 + b"x: &x 1\ny: [" + b", ".join([b"*x"] * 101) + b"]\n",
           line=CFG + "uses more than 100 YAML aliases; write the values out"),
    config("deep-flow", b"[" * 50_000 + b"]" * 50_000,
           line=CFG + "is nested more than 64 levels deep", process=True),
    config("deep-flow-unclosed", b"{a: " * 50_000, line=CFG + "is nested more than 64 levels deep"),
    config("deep-block", _deep_block(200), line=CFG + "is nested more than 64 levels deep (line 65)"),
    config("huge-sparse", Sparse(2 << 30), line=CFG + "is larger than 1 MiB, the most gfd reads"),
    config("huge-comment", _V1 + b"#" + b"x" * (1 << 20), line=CFG + "is larger than 1 MiB"),
    config("dev-zero-link", Symlink("/dev/zero"), line=CFG + "is a character device, not a regular file"),
    config("directory", Directory(), line=CFG + "is a directory, not a regular file"),
    config("fifo", Fifo(), line=CFG + "is a FIFO, not a regular file"),
    config("dangling-link", Symlink("{tmp}/nowhere"), line=CFG + "cannot read: No such file or directory"),
    config("not-utf8", b"\xff\xfe\x00garbage", line=CFG + "not UTF-8 text"),
    config("nul-bytes", _V1 + b"flags: {gfd: {outputFile: \"a\x00b\"}}\n", line=CFG + "not valid YAML/JSON"),
    config("unclosed", _V1 + b"flags: [unclosed\n", line=CFG + "not valid YAML/JSON at line 3, column 1"),
    config("tab-indent", _V1 + b"flags:\n\tgfd: {}\n", line=CFG + "not valid YAML/JSON at line 3"),
    config("python-tag", _V1 + b"flags: !!python/object/apply:os.system ['echo pwned']\n",
           line=CFG + "not valid YAML/JSON at line 2, column 8: could not determine a constructor"),
    config("unknown-tag", _V1 + b"flags: !secret x\n", line=CFG + "not valid YAML/JSON at line 2"),
    config("two-documents", _V1 + b"---\nversion: v1\n", line=CFG + "not valid YAML/JSON"),
    config("top-level-list", b"- version: v1\n", line=CFG + "expected a mapping at the top level"),
    config("top-level-string", b"just a string\n", line=CFG + "expected a mapping at the top level"),
    config("no-version", b"flags: {}\n", line=CFG + "version: None is not supported (use version: v1)"),
    config("version-number", b"version: 1\n", line=CFG + "version: 1 is not supported"),
    config("version-huge", b"version: " + HUGE.encode() + b"\n",
           line=CFG + "version: '" + "x" * 79 + "… is not supported"),
    config("unknown-key", _V1 + b"flagz: {}\n", line=CFG + "flagz: unknown key"),
    config("unknown-key-huge", _V1 + b"flags:\n  gfd:\n    ? " + HUGE.encode() + b"\n    : 1\n",
           line=CFG + "flags.gfd." + "x" * 110),
    config("flags-a-list", _V1 + b"flags: [1, 2]\n", line=CFG + "flags: expected a mapping"),
    config("sleep-seconds-as-integer", _V1 + b"flags: {gfd: {sleepInterval: 60}}\n",
           line=CFG + "flags.gfd.sleepInterval: 60 is read as 60 nanoseconds (an integer here is "
                "nanoseconds); if you meant seconds, write '60s'", process=True),
    config("sleep-just-under-a-second", _V1 + b"flags: {gfd: {sleepInterval: 999999999}}\n",
           line=CFG + "flags.gfd.sleepInterval: 999999999 is read as 999999999 nanoseconds"),
    config("expiry-seconds-as-integer", _V1 + b"flags: {gfd: {outputFileExpiry: 3600}}\n",
           line=CFG + "flags.gfd.outputFileExpiry: 3600 is read as 3600 nanoseconds"),
    config("sleep-quoted-number", _V1 + b"flags: {gfd: {sleepInterval: '60'}}\n",
           line=CFG + "flags.gfd.sleepInterval: '60' has no unit; write 60s"),
    config("sleep-int64-overflow", _V1 + b"flags: {gfd: {sleepInterval: 9223372036854775808}}\n",
           line=CFG + "flags.gfd.sleepInterval: 9223372036854775808ns is too large"),
    config("sleep-huge-integer", _V1 + b"flags: {gfd: {sleepInterval: " + b"9" * 4000 + b"}}\n",
           line=CFG + "flags.gfd.sleepInterval: " + "9" * 80 + "…ns is too large"),
    config("sleep-float", _V1 + b"flags: {gfd: {sleepInterval: 1.5}}\n",
           line=CFG + "flags.gfd.sleepInterval: expected a duration like '60s', got float"),
    config("sleep-negative", _V1 + b"flags: {gfd: {sleepInterval: -5}}\n",
           line=CFG + "flags.gfd.sleepInterval: a duration must not be negative, got -5ns"),
    config("sleep-bool", _V1 + b"flags: {gfd: {sleepInterval: true}}\n",
           line=CFG + "flags.gfd.sleepInterval: expected a duration like '60s', got a boolean"),
    config("sleep-list", _V1 + b"flags: {gfd: {sleepInterval: [1, 2]}}\n",
           line=CFG + "flags.gfd.sleepInterval: expected a duration like '60s', got list"),
    config("sleep-too-large", _V1 + b"flags: {gfd: {sleepInterval: 3000000h}}\n",
           line=CFG + "flags.gfd.sleepInterval: '3000000h' is too large"),
    config("expiry-shorter", _V1 + b"flags: {gfd: {oneshot: false, sleepInterval: 10m, outputFileExpiry: 5m}}\n",
           args=("--oneshot=false", "--config-file", "{tmp}/c.yaml"),
           line="gfd: error: --output-file-expiry 5m is shorter than --sleep-interval 10m"),
    config("oneshot-string", _V1 + b"flags: {gfd: {oneshot: 'yes please'}}\n",
           line=CFG + "flags.gfd.oneshot: expected true or false, got 'yes please'"),
    config("output-file-number", _V1 + b"flags: {gfd: {outputFile: 5}}\n",
           line=CFG + "flags.gfd.outputFile: expected a string, got 5"),
    config("output-file-huge-list", _V1 + b"flags: {gfd: {outputFile: [" + b"1, " * 10_000 + b"1]}}\n",
           line=CFG + "flags.gfd.outputFile: expected a string, got [1, 1, 1"),
    config("mig-unknown", _V1 + b"flags: {migStrategy: all}\n",
           line=CFG + "flags.migStrategy: 'all' is not one of none, single, mixed"),
    config("metrics-address-garbage", _V1 + b"flags: {gfd: {metricsAddress: 'a:b:c'}}\n",
           line="gfd: error: --metrics-address 'a:b:c': write an IPv6 host in brackets"),
    config("sharing-empty", _V1 + b"sharing: {timeSlicing: {resources: []}}\n",
           line=CFG + "sharing.timeSlicing.resources: must be a non-empty list"),
    config("sharing-one-replica", _V1 + b"sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n",
           line=CFG + "sharing.timeSlicing.resources[0].replicas: must be at least 2, got 1"),
    config("sharing-replicas-string", _V1 + b"sharing: {mps: {resources: [{name: g, replicas: many}]}}\n",
           line=CFG + "sharing.mps.resources[0].replicas: expected an integer, got 'many'"),
    config("sharing-replicas-huge", _V1 + b"sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: " + b"9" * 3000 + b"}]}}\n",
           line=CFG + "sharing.mps.resources[0].replicas: must be at most 9223372036854775807, got " + "9" * 80 + "…"),
    config("integer-of-5000-digits", _V1 + b"flags: {gfd: {sleepInterval: " + b"9" * 5000 + b"}}\n",
           line=CFG + "has an integer of 5000 digits (line 2); the most is 4000"),
    config("sharing-unknown-strategy", _V1 + b"sharing: {slicing: {}}\n",
           line=CFG + "sharing.slicing: unknown key (expected timeSlicing or mps)"),
    config("sharing-huge-key", _V1 + b"sharing:\n  timeSlicing:\n    ? " + HUGE.encode() + b"\n    : 1\n",
           line=CFG + "sharing.timeSlicing." + "x" * 80 + "…: unknown key"),
    config("sharing-resource-list-of-lists", _V1 + b"sharing: {timeSlicing: {resources: [[1]]}}\n",
           line=CFG + "sharing.timeSlicing.resources[0]: expected a mapping with name and replicas"),
    config("merge-key-bomb", _V1 + b"a: &a {x: 1}\nflags:\n  <<: [" + b", ".join([b"*a"] * 200) + b"]\n",
           line=CFG + "uses more than 100 YAML aliases"),
    config("json-deep", b'{"version": "v1", "flags": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}",
           line=CFG + "is nested more than 64 levels deep"),
    config("empty-file", b"", line=CFG + "version: None is not supported"),
]  # fmt: skip

_T4 = b"driver_version: 550.54.15\ncuda_driver_version: 12040\n"

FACTS = [
    Case("dev-zero", "facts", ("--simulate", "/dev/zero"), 2,
         "gfd: error: /dev/zero: is a character device, not a regular file", process=True),
    facts("fifo", Fifo(), line="gfd: error: {tmp}/f.yaml: is a FIFO, not a regular file"),
    facts("directory", Directory(), line="gfd: error: {tmp}/f.yaml: is a directory, not a regular file"),
    facts("huge-sparse", Sparse(5 << 30), line="gfd: error: {tmp}/f.yaml: is larger than 4 MiB"),
    facts("alias-bomb", _laughs(), line="gfd: error: {tmp}/f.yaml: expands to more than 1,000,000 YAML nodes",
          process=True),
    facts("deep-flow", b"gpus: " + b"[" * 50_000, line="gfd: error: {tmp}/f.yaml: is nested more than 64 levels deep"),
    facts("deep-block", _deep_block(100), line="gfd: error: {tmp}/f.yaml: is nested more than 64 levels deep"),
    facts("dangling-link", Symlink("{tmp}/nowhere"),
          line="gfd: error: {tmp}/f.yaml: cannot read: No such file or directory"),
    facts("link-to-dev-zero", Symlink("/dev/zero"), line="gfd: error: {tmp}/f.yaml: is a character device"),
    facts("not-utf8", b"\xff\xfe\x00", line="gfd: error: {tmp}/f.yaml: not UTF-8 text"),
    facts("a-list", b"- 1\n- 2\n", line="gfd: error: {tmp}/f.yaml: "),
    facts("a-string", b"hello\n", line="gfd: error: {tmp}/f.yaml: "),
    facts("python-tag", b"gpus: !!python/object/apply:os.system ['echo pwned']\n",
          line="gfd: error: {tmp}/f.yaml: line 1, column 7: not valid YAML/JSON"),
    facts("unclosed", b"gpus: [\n", line="gfd: error: {tmp}/f.yaml: line 2, column 1: not valid YAML/JSON"),
    facts("gpus-a-string", _T4 + b"gpus: many\n", line="gfd: error: {tmp}/f.yaml: gpus: "),
    facts("gpu-index-huge", _T4 + b"gpus:\n- {index: " + b"9" * 5000 + b", name: X, uuid: GPU-1, bus_id: '00000000:01:00.0'}\n",
          line="gfd: error: {tmp}/f.yaml: has an integer of 5000 digits (line 4); the most is 4000"),
    facts("gpu-name-huge", _T4 + b"gpus:\n- {index: 0, name: " + HUGE.encode() + b", uuid: GPU-1, bus_id: 'zz'}\n",
          line="gfd: error: {tmp}/f.yaml: "),
    facts("bad-bus-id", _T4 + b"gpus:\n- {index: 0, name: X, uuid: GPU-1, bus_id: 'zz:00'}\n",
          line="gfd: error: {tmp}/f.yaml: gpus[0].bus_id: "),
    facts("faults-unknown-call", b"gpus: []\nfaults:\n  errors:\n  - {call: nvmlDeviceGetNmae, error: UNKNOWN}\n",
          line="gfd: error: {tmp}/f.yaml: "),
    facts("empty", b"", line="gfd: error: {tmp}/f.yaml: empty file: not a facts capture; capture one with 'gfd facts -o FILE'"),
    facts("only-comments", b"# captured by hand\n\n", line="gfd: error: {tmp}/f.yaml: empty file: not a facts capture"),
]  # fmt: skip

_KC_OK = (
    b"apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    b"contexts: [{name: c, context: {cluster: k, user: u}}]\n"
)
KC = "gfd: error: kubeconfig {tmp}/kc: "

KUBECONFIG = [
    kubeconfig("missing", Symlink("{tmp}/nowhere"), line=KC + "cannot read: No such file or directory"),
    kubeconfig("dev-zero", Symlink("/dev/zero"), line=KC + "is a character device, not a regular file"),
    kubeconfig("fifo", Fifo(), line=KC + "is a FIFO, not a regular file"),
    kubeconfig("directory", Directory(), line=KC + "is a directory, not a regular file"),
    kubeconfig("huge", Sparse(3 << 30), line=KC + "is larger than 1 MiB, the most gfd reads"),
    kubeconfig("not-utf8", b"\xff\xfe\x00\x01", line=KC + "not UTF-8 text"),
    kubeconfig("not-yaml", b"clusters: [\n", line=KC + "not valid YAML"),
    kubeconfig("a-list", b"- a\n- b\n", line=KC + "expected a kubeconfig mapping (apiVersion, clusters, users, contexts), got list"),
    kubeconfig("empty", b"", line=KC + "expected a kubeconfig mapping (apiVersion, clusters, users, contexts), got nothing"),
    kubeconfig("alias-bomb", _laughs(), line=KC + "expands to more than 1,000,000 YAML nodes"),
    kubeconfig("deep", b"a: " + b"[" * 60_000, line=KC + "is nested more than 64 levels deep"),
    kubeconfig("no-contexts", b"apiVersion: v1\nkind: Config\n", line=KC),
    kubeconfig("clusters-a-string", _KC_OK + b"clusters: nope\nusers: nope\n", line=KC),
    kubeconfig("server-garbage", _KC_OK + b"clusters: [{name: k, cluster: {server: '::::'}}]\nusers: [{name: u, user: {token: t}}]\n",
               line=KC + "server '::::' is not an http(s) URL with a host"),
    kubeconfig("server-bad-port", _KC_OK + b"clusters: [{name: k, cluster: {server: 'https://h:99999999'}}]\nusers: [{name: u, user: {token: t}}]\n",
               line=KC + "server 'https://h:99999999' is not an http(s) URL with a host"),
    kubeconfig("server-file-url", _KC_OK + b"clusters: [{name: k, cluster: {server: 'file:///etc/shadow'}}]\nusers: [{name: u, user: {token: t}}]\n",
               line=KC + "server 'file:///etc/shadow' is not an http(s) URL with a host"),
    kubeconfig("ca-not-base64", _KC_OK + b"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', certificate-authority-data: '%%%'}}]\nusers: [{name: u, user: {token: t}}]\n",
               line=KC + "the cluster's certificate authority is not a usable PEM certificate"),
    kubeconfig("ca-file-dev-null", _KC_OK + b"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', certificate-authority: /dev/null}}]\nusers: [{name: u, user: {token: t}}]\n",
               line=KC + "File does not exist: /dev/null"),
    kubeconfig("ca-file-garbage", _KC_OK + b"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', certificate-authority: {tmp}/ca}}]\nusers: [{name: u, user: {token: t}}]\n",
               line=KC + "the cluster's certificate authority is not a usable PEM certificate",
               files={"ca": b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"}),
]  # fmt: skip

NODE_LINE = "gfd: error: node: node gpu-node-1: API server sent "

NODE = [
    node("empty-body", b"", line=NODE_LINE + "a malformed object: null, not an object"),
    node("null", b"null", line=NODE_LINE + "a malformed object: null, not an object"),
    node("a-list", b"[1, 2]", line=NODE_LINE + "a malformed object: a list, not an object"),
    node("a-string", b'"node"', line=NODE_LINE + "a malformed object: a string, not an object"),
    node("not-json", b"<html>502 Bad Gateway</html>", line=NODE_LINE + "invalid JSON: "),
    node("not-utf8", b"\xff\xfe{}", line=NODE_LINE + "invalid JSON: "),
    node("truncated", b'{"metadata": {"labels": {', line=NODE_LINE + "invalid JSON: "),
    node("deep-json", b"[" * 200_000 + b"]" * 200_000, line=NODE_LINE + "invalid JSON: JSON nested too deeply"),
    node("metadata-a-list", b'{"metadata": []}', line=NODE_LINE + "a malformed object: metadata is a list, not an object"),
    node("labels-a-list", b'{"metadata": {"labels": ["a"]}}',
         line=NODE_LINE + "a malformed object: metadata.labels is a list, not a map of strings"),
    node("label-value-a-number", b'{"metadata": {"labels": {"nvidia.com/gpu.count": 8}}}',
         line=NODE_LINE + "a malformed object: metadata.labels['nvidia.com/gpu.count'] is a int, not a string"),
    node("label-value-null", b'{"metadata": {"labels": {"nvidia.com/gpu.count": null}}}',
         line=NODE_LINE + "a malformed object: metadata.labels['nvidia.com/gpu.count'] is null, not a string"),
    node("annotations-a-string", b'{"metadata": {"annotations": "nvidia.com/gfd.labels"}}',
         line=NODE_LINE + "a malformed object: metadata.annotations is a string, not a map of strings"),
    node("huge-label-key", b'{"metadata": {"labels": {"' + HUGE.encode() + b'": 1}}}',
         line=NODE_LINE + "a malformed object: metadata.labels['" + "x" * 79 + "…] is a int, not a string"),
    node("a-9-mib-answer", b'{"metadata": {"labels": {"a": "' + b"x" * (9 << 20) + b'"}}}',
         line="gfd: error: node: GET /api/v1/nodes/gpu-node-1: the API server announced a 9437219-byte answer, over gfd's limit of 8388608"),
    node("resource-version-object", b'{"metadata": {"resourceVersion": {"v": 1}}}',
         line=NODE_LINE + "a malformed object: metadata.resourceVersion is an object, not a string"),
]  # fmt: skip

OUTPUT = [
    output("directory", Directory(),
           line="gfd: error: feature-file: feature file {tmp}/out: exists and is a directory, not a regular file"),
    output("fifo", Fifo(),
           line="gfd: error: feature-file: feature file {tmp}/out: exists and is a FIFO, not a regular file",
           process=True),
    output("symlink-to-a-victim", Symlink("{tmp}/victim"), untouched=("{tmp}/victim",),
           files={"victim": b"root:secret\n"},
           line="gfd: error: feature-file: feature file {tmp}/out: exists and is a symbolic link, not a regular file"),
    output("symlink-to-dev-zero", Symlink("/dev/zero"),
           line="gfd: error: feature-file: feature file {tmp}/out: exists and is a symbolic link"),
    output("dangling-symlink", Symlink("{tmp}/would-be-created"),
           line="gfd: error: feature-file: feature file {tmp}/out: exists and is a symbolic link"),
    output("character-device", CharDevice(),
           line="gfd: error: feature-file: feature file {tmp}/out: exists and is a character device, not a regular file",
           process=True),
    output("dot-file", None, args=("-o", "{tmp}/.out"),
           line="gfd: error: feature file {tmp}/.out: NFD ignores files whose names begin with '.'"),
    # A missing folder is made (as mkdir -p); these two cannot be.
    output("folder-under-a-file", None, args=("-o", "{tmp}/afile/features.d/gfd"),
           files={"afile": b"a file where a folder should be\n"}, untouched=("{tmp}/afile",),
           line="gfd: error: feature-file: feature file {tmp}/afile/features.d/gfd: cannot create a temporary file in {tmp}/afile/features.d: Not a directory"),
    output("folder-under-a-dangling-symlink", None, args=("-o", "{tmp}/gone/features.d/gfd"),
           files={"gone": Symlink("{tmp}/nowhere")},
           line="gfd: error: feature-file: feature file {tmp}/gone/features.d/gfd: its folder {tmp}/gone/features.d does not exist and {tmp}/gone/features.d cannot be created: No such file or directory"),
]  # fmt: skip

ALL: list[Case] = [*FLAGS, *ENV, *CONFIG, *FACTS, *KUBECONFIG, *NODE, *OUTPUT]
