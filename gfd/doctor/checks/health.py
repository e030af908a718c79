"""The ``health`` link: what gfd's GPU health checks say of this node now.

The checks the configuration enables run once on this cycle's facts, through the reporter
the agent uses (:class:`gfd.health.HealthReporter`): their state is what the
``GPUHealthy`` condition and ``--health-label`` would say. The device plugin's check is
the ``device-plugin`` line's. The ``GPUHealthy`` condition on the Node, where it can be
read, is quoted beside it.
"""

from __future__ import annotations

from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, cannot_tell, ok, problem
from gfd.health import UNKNOWN
from gfd.health.condition import CONDITION_TYPE, node_condition


def _condition(examination: Examination) -> str:
    """What the Node's ``GPUHealthy`` condition says, where the Node could be read."""
    node = examination.node.node if "node" in examination.wanted_sinks else None
    if node is None:
        return ""
    condition = node_condition(node)
    if condition is None:
        return f"; the Node has no {CONDITION_TYPE} condition yet"
    return (
        f"; the Node's {CONDITION_TYPE} condition says {condition.get('status')} "
        f"({condition.get('reason')})"
    )


def examine(examination: Examination) -> Answer:
    outcome = examination.health
    if not examination.settings.health_checks:
        return ok("no health checks enabled (--health-checks none)")
    checks = ", ".join(outcome.checks) or "none but device-plugin"
    state = outcome.state
    on_node = _condition(examination)
    if state is None:
        unknown = [
            result.check
            for result in (outcome.verdict.results if outcome.verdict else ())
            if result.state == UNKNOWN
        ]
        without = f" (no facts for: {', '.join(unknown)})" if unknown else ""
        return cannot_tell(
            f"the health checks ({checks}) cannot decide this cycle{without}{on_node}",
            "see the nvml line",
        )
    if state.healthy:
        return ok(f"{state.message}{on_node}")
    return problem(
        f"{state.reason}: {state.message}{on_node}",
        f"the GPU named needs attention: docs/health.md says what {state.reason} means and "
        "what to do (drain the node, reset or replace the GPU); gfd reports it recovered once "
        "every check passes",
    )
