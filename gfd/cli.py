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
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gfd import __version__
from gfd.config import OPTIONS, Settings, convert, resolve_settings
from gfd.errors import ConfigError, GfdError, shorten
from gfd.process_title import name_process

if TYPE_CHECKING:
    # Only for annotations: what a command needs is imported where it runs, so that
    # ``gfd --version`` and ``--help`` import almost nothing.
    from gfd.facts import NodeFacts

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
            explicit[option.name] = convert(option, raw, option.flag, from_text=True)
    return namespace, explicit


# --------------------------------------------------------------------------- #
# Facts source (real NVML or the simulator)


@dataclass(frozen=True)
class NodeReader:
    """Reads this node's facts: through NVML, or (NVML down) what sysfs alone tells."""

    sysfs_root: Path
    machine_type_file: Path
    #: None: the driver's libnvidia-ml.so.1; else a simulator library.
    library_path: Path | None = None
    #: Where absent optional facts are logged (gfd's logger when None).
    log: Any = field(default=None, compare=False, repr=False)
    #: (call, cause) of absent optional NVML facts already logged: once per process.
    _reported: set[tuple[str, str]] = field(default_factory=set, compare=False, repr=False)

    #: Holds the :class:`gfd.nvml.reader.NvmlReader` made by the first read, so that its
    #: NVML session and what it cached outlive one cycle (a holder: the class is frozen).
    _nvml: list[Any] = field(default_factory=list, compare=False, repr=False)

    def __call__(self) -> NodeFacts:
        if not self._nvml:
            from gfd.nvml.reader import NvmlReader

            self._nvml.append(
                NvmlReader(
                    library_path=self.library_path,
                    sysfs_root=self.sysfs_root,
                    machine_type_file=self.machine_type_file,
                    on_absent=self._report_absent,
                )
            )
        facts: NodeFacts = self._nvml[0].read()
        return facts

    def close(self) -> None:
        """Shut down the NVML session this reader holds between cycles, if any."""
        if self._nvml:
            self._nvml[0].close()

    def _report_absent(self, call: str, cause: str) -> None:
        if (call, cause) in self._reported:
            return
        self._reported.add((call, cause))
        log = self.log
        if log is None:
            from gfd.logs import get_logger

            log = get_logger()
        log.debug("NVML fact absent", call=call, cause=cause)

    def without_nvml(self) -> NodeFacts:
        from gfd.nvml.reader import read_facts_without_nvml

        return read_facts_without_nvml(
            sysfs_root=self.sysfs_root, machine_type_file=self.machine_type_file
        )


@contextlib.contextmanager
def facts_source(settings: Settings) -> Iterator[NodeReader]:
    """The node's facts reader, on the simulator when ``--simulate`` is set."""
    if settings.simulate:
        from gfd.sim import simulate

        check_facts_file(settings.simulate)
        with simulate(settings.simulate) as machine:
            reader = NodeReader(
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
                library_path=machine.library_path,
            )
            try:
                yield reader
            finally:
                reader.close()
        return
    reader = host_reader(settings)
    try:
        yield reader
    finally:
        reader.close()


