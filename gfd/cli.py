"""The ``gfd`` command line: flags, subcommands, and the process around the agent loop.

Subcommands: ``run`` (the default: label periodically, or once with ``--oneshot``),
``labels`` (print the labels, publish nothing), ``facts`` (print what was read) and
``topo`` (print the GPU topology matrix). Options may stand before or after the
subcommand. Exit codes: 0 success (also after SIGTERM/SIGINT), 1 a failed run,
2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from gfd import __version__
from gfd.config import OPTIONS, Settings, convert, resolve_settings
from gfd.config_watch import ConfigFileWatch
from gfd.errors import ConfigError, GfdError
from gfd.facts import NodeFacts
from gfd.process_title import name_process

FactsReader = Callable[[], NodeFacts]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(GfdError):
    """The command line itself is wrong."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)


def _add_options(parser: argparse.ArgumentParser) -> None:
    """Every setting as a flag whose default is 'not given', so precedence can tell."""
    for option in OPTIONS:
        flags = [option.flag]
        if option.name == "output_file":
            flags.append("-o")
        if option.kind == "bool":
            parser.add_argument(
                *flags,
                dest=option.name,
                nargs="?",
                const="true",
                default=argparse.SUPPRESS,
                metavar="BOOL",
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


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    _add_options(common)
    parser = _Parser(
        prog="gfd",
        description="GPU feature discovery for Kubernetes: label nodes with their NVIDIA GPUs.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"gfd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("run", parents=[common], help="label this node (default)")
    commands.add_parser("labels", parents=[common], help="print the labels; publish nothing")
    facts = commands.add_parser("facts", parents=[common], help="print the facts read from NVML")
    facts.add_argument("--format", choices=("yaml", "json"), default="yaml")
    topo = commands.add_parser("topo", parents=[common], help="print the GPU topology matrix")
    topo.add_argument("--format", choices=("table", "json"), default="table")
    return parser


def parse_command_line(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse ``argv``; return the namespace and the explicitly given settings, converted."""
    # A bare boolean flag means true; spelling it --flag=true keeps argparse from
    # taking the next word (a subcommand, say) as the flag's value.
    bool_flags = {option.flag for option in OPTIONS if option.kind == "bool"}
    words = [f"{word}=true" if word in bool_flags else word for word in argv]
    namespace = build_parser().parse_args(words)
    explicit: dict[str, Any] = {}
    for option in OPTIONS:
        if hasattr(namespace, option.name):
            raw = getattr(namespace, option.name)
            explicit[option.name] = convert(option, raw, f"flag {option.flag}", from_text=True)
    return namespace, explicit


# --------------------------------------------------------------------------- #
# Facts source (real NVML or the simulator)


@contextlib.contextmanager
def facts_source(settings: Settings) -> Iterator[FactsReader]:
    """A function that reads facts, from the simulator when ``--simulate`` is set."""
    from gfd.nvml.reader import read_facts

    if settings.simulate:
        from gfd.sim import simulate

        with simulate(settings.simulate) as machine:
            yield lambda: read_facts(
                library_path=machine.library_path,
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
            )
        return
    sysfs_root = Path(settings.sysfs_root)
    machine_type_file = Path(settings.machine_type_file)
    yield lambda: read_facts(sysfs_root=sysfs_root, machine_type_file=machine_type_file)


# --------------------------------------------------------------------------- #
# Sinks


class SinkFactory:
    """Builds the sinks a Settings asks for; keeps one Kubernetes client per process."""

    def __init__(self, stop: Any) -> None:
        self._stop = stop
        self._kube: Any = None
        self._kubeconfig: str | None = None

    def _client(self, settings: Settings) -> Any:
        if self._kube is None or self._kubeconfig != settings.kubeconfig:
            from gfd.sinks.kube import connect_kubernetes

            self.close()
            self._kube = connect_kubernetes(kubeconfig=settings.kubeconfig)
            self._kubeconfig = settings.kubeconfig
        return self._kube

    def close(self) -> None:
        """Close the Kubernetes client, if one was made (on reload to another kubeconfig, on exit)."""
        if self._kube is not None:
            self._kube.close()
            self._kube = None

    def build(self, settings: Settings, stdout: TextIO) -> list[Any]:
        from gfd.sinks.featurefile import FeatureFileSink, StdoutSink

        sinks: list[Any] = []
        # As in the reference, an output file of "-" or "" means stdout.
        file_is_stdout = settings.output_file in ("", "-")
        if settings.print_labels or (file_is_stdout and not settings.no_output_file):
            sinks.append(StdoutSink(stdout))
        if not settings.no_output_file and not file_is_stdout:
            expiry = (
                dt.timedelta(seconds=settings.output_file_expiry)
                if settings.output_file_expiry
                else None
            )
            sinks.append(FeatureFileSink(Path(settings.output_file), expiry=expiry))
        if settings.patch_node:
            from gfd.sinks.node import NodeSink

            sinks.append(
                NodeSink(
                    client=self._client(settings),
                    node_name=settings.node_name or "",
                    stop=self._stop,
                    timestamp_annotation=settings.timestamp_annotation,
                )
            )
        if settings.use_node_feature_api:
            from gfd.sinks.nodefeature import NodeFeatureSink

            sinks.append(
                NodeFeatureSink(
                    client=self._client(settings),
                    node_name=settings.node_name or "",
                    namespace=settings.namespace or "",
                    pod_name=settings.pod_name,
                    stop=self._stop,
                )
            )
        if not sinks:
            raise ConfigError(
                "nothing to publish to: --no-output-file without --patch-node, "
                "--use-node-feature-api or --print-labels"
            )
        return sinks


# --------------------------------------------------------------------------- #
# Commands


def _label_options(settings: Settings, *, with_timestamp: bool) -> Any:
    from gfd.labels import LabelOptions

    timestamp = int(time.time()) if with_timestamp and not settings.no_timestamp else None
    return LabelOptions(
        timestamp=timestamp, mig_strategy=settings.mig_strategy, sharing=settings.sharing
    )


def command_labels(settings: Settings, stdout: TextIO, log: Any) -> int:
    """Print the hardware labels (no timestamp: it is publication metadata, not a fact)."""
    from gfd.agent import compute_labels
    from gfd.sinks.featurefile import render_labels

    with facts_source(settings) as read:
        facts = read()
    label_set, _ = compute_labels(facts, _label_options(settings, with_timestamp=False))
    for key, why in label_set.dropped:
        log.warning("label dropped: not valid for Kubernetes", key=key, problem=why)
    for key, why in label_set.withheld:
        log.warning("label withheld: its facts could not be read", key=key, reason=why)
    stdout.write(render_labels(label_set.labels))
    return EXIT_OK


def command_facts(settings: Settings, fmt: str, stdout: TextIO) -> int:
    from gfd.facts import dump_facts
    from gfd.topology import build_topology, topology_to_json

    with facts_source(settings) as read:
        facts = read()
    derived = {"topology": topology_to_json(build_topology(facts))} if facts.gpus else {}
    stdout.write(dump_facts(facts, fmt, derived=derived))  # type: ignore[arg-type]
    return EXIT_OK


def command_topo(settings: Settings, fmt: str, stdout: TextIO) -> int:
    import json

    from gfd.topology import build_topology, render_table, topology_to_json

    with facts_source(settings) as read:
        facts = read()
    topology = build_topology(facts)
    if fmt == "json":
        stdout.write(json.dumps(topology_to_json(topology), indent=2, sort_keys=True) + "\n")
    else:
        stdout.write(render_table(topology, facts))
    return EXIT_OK


def command_run(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    settings: Settings,
    stdout: TextIO,
    log: Any,
) -> int:
    """Label once (``--oneshot``) or forever; SIGTERM/SIGINT stop, SIGHUP reloads the config."""
    from gfd.agent import Agent, LoopControl, Pacer
    from gfd.logs import configure_logging

    control = LoopControl()
    factory = SinkFactory(control.stop)
    telemetry, server = _start_metrics(settings, log)
    previous = _install_signal_handlers(control)
    try:
        with facts_source(settings) as read:
            agent = Agent(
                read_facts=read,
                sinks=factory.build(settings, stdout),
                options=_label_options(settings, with_timestamp=True),
                log=log,
                telemetry=telemetry,
            )
            ever_succeeded = False
            pacer = Pacer(settings.sleep_interval)
            config_watch = ConfigFileWatch(settings.config_file)
            while not control.stop.is_set():
                outcome = agent.cycle()
                ever_succeeded = ever_succeeded or outcome.ok
                if settings.oneshot:
                    if outcome.ok:
                        return EXIT_OK
                    print(f"gfd: error: {outcome.reason}", file=sys.stderr)
                    return EXIT_FAILED
                if outcome.init_failure and settings.fail_on_init_error and not ever_succeeded:
                    print(
                        f"gfd: error: {outcome.reason} (pass --fail-on-init-error=false to keep retrying)",
                        file=sys.stderr,
                    )
                    return EXIT_FAILED
                # Without a config file there is nothing to watch, and no wake-up a second.
                watching = config_watch.changed if settings.config_file else None
                control.sleep(pacer.next_delay(outcome.ok), changed=watching)
                if control.reload_requested and not control.stop.is_set():
                    control.reload_requested = False
                    # Taken before the file is read, so that a write during the reload
                    # is seen at the next poll.
                    config_watch = ConfigFileWatch(settings.config_file)
                    try:
                        reloaded = resolve_settings(explicit, env)
                    except GfdError as exc:
                        log.error(
                            "config reload failed; keeping the running configuration",
                            reason=str(exc),
                        )
                        continue
                    configure_logging(reloaded.log_level)
                    agent.close()
                    settings = reloaded
                    pacer.sleep_interval = settings.sleep_interval
                    agent = Agent(
                        read_facts=read,
                        sinks=factory.build(settings, stdout),
                        options=_label_options(settings, with_timestamp=True),
                        log=log,
                        telemetry=telemetry,
                    )
                    log.info(
                        "configuration reloaded",
                        config_file=settings.config_file,
                        reason=control.reload_reason,
                    )
            log.info("stopping", reason="signal")
            agent.close()
            return EXIT_OK
    finally:
        _restore_signal_handlers(previous)
        factory.close()
        if server is not None:
            server.close()


def _start_metrics(settings: Settings, log: Any) -> tuple[Any, Any]:
    if not settings.metrics_address:
        return None, None
    from gfd.metrics import AgentTelemetry

    interval = settings.sleep_interval
    telemetry = AgentTelemetry(sleep_interval=interval)
    server = telemetry.serve(settings.metrics_address)
    log.info("metrics and health endpoints up", address=settings.metrics_address, port=server.port)
    return telemetry, server


def _install_signal_handlers(control: Any) -> dict[int, Any]:
    previous: dict[int, Any] = {}

    def stop(_signum: int, _frame: Any) -> None:
        control.request_stop()

    def reload(_signum: int, _frame: Any) -> None:
        control.request_reload()

    for signum, handler in ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, reload)):
        previous[signum] = signal.signal(signum, handler)
    return previous


def _restore_signal_handlers(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Entry point of ``gfd`` and ``python -m gfd``."""
    from gfd.logs import configure_logging, get_logger

    if argv is None:
        # Before anything else, so that config-manager can find the process at once.
        name_process(sys.argv[0])
    arguments = sys.argv[1:] if argv is None else argv
    environment = os.environ if env is None else env
    out = stdout if stdout is not None else sys.stdout
    try:
        namespace, explicit = parse_command_line(arguments)
        settings = resolve_settings(explicit, environment)
    except (UsageError, ConfigError) as exc:
        print(f"gfd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_level)
    log = get_logger()
    command = namespace.command or "run"
    try:
        if command == "labels":
            return command_labels(settings, out, log)
        if command == "facts":
            return command_facts(settings, namespace.format, out)
        if command == "topo":
            return command_topo(settings, namespace.format, out)
        return command_run(explicit, environment, settings, out, log)
    except ConfigError as exc:
        print(f"gfd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except GfdError as exc:
        print(f"gfd: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
