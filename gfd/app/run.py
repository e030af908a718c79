"""The ``run`` subcommand: the agent assembled from the settings, its loop, and the reload
that swaps it for the agent of a new configuration.

SIGTERM/SIGINT stop the run, SIGHUP (or a changed config file) reloads it. A reload makes
everything that can fail before it touches what runs, so a refused reload leaves the
agent exactly as it was.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from gfd.agent import Agent, CycleOutcome, LoopControl, Pacer, StopRequested
from gfd.app.deadline import OneshotDeadline
from gfd.app.exit_status import EXIT_OK, error_line, exit_status_of_kind
from gfd.app.health_setup import HealthSetup
from gfd.app.label_mode import CycleNodeRead, LabelModeSetup, label_options
from gfd.app.metrics_endpoint import MetricsEndpoint
from gfd.app.node_reader import (
    NodeReader,
    check_machine_type_file,
    facts_source,
    forced_exit,
    host_reader,
)
from gfd.app.signals import StopWatchdog, install_signal_handlers, restore_signal_handlers
from gfd.app.sinks import SinkFactory, SinkSet
from gfd.base.errors import GfdError, shorten
from gfd.base.startup_gc import resume_collector
from gfd.config import Settings, resolve_settings


@dataclass
class AgentAssembly:
    """What a run keeps across configurations, and the agent of each configuration.

    The sink factory (with its Kubernetes client), the metrics endpoint, the health
    checks' memory and the label mode ``auto`` decided last outlive a reload;
    :meth:`agent_for` makes the agent of one configuration from them, and :meth:`reload`
    the agent of the next.
    """

    control: LoopControl
    factory: SinkFactory
    endpoint: MetricsEndpoint
    health: HealthSetup
    #: The facts reader of a configuration: the simulator's for the whole run, or a
    #: host reader for each (re)load's sysfs root and machine-type file.
    reader_for: Callable[[Settings], NodeReader]
    stdout: TextIO
    log: Any
    label_modes: LabelModeSetup = field(default_factory=LabelModeSetup)
    #: Whether a cycle of this run has ever succeeded (across reloads).
    succeeded: bool = False

    def ends_run(self, settings: Settings, outcome: CycleOutcome) -> bool:
        """Whether the failed cycle ``outcome`` ends the run (its last line says why)."""
        if settings.oneshot:
            # A one-shot that labelled a node whose NVML is down as one without GPUs
            # (--fail-on-init-error=false) did its job; the failure stays a log line.
            return not outcome.published_without_nvml
        return outcome.init_failure and settings.fail_on_init_error and not self.succeeded

    def agent_for(self, settings: Settings, built: SinkSet) -> Agent:
        read = self.reader_for(settings)
        # Whether the DRA driver hands out the GPUs: one watch for the device-plugin check
        # and --label-mode auto, judging the one read of the Node they share each cycle.
        dra_node = self.health.dra_node(settings, built, self.log)
        node_sink = built.node_sink
        node = None
        if node_sink is not None:
            from gfd.health.condition import node_reader

            node = CycleNodeRead(node_reader(node_sink))
        return Agent(
            interruptible=self.control.interruptible,
            read_facts=read,
            # With --fail-on-init-error=false a node whose NVML cannot start is labelled
            # without GPUs (the reference does the same) until NVML comes up.
            facts_without_nvml=None if settings.fail_on_init_error else read.without_nvml,
            sinks=built.sinks,
            options=label_options(settings, with_timestamp=True),
            log=self.log,
            telemetry=self.endpoint.telemetry,
            health=self.health.reporter(
                settings,
                built,
                read,
                self.log,
                self.endpoint.telemetry,
                dra_node=dra_node,
                read_node=node.read if node is not None else None,
            ),
            label_mode=self.label_modes.choice(
                settings, node=node, dra_node=dra_node, log=self.log
            ),
            ends_run=lambda outcome: self.ends_run(settings, outcome),
        )

    def reload(
        self,
        explicit: Mapping[str, Any],
        env: Mapping[str, str],
        current: Settings,
        agent: Agent,
        *,
        reason: str = "signal",
    ) -> tuple[Settings, Agent] | None:
        """Apply a reload: the new settings and agent, or None with the running ones kept.

        Everything that can fail (the config file, the sinks and their Kubernetes client,
        binding a new metrics address) happens before anything running is touched, so a
        refused reload leaves the agent exactly as it was; it is logged, counted in
        ``gfd_config_reload_failures_total`` and shown by ``/readyz``.
        """
        from gfd.base.logs import configure_logging

        def refuse(exc: Exception, event: str, **fields: Any) -> None:
            known = isinstance(exc, GfdError)
            why = shorten(str(exc) if known else f"internal error: {type(exc).__name__}: {exc}")
            # Counted before it is logged: whoever reads the log line finds /readyz saying so.
            self.endpoint.reload_failed(why)
            self.log.error(event, reason=why, exc_info=None if known else exc, **fields)

        try:
            reloaded = resolve_settings(explicit, env, host=current.host)
            check_machine_type_file(reloaded)
            built = self.factory.build(reloaded, self.stdout)
        except Exception as exc:
            refuse(exc, "config reload failed; keeping the running configuration")
            return None
        try:
            commit_endpoint = self.endpoint.apply(reloaded)
        except Exception as exc:
            self.factory.discard(built)
            refuse(
                exc,
                "config reload failed: metrics address change refused; keeping the running configuration",
                address=reloaded.metrics_address,
                serving=current.metrics_address,
            )
            return None
        agent.close()
        self.factory.adopt(built)
        commit_endpoint()
        configure_logging(reloaded.log_level, log_format=reloaded.log_format)
        new_agent = self.agent_for(reloaded, built)
        self.endpoint.reloaded()
        self.log.info(
            "configuration reloaded",
            reason=reason,
            config_file=reloaded.config_file,
            sleep_interval=reloaded.sleep_interval,
            metrics_address=reloaded.metrics_address,
        )
        return reloaded, new_agent


def run_agent(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    settings: Settings,
    stdout: TextIO,
    log: Any,
) -> int:
    """Label once (``--oneshot``, within ``--oneshot-timeout``: :mod:`gfd.app.deadline`) or
    forever; SIGTERM/SIGINT stop, SIGHUP reloads the config.

    ``explicit`` (the settings given on the command line) and ``env`` are read again at
    each reload, with the config file. A stop ends the run within a second, whatever it is
    doing: a cycle that is reading or computing is abandoned (nothing of it was
    published), a publication in progress finishes (its sinks see the stop and wait no
    more), and a main thread held in a call that cannot be interrupted is overtaken by
    :class:`~gfd.app.signals.StopWatchdog`.
    """
    deadline = OneshotDeadline(
        settings.oneshot_timeout if settings.oneshot else None, exit_now=forced_exit(settings)
    )
    try:
        return _assemble_and_run(explicit, env, settings, stdout, log, deadline)
    finally:
        # On every way out, those that fail before the run starts included: a watchdog
        # left behind would end the process (or the test runner holding it) later.
        deadline.close()


def _assemble_and_run(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    settings: Settings,
    stdout: TextIO,
    log: Any,
    deadline: OneshotDeadline,
) -> int:
    control = LoopControl()
    factory = SinkFactory(
        control.stop, give_up_by=None if deadline.at is None else (deadline.at, deadline.why)
    )
    health = HealthSetup(control.stop)
    endpoint = MetricsEndpoint(log)
    # The signals are the run's before anything says it is up (the metrics endpoint's
    # /healthz): a SIGHUP sent once that answered, while the run was still assembling,
    # met the default action and ended the process (seen under make test-stress). The
    # watchdog first: the handlers rely on its thread to wake the loop.
    watchdog = StopWatchdog(control, exit_now=forced_exit(settings))
    previous = install_signal_handlers(control)
    #: Host readers made for the settings of each (re)load; each may hold an NVML session.
    opened: list[NodeReader] = []
    try:
        endpoint.apply(settings)()
        with facts_source(settings) as simulated:
            # The simulator is fixed for the process (--simulate is a flag); a host
            # reader follows the machine-type file and sysfs root of each reload.
            def reader_for(chosen: Settings) -> NodeReader:
                if chosen.simulate:
                    return simulated
                opened.append(host_reader(chosen))
                return opened[-1]

            assembly = AgentAssembly(control, factory, endpoint, health, reader_for, stdout, log)
            built = factory.build(settings, stdout)
            factory.adopt(built)
            agent = assembly.agent_for(settings, built)
            # Assembled: what start-up allocated lives as long as the agent.
            resume_collector(collect_first=not settings.oneshot)
            if settings.oneshot and not control.stop_requested:
                return _run_once(agent, log)
            return _run_periodically(explicit, env, settings, agent, assembly)
    finally:
        health.close()
        for reader in opened:
            reader.close()
        restore_signal_handlers(previous)
        factory.close()
        endpoint.close()
        watchdog.close()


def _run_once(agent: Agent, log: Any) -> int:
    try:
        outcome = agent.cycle()
    except StopRequested:
        log.info("stopping", reason="signal", during="cycle")
        return EXIT_OK
    if outcome.ok or outcome.published_without_nvml:
        return EXIT_OK
    print(error_line(outcome.reason), file=sys.stderr)
    return exit_status_of_kind(outcome.kind)


def _run_periodically(
    explicit: Mapping[str, Any],
    env: Mapping[str, str],
    settings: Settings,
    agent: Agent,
    assembly: AgentAssembly,
) -> int:
    """Cycle until a stop; reload on SIGHUP or a changed config file."""
    from gfd.app.config_watch import ConfigFileWatch

    control, log = assembly.control, assembly.log
    pacer = Pacer(settings.sleep_interval)
    config_watch = ConfigFileWatch(settings.config_file)
    while not control.stop_requested:
        try:
            outcome = agent.cycle()
        except StopRequested:
            # A stop signal ended the cycle while it read or computed.
            break
        if not outcome.ok and assembly.ends_run(settings, outcome):
            print(
                error_line(f"{outcome.reason} (pass --fail-on-init-error=false to keep retrying)"),
                file=sys.stderr,
            )
            return exit_status_of_kind(outcome.kind)
        assembly.succeeded = assembly.succeeded or outcome.ok
        # Without a config file there is nothing to watch, and no wake-up a second.
        watching = config_watch.changed if settings.config_file else None
        control.sleep(pacer.next_delay(outcome.ok), changed=watching)
        if control.reload_requested and not control.stop_requested:
            control.reload_requested = False
            # Taken before the file is read, so that a write during the reload
            # is seen at the next poll.
            config_watch = ConfigFileWatch(settings.config_file)
            swapped = assembly.reload(explicit, env, settings, agent, reason=control.reload_reason)
            if swapped is not None:
                settings, agent = swapped
                pacer.sleep_interval = settings.sleep_interval
    log.info("stopping", reason="signal")
    agent.close()
    return EXIT_OK