def check_facts_file(name_or_path: str) -> None:
    """Refuse a ``--simulate`` facts file that is not a small regular file of sane YAML.

    Bounded (:data:`gfd.inputs.FACTS_FILE_LIMIT`) and checked for depth and aliases
    before the simulator loads it; a bundled profile name passes through. First of all,
    a file of more GPUs (MIG devices, NVLinks, pairs) than a node can have is refused
    (:mod:`gfd.facts_limits`): its one pass of the parser is cheaper than the checks after.
    """
    from gfd.facts import FactsError
    from gfd.facts_limits import check_document_bounds
    from gfd.inputs import FACTS_FILE_LIMIT, InputRejected, check_yaml, read_bounded_text
    from gfd.sim import BUNDLED_PROFILES

    if name_or_path in BUNDLED_PROFILES or not os.path.lexists(name_or_path):
        return
    try:
        text = read_bounded_text(name_or_path, FACTS_FILE_LIMIT)
        check_document_bounds(text, name_or_path)
        check_yaml(text)
    except OSError as exc:
        raise FactsError(name_or_path, "", f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise FactsError(name_or_path, "", f"not UTF-8 text: {exc.reason}") from exc
    except InputRejected as exc:
        raise FactsError(name_or_path, "", str(exc)) from exc


def check_machine_type_file(settings: Settings) -> None:
    """Refuse a ``--machine-type-file`` that exists and is not a small regular file.

    The reader reads it every cycle: ``/dev/zero`` or a FIFO there would make every
    cycle read for ever. A missing file is fine (``gpu.machine=unknown``).
    """
    from gfd.inputs import SYSFS_ATTRIBUTE_LIMIT, InputRejected, check_regular_small_file

    if settings.simulate:
        return
    try:
        check_regular_small_file(settings.machine_type_file, SYSFS_ATTRIBUTE_LIMIT)
    except InputRejected as exc:
        raise ConfigError(f"--machine-type-file {settings.machine_type_file}: {exc}") from exc


def host_reader(settings: Settings) -> NodeReader:
    """Facts from this machine's NVML, sysfs and DMI file, as ``settings`` name them."""
    return NodeReader(
        sysfs_root=Path(settings.sysfs_root), machine_type_file=Path(settings.machine_type_file)
    )


# --------------------------------------------------------------------------- #
# Sinks


@dataclass
class SinkSet:
    """The sinks one configuration publishes to, and the Kubernetes client they share."""

    sinks: list[Any]
    client: Any = None
    kubeconfig: str | None = None


class SinkFactory:
    """Builds the sinks a Settings asks for; keeps one Kubernetes client per process.

    Building never disturbs what runs: a reload builds the new set beside the old
    one and :meth:`adopt` s it only once everything else of the reload worked, or
    :meth:`discard` s it, so a refused reload leaves the old sinks and client alive.
    """

    def __init__(self, stop: Any) -> None:
        self._stop = stop
        self._kube: Any = None
        self._kubeconfig: str | None = None

    def _client(self, settings: Settings) -> tuple[Any, bool]:
        """The client for ``settings`` and whether it is a new one."""
        if self._kube is not None and self._kubeconfig == settings.kubeconfig:
            return self._kube, False
        from gfd.kube_api import connect_kubernetes

        return connect_kubernetes(kubeconfig=settings.kubeconfig), True

    def adopt(self, built: SinkSet) -> None:
        """``built`` is now what runs: close the client it replaced."""
        if built.client is not None and built.client is not self._kube:
            self.close()
            self._kube, self._kubeconfig = built.client, built.kubeconfig

    def discard(self, built: SinkSet) -> None:
        """``built`` will never run: close its client if it made a new one."""
        if built.client is not None and built.client is not self._kube:
            built.client.close()

    def close(self) -> None:
        """Close the Kubernetes client, if one was made (on reload to another kubeconfig, on exit)."""
        if self._kube is not None:
            self._kube.close()
            self._kube = None

    def build(self, settings: Settings, stdout: TextIO) -> SinkSet:
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
            # A SIGTERM ends the wait for NFD's next tick at once (the file is written).
            sinks.append(
                FeatureFileSink(Path(settings.output_file), expiry=expiry, wait=self._stop.wait)
            )
        if not (settings.patch_node or settings.use_node_feature_api or sinks):
            raise ConfigError(
                "nothing to publish to: --no-output-file without --patch-node, "
                "--use-node-feature-api or --print-labels"
            )
        if not (settings.patch_node or settings.use_node_feature_api):
            return SinkSet(sinks)
        client, new = self._client(settings)
        built = SinkSet(sinks, client, settings.kubeconfig)
        try:
            if settings.patch_node:
                from gfd.sinks.node import NodeSink

                sinks.append(
                    NodeSink(
                        client=client,
                        node_name=settings.node_name or "",
                        stop=self._stop,
                        timestamp_annotation=settings.timestamp_annotation,
                    )
                )
            if settings.use_node_feature_api:
                from gfd.sinks.nodefeature import NodeFeatureSink

                sinks.append(
                    NodeFeatureSink(
                        client=client,
                        node_name=settings.node_name or "",
                        namespace=settings.namespace or "",
                        pod_name=settings.pod_name,
                        stop=self._stop,
                    )
                )
        except BaseException:
            if new:
                client.close()
            raise
        return built


class MetricsEndpoint:
    """The telemetry and its HTTP server, as the running configuration asks for them.

    :meth:`apply` starts, moves or stops the server for a (re)loaded configuration;
    when a new address cannot be bound it raises and leaves the old server serving.
    """

    def __init__(self, log: Any) -> None:
        self._log = log
        self.telemetry: Any = None
        self._server: Any = None
        self._address = ""

    def apply(self, settings: Settings) -> Callable[[], None]:
        """Prepare ``settings``' endpoint; returns the commit that makes it current.

        Raises :class:`ConfigError` (nothing changed) when the new address cannot be
        served. The returned function swaps the servers and is cheap and safe.
        """
        address = settings.metrics_address
        if address == self._address:
            return lambda: self._set_interval(settings)
        telemetry, server = self.telemetry, None
        if address:
            from gfd.metrics import AgentTelemetry

            if telemetry is None:
                telemetry = AgentTelemetry(sleep_interval=settings.sleep_interval)
            server = telemetry.serve(address)

        def commit() -> None:
            old = self._server
            self._server, self._address = server, address
            self.telemetry = telemetry if address else None
            if old is not None:
                old.close()
            if server is not None:
                self._log.info("metrics and health endpoints up", address=address, port=server.port)
            else:
                self._log.info("metrics and health endpoints off")
            self._set_interval(settings)

        return commit

    def _set_interval(self, settings: Settings) -> None:
        if self.telemetry is not None:
            self.telemetry.set_sleep_interval(settings.sleep_interval)

    def reload_failed(self, reason: str) -> None:
        if self.telemetry is not None:
            self.telemetry.config_reload_failed(reason)

    def reloaded(self) -> None:
        if self.telemetry is not None:
            self.telemetry.config_reloaded()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


# --------------------------------------------------------------------------- #
# Commands


def read_node_once(settings: Settings) -> NodeFacts:
    """The node's facts for ``labels``, ``facts`` and ``topo``. With
    ``--fail-on-init-error=false`` a node whose NVML cannot start (no driver loaded yet) is
    read as the agent reads it then: no GPUs, and what sysfs still tells, so what ``gfd facts``
    captures there replays with ``--simulate`` to the labels the agent published."""
    from gfd.errors import NvmlError, NvmlNotReady

    with facts_source(settings) as read:
        try:
            return read()
        except NvmlError as exc:
            init_failure = isinstance(exc, NvmlNotReady) or exc.call == "nvmlInit"
            if settings.fail_on_init_error or not init_failure:
                raise
            return read.without_nvml()


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

    facts = read_node_once(settings)
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

    facts = read_node_once(settings)
    derived = {"topology": topology_to_json(build_topology(facts))} if facts.gpus else {}
    stdout.write(dump_facts(facts, fmt, derived=derived))  # type: ignore[arg-type]
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


def command_run(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    settings: Settings,
    stdout: TextIO,
    log: Any,
) -> int:
    """Label once (``--oneshot``) or forever; SIGTERM/SIGINT stop, SIGHUP reloads the config.

    A stop ends the run within a second, whatever it is doing: a cycle that is reading or
    computing is abandoned (nothing of it was published), a publication in progress
    finishes (its sinks see the stop and wait no more), and a main thread held in a call
    that cannot be interrupted is overtaken by :class:`StopWatchdog`.
    """
    from gfd.agent import LoopControl, Pacer, StopRequested

    control = LoopControl()
    factory = SinkFactory(control.stop)
    health = HealthSetup(control.stop)
    endpoint = MetricsEndpoint(log)
    endpoint.apply(settings)()
    previous = _install_signal_handlers(control)
    watchdog = StopWatchdog(control)
    #: Host readers made for the settings of each (re)load; each may hold an NVML session.
    opened: list[NodeReader] = []
    try:
        with facts_source(settings) as simulated:
            # The simulator is fixed for the process (--simulate is a flag); a host
            # reader follows the machine-type file and sysfs root of each reload.
            def reader_for(chosen: Settings) -> NodeReader:
                if chosen.simulate:
                    return simulated
                opened.append(host_reader(chosen))
                return opened[-1]

            built = factory.build(settings, stdout)
            factory.adopt(built)
            agent = _agent_for(
                settings, built, reader_for(settings), log, endpoint, health, control
            )
            ever_succeeded = False
            pacer = Pacer(settings.sleep_interval)
            if settings.oneshot and not control.stop.is_set():
                try:
                    outcome = agent.cycle()
                except StopRequested:
                    log.info("stopping", reason="signal", during="cycle")
                    return EXIT_OK
                if outcome.ok or outcome.published_without_nvml:
                    return EXIT_OK
                print(error_line(outcome.reason), file=sys.stderr)
                return EXIT_FAILED
            from gfd.config_watch import ConfigFileWatch

            config_watch = ConfigFileWatch(settings.config_file)
            while not control.stop.is_set():
                try:
                    outcome = agent.cycle()
                except StopRequested:
                    # A stop signal ended the cycle while it read or computed.
                    break
                ever_succeeded = ever_succeeded or outcome.ok
                if outcome.init_failure and settings.fail_on_init_error and not ever_succeeded:
                    print(
                        error_line(
                            f"{outcome.reason} (pass --fail-on-init-error=false to keep retrying)"
                        ),
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
                    swapped = _reload(
                        explicit, env, settings, agent, factory, endpoint, reader_for, stdout, log,
                        health, control, reason=control.reload_reason,
                    )  # fmt: skip
                    if swapped is not None:
                        settings, agent = swapped
                        pacer.sleep_interval = settings.sleep_interval
            log.info("stopping", reason="signal")
            agent.close()
            return EXIT_OK
    finally:
        for reader in opened:
            reader.close()
        _restore_signal_handlers(previous)
        factory.close()
        endpoint.close()
        watchdog.close()


class HealthSetup:
    """The GPU health checks of the running configuration.

    What the checks remember (NVLinks seen up, a grace period running, the state
    reported) outlives a reload: each configuration's reporter starts from the last.
    """

    def __init__(self, stop: Any) -> None:
        self._stop = stop
        self._last: Any = None

    def reporter(
        self, settings: Settings, built: SinkSet, read: NodeReader, log: Any, telemetry: Any
    ) -> Any:
        """The reporter for ``settings``, or None when no check is asked for."""
        if not settings.health_checks:
            self._last = None
            return None
        from gfd.health import API_CHECKS, HealthMonitor, HealthReporter

        node_sink = next((sink for sink in built.sinks if sink.name == "node"), None)
        checks = settings.health_checks
        if node_sink is None:
            # Without the node sink there is no Node to read: the API checks cannot run.
            checks = tuple(check for check in checks if check not in API_CHECKS)
        previous = self._last
        monitor = HealthMonitor(
            sysfs_root=read.sysfs_root,
            checks=checks,
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            grace_period=settings.health_grace_period or 0.0,
            log=log,
            previous=previous.monitor if previous is not None else None,
        )
        read_node = writer = None
        if node_sink is not None:
            from gfd.sinks.condition import NodeConditionWriter, node_reader

            read_node = node_reader(node_sink)
            if settings.health_condition:
                writer = NodeConditionWriter(
                    client=built.client, node_sink=node_sink, stop=self._stop
                )
        self._last = HealthReporter(
            monitor,
            log=log,
            label=settings.health_label,
            read_node=read_node,
            writer=writer,
            telemetry=telemetry,
            previous=previous,
        )
        return self._last


def _agent_for(
    settings: Settings,
    built: SinkSet,
    read: NodeReader,
    log: Any,
    endpoint: MetricsEndpoint,
    health: HealthSetup,
    control: Any,
) -> Any:
    from gfd.agent import Agent

    return Agent(
        interruptible=control.interruptible,
        read_facts=read,
        # With --fail-on-init-error=false a node whose NVML cannot start is labelled
        # without GPUs (the reference does the same) until NVML comes up.
        facts_without_nvml=None if settings.fail_on_init_error else read.without_nvml,
        sinks=built.sinks,
        options=_label_options(settings, with_timestamp=True),
        log=log,
        telemetry=endpoint.telemetry,
        health=health.reporter(settings, built, read, log, endpoint.telemetry),
    )


def _reload(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    current: Settings,
    agent: Any,
    factory: SinkFactory,
    endpoint: MetricsEndpoint,
    reader_for: Callable[[Settings], NodeReader],
    stdout: TextIO,
    log: Any,
    health: HealthSetup,
    control: Any,
    *,
    reason: str = "signal",
) -> tuple[Settings, Any] | None:
    """Apply a SIGHUP: the new settings and agent, or None with the running ones kept.

    Everything that can fail (the config file, the sinks and their Kubernetes client,
    binding a new metrics address) happens before anything running is touched, so a
    refused reload leaves the agent exactly as it was; it is logged, counted in
    ``gfd_config_reload_failures_total`` and shown by ``/readyz``.
    """
    from gfd.logs import configure_logging

    def refuse(exc: Exception, event: str, **fields: Any) -> None:
        known = isinstance(exc, GfdError)
        reason = shorten(str(exc) if known else f"internal error: {type(exc).__name__}: {exc}")
        # Counted before it is logged: whoever reads the log line finds /readyz saying so.
        endpoint.reload_failed(reason)
        log.error(event, reason=reason, exc_info=None if known else exc, **fields)

    try:
        reloaded = resolve_settings(explicit, env)
        check_machine_type_file(reloaded)
        built = factory.build(reloaded, stdout)
    except Exception as exc:
        refuse(exc, "config reload failed; keeping the running configuration")
        return None
    try:
        commit_endpoint = endpoint.apply(reloaded)
    except Exception as exc:
        factory.discard(built)
        refuse(
            exc,
            "config reload failed: metrics address change refused; keeping the running configuration",
            address=reloaded.metrics_address,
            serving=current.metrics_address,
        )
        return None
    agent.close()
    factory.adopt(built)
    commit_endpoint()
    configure_logging(reloaded.log_level)
    new_agent = _agent_for(reloaded, built, reader_for(reloaded), log, endpoint, health, control)
    endpoint.reloaded()
    log.info(
        "configuration reloaded",
        reason=reason,
        config_file=reloaded.config_file,
        sleep_interval=reloaded.sleep_interval,
        metrics_address=reloaded.metrics_address,
    )
    return reloaded, new_agent


def _install_signal_handlers(control: Any) -> dict[int, Any]:
    previous: dict[int, Any] = {}

    def stop(_signum: int, _frame: Any) -> None:
        # Raises StopRequested when a cycle is reading or computing: it ends at once.
        control.stop_from_signal()

    def reload(_signum: int, _frame: Any) -> None:
        control.request_reload()

    for signum, handler in ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, reload)):
        previous[signum] = signal.signal(signum, handler)
    return previous


