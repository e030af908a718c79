"""gfd's scheduling engine on the cases of ``tests/records/scheduler_cases.py``, set beside
what kube-scheduler decided (from the record, or live).

The comparisons, one list of disagreements each (empty: they agree):

- :func:`alone_disagreements`: each node alone. gfd's ``fits`` must be the scheduler's;
  where neither fits, the reasons of gfd's first failing filter (the scheduler stops at
  the first filter that fails a node) must be the reasons in the scheduler's message.
- :func:`together_disagreements`: the case's nodes together. The node the scheduler bound
  the pod to must be one gfd says fits; an unschedulable pod must fit no node to gfd either,
  and gfd's count of nodes per reason must be the scheduler's message's
  (:func:`tests.records.scheduler_cases.reason_histogram`).

Each disagreement names the case, the node, the scheduler's message and gfd's misses, so
that a failure says what in the engine to fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gfd.scheduling.cluster import cluster_from_list
from gfd.scheduling.judge import Explanation, NodeVerdict, explain, summary_line
from gfd.scheduling.workload import workload_of
from tests.records.scheduler_cases import SchedulingCase, reason_histogram


def judge(case: SchedulingCase, spec: Mapping[str, Any], node_names: Sequence[str]) -> Explanation:
    """gfd's verdicts for a pod of ``spec`` on the case's ``node_names`` and their pods."""
    items: list[Any] = [n for n in case.nodes if n["metadata"]["name"] in node_names]
    items += [p for p in case.bound if p["spec"]["nodeName"] in node_names]
    cluster = cluster_from_list({"kind": "List", "items": items}, f"case {case.case_id}")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": dict(case.pod["metadata"]),
        "spec": dict(spec),
    }
    return explain(workload_of(pod, f"case {case.case_id}"), cluster, all_nodes=True)


def first_filter_reasons(verdict: NodeVerdict) -> list[str]:
    """The scheduler's words for why the node fails: the reasons of its first failing
    filter, each once."""
    if verdict.fits or not verdict.misses:
        return []
    first = verdict.misses[0].filter
    reasons: list[str] = []
    for miss in verdict.misses:
        if miss.filter == first and miss.reason not in reasons:
            reasons.append(miss.reason)
    return reasons


def gfd_histogram(verdicts: Sequence[NodeVerdict]) -> dict[str, int]:
    """Nodes per reason, each node under its first failing filter's reasons."""
    counted: Counter[str] = Counter()
    for verdict in verdicts:
        counted.update(first_filter_reasons(verdict))
    return dict(counted)


def show_misses(verdict: NodeVerdict) -> str:
    if verdict.fits:
        return "fits"
    return "; ".join(f"{m.filter}: {m.reason} ({m.detail})" for m in verdict.misses)


def alone_disagreements(
    case: SchedulingCase,
    per_node: Mapping[str, Mapping[str, Any]],
    spec: Mapping[str, Any],
    *,
    reasons: bool = True,
    what: str = "the stored pod",
) -> list[str]:
    """Each node alone: gfd against the scheduler's ``per_node`` verdicts."""
    found: list[str] = []
    for name in case.node_names:
        scheduler = per_node[name]
        explanation = judge(case, spec, [name])
        (verdict,) = explanation.verdicts
        said = scheduler["message"] or "bound the pod there"
        if verdict.fits != scheduler["fits"]:
            found.append(
                f"{case.case_id}, node {name} alone ({what}): the scheduler "
                f"{'fits' if scheduler['fits'] else 'does not fit'} ({said}); gfd "
                f"{'fits' if verdict.fits else 'does not fit'}: {show_misses(verdict)}"
            )
        elif reasons and not verdict.fits:
            theirs = reason_histogram(scheduler["message"])
            ours = gfd_histogram([verdict])
            if theirs != ours:
                found.append(
                    f"{case.case_id}, node {name} alone ({what}): the scheduler's reasons "
                    f"{theirs} ({said}); gfd's first filter gives {ours}: "
                    f"{show_misses(verdict)}"
                )
    return found


def together_disagreements(
    case: SchedulingCase,
    together: Mapping[str, Any],
    spec: Mapping[str, Any],
    *,
    what: str = "the stored pod",
) -> list[str]:
    """All the case's nodes: gfd against the scheduler's placement or its message."""
    explanation = judge(case, spec, case.node_names)
    fitting = sorted(v.node for v in explanation.verdicts if v.fits)
    every = "; ".join(f"{v.node}: {show_misses(v)}" for v in explanation.verdicts)
    scheduled_to = together["scheduled_to"]
    if scheduled_to is not None:
        if scheduled_to not in fitting:
            return [
                f"{case.case_id}, together ({what}): the scheduler bound the pod to "
                f"{scheduled_to}; gfd fits {fitting or 'no node'}: {every}"
            ]
        return []
    found: list[str] = []
    if fitting:
        found.append(
            f"{case.case_id}, together ({what}): the scheduler fits no node "
            f"({together['message']}); gfd fits {fitting}: {every}"
        )
    theirs = reason_histogram(together["message"])
    ours = gfd_histogram(explanation.verdicts)
    if not fitting and theirs != ours:
        found.append(
            f"{case.case_id}, together ({what}): the scheduler counts {theirs} "
            f"({together['message']}); gfd counts {ours} ({summary_line(explanation)}): {every}"
        )
    return found
