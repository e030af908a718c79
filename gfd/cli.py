"""The ``gfd`` command line: parses flags and subcommands, dispatches, and ends every
failure in one error line and an exit status. What a command needs is assembled in
:mod:`gfd.app`.

Subcommands: ``run`` (the default: label periodically, or once with ``--oneshot``),
``labels`` (print the labels, publish nothing), ``facts`` (print what was read),
``topo`` (print the GPU topology matrix), ``cleanup`` (take gfd's labels, annotations,
taint and condition off the Nodes, :mod:`gfd.cleanup`), ``doctor`` (check each link
from the GPU to the labels on the Node, :mod:`gfd.doctor`), ``explain`` (why a pod would
or would not run on each node) and ``select`` (requirements to a node affinity), both
:mod:`gfd.explain`, and ``fleet`` (every GPU node and the fleet's drift, :mod:`gfd.fleet`). Options may stand before or after the subcommand. Exit codes
(:mod:`gfd.app.exit_status` has the table): 0 success (also after SIGTERM/SIGINT), 1 the
node or the cluster failed (for ``doctor``: a problem found; for ``explain``: a pod that
runs on no node), 2 a usage or configuration error; every subcommand follows them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from gfd import __version__
from gfd.app.exit_status import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_line, exit_status_of
from gfd.app.node_reader import check_machine_type_file, read_node_once
from gfd.app.process_title import name_process
from gfd.base.errors import ConfigError, GfdError, echo
from gfd.base.startup_gc import resume_collector
from gfd.config import (
    NODE_PATHS,
    OPTIONS,
    HostPaths,
    Option,
    Settings,
    convert,
    resolve_settings,
)
from gfd.config.effect import idle_flags
from gfd.config.values import BOOL_WORDS

# What a command needs beyond parsing is imported where it runs, so that ``gfd --version``
# and ``--help`` import almost nothing (tests/test_startup_imports.py).


class UsageError(ConfigError):
    """The command line itself is wrong."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)


#: The subcommands, ``run`` first: it is the default.
COMMANDS = ("run", "labels", "facts", "topo", "cleanup", "doctor", "explain", "select", "fleet")
#: Subcommands that print what they read and take ``--format``.
FORMATTED_COMMANDS = ("facts", "topo", "doctor", "explain", "select", "fleet")
#: Each subcommand's own flags, which are no setting: (taking a value, boolean). Known
#: only with their subcommand, so that a prefix of a setting's flag (``--driver`` of
#: ``--driver-root-ctr-path``) stays an unknown flag everywhere else.
_COMMAND_FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "facts": (("--format",), ()),
    "topo": (("--format",), ()),
    "cleanup": (("--wait-for-pods",), ("--all-nodes",)),
    "doctor": (("--format", "--from-pid"), ()),
    "explain": (
        ("--format", "-f", "--filename", "--pod", "--cluster-file", "--require-cuda"),
        ("--all-nodes",),
    ),
    "select": (
        (
            "--format", "--family", "--product", "--min-memory", "--min-count", "--cuda",
            "--compute", "--driver", "--interconnect", "--mig-profile", "--as", "--gpus",
            "--cluster-file",
        ),
        ("--healthy",),
    ),
    "fleet": (("--format", "-l", "--selector", "--cluster-file", "--gfd-pods"), ()),
}  # fmt: skip
#: The flags that are no setting and take no value: help and version.
_OTHER_FLAGS = ("-h", "--help", "--version")


def _setting_flags(option: Option) -> tuple[str, ...]:
    return (option.flag, "-o") if option.name == "output_file" else (option.flag,)


def _add_options(parser: argparse.ArgumentParser) -> None:
    """Every setting as a flag whose default is 'not given', so precedence can tell."""
    for option in OPTIONS:
        flags = _setting_flags(option)
        if option.kind == "bool":
            parser.add_argument(
                *flags,
                dest=option.name,
                nargs="?",
                const="true",
                default=argparse.SUPPRESS,
                # The value can only follow "=": --oneshot, --oneshot=false (check_words).
                metavar="=BOOL",
                help=option.help,
            )
        else:
            parser.add_argument(
                *flags,
                dest=option.name,
                default=argparse.SUPPRESS,
                metavar=option.metavar or option.name.upper(),
                help=option.help,
            )


