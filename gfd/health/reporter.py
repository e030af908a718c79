"""The health reporter: each cycle's verdict turned into the state gfd reports, and handed on.

This module owns when the reported state changes: at once on a failing check, to healthy
when every check passes, not at all while nothing is decided; what a restart adopts from
the Node; the log line per change; and the hand-off to the condition writer
(:mod:`gfd.health.condition`), the label and telemetry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gfd.base.errors import GfdError
from gfd.facts import NodeFacts
from gfd.health.check import Verdict
from gfd.health.condition import (
    HEALTH_LABEL,
    ConditionWriter,
    HealthState,
    Transition,
    node_condition,
    state_from_condition,
    state_of,
)
from gfd.health.monitor import HealthMonitor


class HealthTelemetry(Protocol):
    def health_checked(self, verdict: Verdict, state: HealthState | None) -> None: ...


class HealthReporter:
    """Turns each cycle's verdict into the reported :class:`HealthState`.

    A verdict with a failing check decides the state at once; one where every check
    passes decides it healthy; one that decides nothing (a check without facts this
    cycle, a device plugin problem inside its grace period) keeps the state as it was:
    the last one decided, or at start-up the condition a previous gfd left on the Node.
    So a restart never turns a node that is unhealthy healthy for the length of a grace
    period, and nothing is written while nothing is decided.

    The agent calls :meth:`observe` before it publishes (its labels join the
    publication) and :meth:`report` after (the node sink has read the Node by then).
    """

    def __init__(
        self,
        monitor: HealthMonitor,
        *,
        log: Any,
        label: bool = False,
        read_node: Callable[[], Mapping[str, Any] | None] | None = None,
        writer: ConditionWriter | None = None,
        telemetry: HealthTelemetry | None = None,
        previous: HealthReporter | None = None,
    ) -> None:
        self.monitor = monitor
        self.log = log
        self.label = label
        self._read_node = read_node
        self.writer = writer
        self.telemetry = telemetry
        #: The state last decided (or adopted); a reload keeps it.
        self.state: HealthState | None = previous.state if previous is not None else None
        self._adopted: bool = previous._adopted if previous is not None else False
        self._transition: Transition | None = None

    def observe(self, facts: NodeFacts | None, error: GfdError | None = None) -> Mapping[str, str]:
        """Run the checks on this cycle's facts (None: the read failed with ``error``);
        returns the labels to add to this cycle's publication."""
        # The node sink reads the Node only in cycles that publish: after a good read.
        node = self._read_node() if self._read_node is not None and facts is not None else None
        if node is not None:
            if self.writer is not None:
                self.writer.saw(node)
            if not self._adopted:
                self._adopted = True
                if self.state is None:
                    self.state = state_from_condition(node_condition(node))
        verdict = self.monitor.observe(facts, error=error, node=node)
        decided = state_of(verdict, self.monitor.reasons)
        if decided is not None:
            if not decided.same_condition(self.state):
                self._transition = Transition(self.state, decided)
                self._log_transition(self._transition)
            self.state = decided
        if self.telemetry is not None:
            self.telemetry.health_checked(verdict, self.state)
        if self.label and self.state is not None:
            return {HEALTH_LABEL: self.state.label_value}
        return {}

    def report(self) -> None:
        """After the cycle's publication: hand the state and any transition to the writer."""
        transition, self._transition = self._transition, None
        if self.writer is not None and self.state is not None:
            self.writer.write(
                self.state, transition if transition and transition.worth_an_event else None
            )

    def _log_transition(self, transition: Transition) -> None:
        state, previous = transition.state, transition.previous
        fields = {"reason": state.reason, "message": state.message}
        if previous is not None:
            fields["was"] = previous.reason
        if not state.healthy:
            self.log.warning("GPU health problem", **fields)
        elif previous is not None and not previous.healthy:
            self.log.info("GPU health restored", **fields)
        else:
            self.log.info("GPU health checked", **fields)
