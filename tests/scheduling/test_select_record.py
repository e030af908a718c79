"""``gfd select``'s placement held to kube-scheduler v1.36's recorded verdicts.

``tests/records/kube-scheduler/select.json`` holds, per case of
``tests/records/select_cases.py`` (a ``gfd select`` command line and two to four nodes
whose labels sit on its requirements' edges), the placement gfd printed, and what
kube-scheduler did with a pod carrying it on each node alone: bound it, or not (or what
the API server answered when it refused the pod outright). Here, always (CI included):

- gfd prints, for the recorded flags, the placement that was recorded;
- on each node, the scheduler bound the pod exactly when the node meets the requirements
  (``gfd.scheduling.select.meets``, versions compared as tuples): the printed affinity
  matches a node exactly when the node meets the requirements (issue 42);
- gfd's own reading of the placement (``affinity_matches``, or a nodeSelector's labels
  equal) is the scheduler's.

``tests/realkube/test_scheduler_select.py`` runs the cases on a live kube-scheduler.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import pytest

from gfd.scheduling.select import MEMORY, VERSION_LABELS
from tests.records.scheduler_cases import available_of
from tests.records.select_cases import (
    CASES,
    RECORD,
    RERECORD,
    SelectCase,
    disagreements,
    placement_matches,
    printed_placement,
)
from tests.records.store import load_record, recorded_case

RE_RECORD = "re-record with python -m tests.records.select_cases --record"


def _recorded(case: SelectCase) -> dict[str, Any]:
    return recorded_case(RECORD, case.case_id, case.inputs_hash, RERECORD)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_gfd_prints_the_recorded_placement(case: SelectCase) -> None:
    recorded = _recorded(case)
    now = printed_placement(case.flags)
    if now != recorded["placement"]:
        pytest.fail(
            f"{case.command} prints another placement than the one kube-scheduler judged; "
            f"{RE_RECORD}\n  recorded: {json.dumps(recorded['placement'], sort_keys=True)}"
            f"\n  now:      {json.dumps(now, sort_keys=True)}",
            pytrace=False,
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_the_placement_matches_exactly_the_nodes_that_meet_the_requirements(
    case: SelectCase,
) -> None:
    found = disagreements(case, _recorded(case))
    if found:
        pytest.fail("kube-scheduler disagrees with meets():\n" + "\n".join(found), pytrace=False)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_gfd_reads_the_placement_as_the_scheduler_does(case: SelectCase) -> None:
    recorded = _recorded(case)
    if "refused" in recorded:
        pytest.skip("the API server refused the pod: no scheduler judged the placement")
    found = [
        f"node {name}: gfd reads the placement as {'matching' if mine else 'not matching'}, "
        f"kube-scheduler {'bound' if verdict['fits'] else 'did not bind'} the pod; labels "
        f"{json.dumps(case.labels()[name], sort_keys=True)}"
        for name, verdict in recorded["per_node"].items()
        if (mine := placement_matches(recorded["placement"], case.labels()[name]))
        != verdict["fits"]
    ]
    if found:
        pytest.fail(f"{case.command}:\n" + "\n".join(found), pytrace=False)


def test_every_recorded_case_is_still_a_case() -> None:
    assert set(load_record(RECORD).cases) == {c.case_id for c in CASES}


def test_the_record_is_of_kube_scheduler_1_36() -> None:
    record = load_record(RECORD)
    assert record.program == "kube-scheduler"
    assert record.version.startswith("v1.36.")
    assert record.notes["built"]


def test_each_verdict_is_one_of_the_two_a_scheduler_gives() -> None:
    """Bound (no message), or unschedulable with a message counting one node; or the pod
    refused by the API server, and then no verdict."""
    record = load_record(RECORD)
    for case in CASES:
        recorded = record.cases[case.case_id]
        if "refused" in recorded:
            assert "per_node" not in recorded and recorded["refused"]["status"] == 422
            continue
        assert set(recorded["per_node"]) == set(case.node_names), case.case_id
        for name, verdict in recorded["per_node"].items():
            assert verdict["fits"] == (verdict["message"] is None), (case.case_id, name)
            if verdict["message"] is not None:
                assert available_of(verdict["message"]) == 1, (case.case_id, name)


def _terms(placement: Mapping[str, Any]) -> int:
    if "nodeSelector" in placement:
        return 0
    required = placement["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return len(required["nodeSelectorTerms"])


def test_the_corpus_covers_every_flag_and_edge() -> None:
    """At least 120 cases; every flag, each version operator for each version flag, one to
    three parts, each memory unit and the H100 trap; the nodes on each named edge; and
    nodeSelectors and affinities of one to four or more OR'ed terms among the placements."""
    assert len(CASES) >= 120
    flags: set[str] = set()
    operators: set[tuple[str, str]] = set()
    parts: set[int] = set()
    units: set[str] = set()
    seen: set[str] = set()
    tags: set[str] = set()
    for case in CASES:
        words = list(case.flags)
        flags.update(w for w in words if w.startswith("--"))
        if words.count("--family") >= 2:
            seen.add("two families")
        for flag, value in pairwise(words):
            if flag in ("--cuda", "--compute", "--driver"):
                operator = next(o for o in (">=", "<=", "==", ">", "<") if value.startswith(o))
                operators.add((flag, operator))
                parts.add(value.count(".") + 1)
            if flag == "--min-memory":
                units.add(value.lstrip("0123456789."))
                if value in ("80GiB", "80GB") and any(
                    labels.get(MEMORY) == "81559" for labels in case.labels().values()
                ):
                    seen.add(f"H100 against {value}")
        for node_tags in case.tags:
            tags.update(node_tags)
        for labels in case.labels().values():
            if labels.get(VERSION_LABELS["driver"][2]) == "":
                seen.add("driver revision ''")
    assert flags >= {
        "--family", "--product", "--min-memory", "--min-count", "--cuda", "--compute",
        "--driver", "--interconnect", "--mig-profile", "--healthy",
    }  # fmt: skip
    assert operators == {
        (f, o) for f in ("--cuda", "--compute", "--driver") for o in (">=", ">", "==", "<=", "<")
    }
    assert parts == {1, 2, 3}
    assert units >= {"MiB", "GiB", "GB"}
    assert seen >= {"two families", "H100 against 80GiB", "H100 against 80GB", "driver revision ''"}
    assert tags >= {
        "meant to meet", "version equal", "version one below", "version one above",
        "major differs", "label missing", "label empty", "leading zero", "not an integer",
        "memory at the bound", "memory one below", "count at the bound", "count one below",
        "driver revision '08'", "driver revision '8'", "driver revision ''", "another value",
        "mig count 0", "past int64",
    }  # fmt: skip
    record = load_record(RECORD)
    shapes = {_terms(record.cases[c.case_id]["placement"]) for c in CASES}
    assert 0 in shapes and 1 in shapes and 2 in shapes and max(shapes) >= 4
    verdicts = [
        v["fits"] for c in record.cases.values() for v in (c.get("per_node") or {}).values()
    ]
    assert verdicts.count(True) >= 100 and verdicts.count(False) >= 100