def bundled_profiles() -> tuple[str, ...]:
    """The simulator's bundled profiles: the ``*.yaml`` files of ``gfd/sim/profiles/``, the
    one list of them. Found through the import system without running the simulator's
    package (ctypes, the facts model), so that ``--help`` stays light."""
    spec = importlib.util.find_spec("gfd.sim")
    folders = spec.submodule_search_locations if spec is not None else None
    if not folders:
        return ()
    return tuple(sorted(path.stem for path in (Path(folders[0]) / "profiles").glob("*.yaml")))


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations anywhere (allow_abbrev=False on every parser, subcommands'
    # included): Go's flag package, which the reference parses with, takes none, and a
    # prefix that happens to match one flag today would silently pick another tomorrow.
    common = _Parser(add_help=False, allow_abbrev=False)
    _add_options(common)
    parser = _Parser(
        prog="gfd",
        description="GPU feature discovery for Kubernetes: label nodes with their NVIDIA GPUs.",
        # Wrapped here, not by argparse, whose wrapping breaks a name at its hyphens.
        epilog=textwrap.fill(
            "bundled profiles for --simulate PROFILE: " + ", ".join(bundled_profiles()),
            width=79,
            break_on_hyphens=False,
            break_long_words=False,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"gfd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser(
        "run", parents=[common], allow_abbrev=False, help="label this node (default)"
    )
    commands.add_parser(
        "labels", parents=[common], allow_abbrev=False, help="print the labels; publish nothing"
    )
    facts = commands.add_parser(
        "facts",
        parents=[common],
        allow_abbrev=False,
        help="print the facts read from NVML (-o FILE: write them to FILE, whole or not at all)",
    )
    facts.add_argument("--format", choices=("yaml", "json"), default="yaml")
    topo = commands.add_parser(
        "topo", parents=[common], allow_abbrev=False, help="print the GPU topology matrix"
    )
    topo.add_argument("--format", choices=("table", "json"), default="table")
    cleanup = commands.add_parser(
        "cleanup",
        parents=[common],
        help="remove gfd's labels, annotations, taint and GPUHealthy condition from the "
        "node (--node-name) or every node (--all-nodes), for an uninstall",
    )
    cleanup.add_argument("--all-nodes", action="store_true", help="clean every node")
    cleanup.add_argument(
        "--wait-for-pods",
        metavar="SELECTOR",
        help="first wait until no pod in the namespace (--namespace, or the pod's own) "
        "matches this label selector: gfd's agents, which could label again",
    )
    doctor = commands.add_parser(
        "doctor", parents=[common], help="check why labels are missing; change nothing"
    )
    doctor.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one line per check; json: a list of {check, state, message, fix}",
    )
    doctor.add_argument(
        "--from-pid",
        type=int,
        metavar="PID",
        help="check the configuration of the gfd agent running as process PID (in gfd's "
        "pod: 1); flags given here win over the agent's",
    )
    _add_workload_commands(commands, common)
    return parser


def _add_workload_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """``explain`` and ``select``: the workload author's commands (gfd.explain)."""
    explain = commands.add_parser(
        "explain",
        parents=[common],
        allow_abbrev=False,
        help="say, node by node, why a pod would or would not run there (and what to do); "
        "change nothing",
    )
    explain.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="MANIFEST",
        help="a manifest with a pod template (Pod, Deployment, StatefulSet, DaemonSet, Job, "
        "CronJob; several documents allowed; - for stdin)",
    )
    explain.add_argument("--pod", metavar="NAMESPACE/NAME", help="a pod of the cluster")
    explain.add_argument(
        "--cluster-file",
        metavar="FILE",
        help="the nodes and pods saved by kubectl get nodes,pods -A -o json (instead of "
        "the API server; --simulate PROFILE judges one simulated node instead)",
    )
    explain.add_argument(
        "--require-cuda",
        metavar="X.Y",
        help="the CUDA the image needs (default: the manifest's NVIDIA_REQUIRE_CUDA)",
    )
    explain.add_argument("--all-nodes", action="store_true", help="show nodes without GPUs too")
    explain.add_argument("--format", choices=("text", "json"), default="text")
    select = commands.add_parser(
        "select",
        parents=[common],
        allow_abbrev=False,
        help="write the node affinity (or node selector) that targets GPUs by requirements",
    )
    select.add_argument("--family", action="append", help="gpu.family, exact (hopper); repeatable")
    select.add_argument(
        "--product", action="append", help="gpu.product, exact (NVIDIA-H100-80GB-HBM3); repeatable"
    )
    select.add_argument(
        "--min-memory", metavar="SIZE", help="per GPU, with its unit: 80GB, 80GiB, 40960MiB"
    )
    select.add_argument("--min-count", type=int, metavar="N", help="GPUs on the node, at least")
    for flag, labels in (
        ("--cuda", "the driver's CUDA (cuda.runtime-version)"),
        ("--compute", "compute capability (gpu.compute)"),
        ("--driver", "driver version (cuda.driver-version)"),
    ):
        select.add_argument(
            flag,
            action="append",
            metavar="OPVERSION",
            help=f"{labels}: >=, >, ==, <= or < a version",
        )
    select.add_argument(
        "--interconnect",
        action="append",
        help="gpu.interconnect (nvswitch, nvlink, nvlink-partial, pcie, single); repeatable",
    )
    select.add_argument("--mig-profile", metavar="PROFILE", help="a MIG profile (1g.10gb)")
    select.add_argument(
        "--healthy", action="store_true", help="only nodes gfd finds healthy (gpu.health)"
    )
    select.add_argument(
        "--as",
        dest="as_",
        choices=("affinity", "pod"),
        default="affinity",
        help="affinity: the placement alone; pod: a pod spec snippet with the GPU request",
    )
    select.add_argument(
        "--gpus", type=int, default=1, metavar="N", help="with --as pod: GPUs the pod requests"
    )
    select.add_argument(
        "--cluster-file", metavar="FILE", help="list the matching nodes of this saved cluster"
    )
    select.add_argument("--format", choices=("yaml", "json"), default="yaml")
    fleet = commands.add_parser(
        "fleet",
        parents=[common],
        allow_abbrev=False,
        help="every GPU node: its GPUs, driver, CUDA, health and gfd's pod, then the drift "
        "and what needs a look; change nothing",
    )
    fleet.add_argument("-l", "--selector", metavar="SELECTOR", help="only the nodes it selects")
    fleet.add_argument(
        "--format", choices=("table", "wide", "json"), default="table", help="wide: more columns"
    )
    fleet.add_argument(
        "--cluster-file",
        metavar="FILE",
        help="the nodes and pods saved by kubectl get nodes,pods -A -o json (instead of the "
        "API server)",
    )
    fleet.add_argument(
        "--gfd-pods",
        metavar="SELECTOR",
        default="app.kubernetes.io/name=gfd",
        help="the label selector of gfd's pods (default: as the chart and deploy/ label them)",
    )