def _restore_signal_handlers(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


#: How long a stop signal leaves the main thread to finish before the process ends
#: anyway: the README promises that a stop takes at most a second.
STOP_GRACE_SECONDS = 0.75


class StopWatchdog:
    """Ends the process when the main thread has not obeyed a stop signal in time.

    Python runs signal handlers in the main thread, between two bytecodes: a main thread
    inside one long call into C (NVML on a hung or slowly initialising driver, a blocking
    system call) would see SIGTERM only when the call returns, which may be never. The
    interpreter's own C-level handler also writes each signal's number to a pipe
    (``signal.set_wakeup_fd``) at once, whatever the main thread does; this thread reads
    it, sets the stop event, and if the run has not ended ``grace`` seconds later writes
    one log line and exits with status 0 (a requested stop, as the loop's own) without
    further cleanup. That is safe for what gfd publishes: the feature file is only ever
    replaced by a rename, and API writes are single requests.
    """

    def __init__(
        self,
        control: Any,
        *,
        grace: float = STOP_GRACE_SECONDS,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self._control = control
        self._grace = grace
        self._exit_now = exit_now
        self._done = threading.Event()
        #: A stop signal came: from then on only the process's end stands the watchdog down.
        self._stopping = threading.Event()
        self._read, self._write = os.pipe()
        # The C-level handler must never block; a full pipe only drops a byte.
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="gfd-stop-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        stops = {int(signal.SIGTERM), int(signal.SIGINT)}
        while True:
            try:
                received = os.read(self._read, 64)
            except OSError:
                return
            if not received:
                return  # closed: the run is over
            if stops.isdisjoint(received):
                continue  # SIGHUP: a reload, handled by the loop
            self._control.request_stop()
            self._stopping.set()
            if self._done.wait(self._grace):
                return
            self._say_stopping_now()
            self._exit_now(EXIT_OK)
            return

    def _say_stopping_now(self) -> None:
        """One log line, written with one system call: the main thread may hold any lock."""
        from gfd.logs import get_logger, json_line

        if not get_logger().is_enabled_for("warning"):
            return
        event = (
            f"stopping now: still busy {self._grace} s after the stop signal "
            "(a call that cannot be interrupted, such as NVML on a hung driver)"
        )
        line = (
            f"gfd: warning: {event}" if sys.stdout.isatty() else json_line("warning", event, {}, {})
        )
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode())

    def close(self) -> None:
        """The run is over: stop watching, give the wakeup descriptor back.

        After a stop signal the countdown goes on: what runs after the loop (closing
        readers, sinks, the metrics endpoint, the interpreter's own exit) is held to the
        same second as the loop itself; a process that ends sooner ends the thread too.
        """
        signal.set_wakeup_fd(self._previous)
        if self._stopping.is_set() and self._thread.is_alive():
            return
        self._done.set()
        os.close(self._write)
        self._thread.join(timeout=self._grace)
        os.close(self._read)


#: The longest error line gfd prints; whatever a message echoes, it stays readable.
ERROR_LINE_LIMIT = 1000


def error_line(exc: BaseException | str) -> str:
    """``gfd: error: <reason>`` on one line, however the reason was built."""
    reason = " ".join(str(exc).splitlines())
    return f"gfd: error: {shorten(reason, ERROR_LINE_LIMIT)}"


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
) -> int:
    """Entry point of ``gfd`` and ``python -m gfd``.

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
        settings = resolve_settings(explicit, environment)
        check_machine_type_file(settings)
    except (UsageError, ConfigError) as exc:
        print(error_line(exc), file=sys.stderr)
        return EXIT_USAGE
    # After parsing: --version and --help end above without loading the logging stack.
    from gfd.logs import configure_logging, get_logger

    configure_logging(settings.log_level)
    log = get_logger()
    command = namespace.command or "run"
    try:
        if command == "labels":
            code = command_labels(settings, out, log)
        elif command == "facts":
            code = command_facts(settings, namespace.format, out)
        elif command == "topo":
            code = command_topo(settings, namespace.format, out)
        else:
            code = command_run(explicit, environment, settings, out, log)
        out.flush()
        return code
    except BrokenPipeError:
        _quiet_broken_stdout(out)
        return EXIT_FAILED
    except ConfigError as exc:
        print(error_line(exc), file=sys.stderr)
        return EXIT_USAGE
    except GfdError as exc:
        print(error_line(exc), file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
    except (RecursionError, MemoryError) as exc:
        reason = f"input too large or too deeply nested ({type(exc).__name__})"
        print(error_line(reason), file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
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


def _flush_quietly(out: TextIO) -> None:
    try:
        out.flush()
    except BrokenPipeError:
        _quiet_broken_stdout(out)
    except (OSError, ValueError):
        pass