def check_words(argv: Sequence[str]) -> None:
    """Refuse, in one line that says what was meant, a command line whose words argparse
    would misread or explain poorly.

    - A flag gfd does not have, abbreviations included: named, with the flag it most
      looks like.
    - A boolean flag followed by a separate word (``--oneshot yes``): as in the
      reference (urfave/cli on Go's flag package), a boolean flag's value can only follow
      ``=``; a separate word would be read as a subcommand. The reference stops reading
      flags at that word and ignores it and everything after it; gfd says so instead.
    - A word that is no subcommand, or a second subcommand.
    - ``--format`` with a subcommand that has none.
    """
    setting_values = {
        flag for option in OPTIONS if option.kind != "bool" for flag in _setting_flags(option)
    }
    setting_bools = {option.flag for option in OPTIONS if option.kind == "bool"}
    command = _command_word(argv, setting_values)
    own_values, own_bools = _COMMAND_FLAGS.get(command or "run", ((), ()))
    # --format is known everywhere, to say which subcommands take it (below).
    value_flags = setting_values | set(own_values) | {"--format"}
    bool_flags = setting_bools | set(own_bools)
    command = None
    format_given = False
    bare_bool: str | None = None
    words = iter(argv)
    for word in words:
        after, bare_bool = bare_bool, None
        if word.startswith("-") and word not in ("-", "--"):
            name = word.split("=", 1)[0]
            if name in value_flags:
                format_given = format_given or name == "--format"
                if "=" not in word:
                    next(words, None)
            elif name in bool_flags:
                bare_bool = None if "=" in word else word
            elif name not in _OTHER_FLAGS:
                raise UsageError(_unknown_flag(name, value_flags | bool_flags))
            continue
        if command is None and word in COMMANDS:
            command = word
            continue
        if after is not None and word.strip().lower() in BOOL_WORDS:
            raise UsageError(
                f"{after} {word}: a boolean flag takes its value after '=' (write "
                f"{after}={word}, or {after} alone for true), as in NVIDIA's GFD; "
                "a separate word is read as a subcommand"
            )
        raise UsageError(
            f"unexpected word {echo(word)}: gfd takes flags and at most one subcommand "
            f"({', '.join(COMMANDS)})"
        )
    if format_given and command not in FORMATTED_COMMANDS:
        raise UsageError(
            f"--format applies to {', '.join(FORMATTED_COMMANDS)} only "
            f"(gfd facts --format json), not to {command or 'run'}"
        )


def _command_word(argv: Sequence[str], setting_values: set[str]) -> str | None:
    """The subcommand of ``argv`` (flags may stand before it), if it names one."""
    every_value = setting_values | {f for values, _ in _COMMAND_FLAGS.values() for f in values}
    words = iter(argv)
    for word in words:
        if word.startswith("-") and word not in ("-", "--"):
            if word in every_value:
                next(words, None)
            continue
        return word if word in COMMANDS else None
    return None


def _unknown_flag(name: str, known: set[str]) -> str:
    """The error line for a flag gfd does not have, naming the one it most looks like, or
    the subcommands that have it."""
    import difflib

    owners = [
        command
        for command, (values, bools) in _COMMAND_FLAGS.items()
        if name in values or name in bools
    ]
    elsewhere = (
        f"; {name} is a flag of {', '.join(owners)} only (gfd {owners[0]} {name} ...)"
        if owners
        else ""
    )

    prefixed = sorted(flag for flag in known if flag.startswith(name) and name.startswith("--"))
    close = prefixed or difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    if prefixed:
        hint = f" (flags are never abbreviated: did you mean {' or '.join(prefixed[:3])}?)"
    elif close:
        hint = f" (did you mean {close[0]}?)"
    elif owners:
        hint = " here"
    else:
        hint = " (gfd --help lists them)"
    return f"unknown flag {echo(name)}{hint}{elsewhere}"


def parse_command_line(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse ``argv``; return the namespace and the explicitly given settings, converted."""
    check_words(argv)
    # A bare boolean flag means true; spelling it --flag=true keeps argparse from
    # taking the next word (a subcommand, say) as the flag's value.
    bool_flags = {option.flag for option in OPTIONS if option.kind == "bool"}
    words = [f"{word}=true" if word in bool_flags else word for word in argv]
    namespace = build_parser().parse_args(words)
    explicit: dict[str, Any] = {}
    for option in OPTIONS:
        if hasattr(namespace, option.name):
            raw = getattr(namespace, option.name)
            explicit[option.name] = convert(option, raw, option.flag, from_text=True)
    return namespace, explicit


def agent_settings(pid: int, *, proc_root: Path) -> dict[str, Any]:
    """The settings gfd process ``pid`` was given on its command line (``doctor --from-pid``)."""
    from gfd.doctor.agent_command import agent_arguments

    words = agent_arguments(pid, proc_root=proc_root)
    try:
        _, explicit = parse_command_line(words)
    except UsageError as exc:
        raise UsageError(f"--from-pid {pid}: the agent's command line: {exc}") from exc
    return explicit


# --------------------------------------------------------------------------- #
# Commands


def command_labels(settings: Settings, stdout: TextIO, log: Any) -> int:
    """Print the hardware labels (no timestamp: it is publication metadata, not a fact).

    ``--label-mode auto`` needs the Node and the DRA driver's slices, which this command
    never reads: it prints the device-plugin set, and says so.
    """
    from gfd.agent import compute_labels
    from gfd.app.label_mode import label_options
    from gfd.config import LABEL_MODE_AUTO
    from gfd.sinks.featurefile import render_labels

    if settings.label_mode == LABEL_MODE_AUTO:
        log.warning(
            "label mode auto cannot decide here",
            reason="gfd labels reads neither the Node nor the DRA driver's ResourceSlices",
            consequence="printing the device-plugin labels; pass --label-mode hardware to "
            "see a DRA node's",
        )
    facts = read_node_once(settings)
    label_set, _ = compute_labels(facts, label_options(settings, with_timestamp=False))
    for key, why in label_set.dropped:
        log.warning("label dropped: not valid for Kubernetes", key=key, problem=why)
    for key, why in label_set.withheld:
        log.warning("label withheld: its facts could not be read", key=key, reason=why)
    stdout.write(render_labels(label_set.labels))
    return EXIT_OK


def command_facts(settings: Settings, fmt: str, stdout: TextIO, capture: str | None) -> int:
    """Print the facts, or write them to ``capture`` (``-o FILE``) whole or not at all.

    Nothing is written before the read succeeded: a failed read leaves stdout empty and
    ``capture`` as it was.
    """
    from gfd.facts import dump_facts, save_facts_text
    from gfd.topology import build_topology, topology_to_json

    facts = read_node_once(settings)
    derived = {"topology": topology_to_json(build_topology(facts))} if facts.gpus else {}
    text = dump_facts(facts, fmt, derived=derived)  # type: ignore[arg-type]
    if capture:
        save_facts_text(text, capture)
    else:
        stdout.write(text)
    return EXIT_OK


def command_topo(settings: Settings, fmt: str, stdout: TextIO) -> int:
    import json

    from gfd.topology import build_topology, render_table, topology_to_json

    facts = read_node_once(settings)
    topology = build_topology(facts)
    if fmt == "json":
        stdout.write(json.dumps(topology_to_json(topology), indent=2, sort_keys=True) + "\n")
    else:
        stdout.write(render_table(topology, facts))
    return EXIT_OK


def command_cleanup(
    settings: Settings, all_nodes: bool, pods_selector: str | None, stdout: TextIO
) -> int:
    """Take off the node, or every node, what gfd's node sink put there (gfd.cleanup)."""
    import threading

    from gfd.cleanup import clean_nodes, node_names, wait_for_pods_gone
    from gfd.kube_api import connect_kubernetes

    if not all_nodes and not settings.node_name:
        raise UsageError("cleanup: name the node (--node-name NODE or NODE_NAME) or --all-nodes")
    if pods_selector and not settings.namespace:
        raise UsageError("cleanup: --wait-for-pods needs the pods' namespace: --namespace")
    client = connect_kubernetes(
        kubeconfig=settings.kubeconfig,
        in_cluster_token_path=settings.host.token_file,
        in_cluster_ca_path=settings.host.ca_file,
    )
    try:
        stop = threading.Event()
        if pods_selector:
            wait_for_pods_gone(client, settings.namespace or "", pods_selector, stop)
        names = node_names(client, stop) if all_nodes else [settings.node_name or ""]
        report = clean_nodes(client, names, stop)
    finally:
        client.close()
    stdout.write("".join(f"{line}\n" for line in report.lines()))
    report.check()
    return EXIT_OK


def command_doctor(
    settings: Settings, fmt: str, environment: Mapping[str, str], stdout: TextIO
) -> int:
    """One line per link of the chain; a problem found exits non-zero."""
    from gfd.doctor import diagnose, found_a_problem, render

    findings = diagnose(settings, environment=environment)
    stdout.write(render(findings, fmt))
    return EXIT_FAILED if found_a_problem(findings) else EXIT_OK


def _quiet_broken_stdout(out: TextIO) -> None:
    """After EPIPE, point stdout at /dev/null so the exit flush does not complain."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    host: HostPaths = NODE_PATHS,
) -> int:
    """Entry point of ``gfd`` and ``python -m gfd``.

    ``host`` says where the host's files are (:mod:`gfd.config.host`): a node's, unless a
    test or an embedding program gives gfd a host of its own.

    Whatever goes wrong ends in one ``gfd: error:`` line on stderr, never a traceback
    (an unexpected exception's traceback goes to the debug log). A reader of stdout
    that goes away (``gfd labels | head -1``) ends gfd quietly, as Unix tools do.
    """
    if argv is None:
        # Before anything else, so that config-manager can find the process at once.
        name_process(sys.argv[0])
    arguments = sys.argv[1:] if argv is None else argv
    environment = os.environ if env is None else env
    out = stdout if stdout is not None else sys.stdout
    try:
        namespace, explicit = parse_command_line(arguments)
        if getattr(namespace, "from_pid", None) is not None:
            explicit = {
                **agent_settings(namespace.from_pid, proc_root=Path(host.proc_root)),
                **explicit,
            }
        command = namespace.command or "run"
        settings = resolve_settings(explicit, environment, host=host)
        check_machine_type_file(settings)
        idle = idle_flags(command, explicit, settings)
        if idle.errors:
            more = len(idle.errors) - 1
            raise UsageError(idle.errors[0] + (f" (and {more} more such flag(s))" if more else ""))
    except ConfigError as exc:  # a UsageError too
        print(error_line(exc), file=sys.stderr)
        return EXIT_USAGE
    # After parsing: --version and --help end above without loading the logging stack.
    from gfd.base.logs import configure_logging, get_logger

    # The doctor's report says what its checks found; their logs would say it twice. Only
    # --log-level on its command line (not the pod's GFD_LOG_LEVEL) brings them back.
    quiet = command in ("doctor", "explain", "select", "fleet") and "log_level" not in explicit
    configure_logging("error" if quiet else settings.log_level, log_format=settings.log_format)
    log = get_logger()
    for warning in idle.warnings:
        log.warning("flag ignored", problem=warning)
    if command in ("cleanup", "doctor", "explain", "select", "fleet"):
        # These page through the cluster's Nodes for as long as it takes: the collector,
        # paused while gfd started (gfd.base.startup_gc), runs again. The others read the node
        # once and end (run resumes it before its first cycle).
        resume_collector(collect_first=False)
    try:
        if command == "labels":
            code = command_labels(settings, out, log)
        elif command == "facts":
            # Only -o on this command line names a capture file: a GFD_OUTPUT_FILE or
            # outputFile of the deployment is the feature file, never to be overwritten
            # by facts ('-' or empty: stdout, as for the feature file).
            capture = explicit.get("output_file")
            to_file = capture if capture not in (None, "-", "") else None
            code = command_facts(settings, namespace.format, out, to_file)
        elif command == "topo":
            code = command_topo(settings, namespace.format, out)
        elif command == "cleanup":
            code = command_cleanup(settings, namespace.all_nodes, namespace.wait_for_pods, out)
        elif command == "doctor":
            code = command_doctor(settings, namespace.format, environment, out)
        elif command == "explain":
            from gfd.explain import command_explain

            code = command_explain(namespace, settings, out)
        elif command == "select":
            from gfd.explain import command_select

            code = command_select(namespace, settings, out)
        elif command == "fleet":
            from gfd.fleet import command_fleet

            code = command_fleet(namespace, settings, out)
        else:
            from gfd.app.run import run_agent

            code = run_agent(explicit, environment, settings, out, log)
        out.flush()
        return code
    except BrokenPipeError:
        _quiet_broken_stdout(out)
        return EXIT_FAILED
    except GfdError as exc:
        print(error_line(exc), file=sys.stderr)
        return exit_status_of(exc)
    except KeyboardInterrupt:
        return EXIT_OK
    except (RecursionError, MemoryError) as exc:
        reason = f"input too large or too deeply nested ({type(exc).__name__})"
        print(error_line(reason), file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        if _caused_by_a_stop(exc):
            return EXIT_OK
        log.debug("internal error", exc_info=exc)
        print(
            error_line(
                f"internal error (a bug in gfd): {type(exc).__name__}: {exc}; "
                "--log-level debug shows the traceback"
            ),
            file=sys.stderr,
        )
        return EXIT_FAILED
    finally:
        _flush_quietly(out)


def _caused_by_a_stop(exc: BaseException) -> bool:
    """Whether a stop's KeyboardInterrupt became ``exc`` on its way up: Python turns an
    exception raised in ``__set_name__`` (while a class is made: a stop during an import)
    into a RuntimeError whose cause it is. That is a stop, not a bug in gfd."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _flush_quietly(out: TextIO) -> None:
    try:
        out.flush()
    except BrokenPipeError:
        _quiet_broken_stdout(out)
    except (OSError, ValueError):
        pass
