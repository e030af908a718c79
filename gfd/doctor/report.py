"""How the doctor's findings are written: one line each, as text or as JSON.

Text: ``<state>  <check>  <message>``, then ``  fix: <fix>`` after a problem, or
``  to tell: <what would let it>`` after a finding that cannot tell and says so; one line
per check, in chain order. JSON (``--format
json``): a list of ``{"check", "state", "message", "fix"}`` objects in the same order,
``fix`` empty where there is none (the schema in docs/doctor.md). The exit status is
non-zero exactly when a problem was found.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gfd.doctor.finding import CANNOT_TELL, PROBLEM, STATES, Finding

FORMATS = ("text", "json")
STATE_WIDTH = max(len(state) for state in STATES)


def render(findings: Sequence[Finding], fmt: str) -> str:
    """The report of ``findings`` in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "json":
        return json.dumps([finding.as_json() for finding in findings], indent=2) + "\n"
    width = max((len(finding.check) for finding in findings), default=0)
    lines = []
    for finding in findings:
        answer = finding.answer
        line = f"{answer.state:<{STATE_WIDTH}}  {finding.check:<{width}}  {answer.message}"
        if answer.fix and answer.state == PROBLEM:
            line += f"  fix: {answer.fix}"
        elif answer.fix and answer.state == CANNOT_TELL:
            line += f"  to tell: {answer.fix}"
        lines.append(line)
    return "".join(f"{line}\n" for line in lines)


def found_a_problem(findings: Sequence[Finding]) -> bool:
    return any(finding.state == PROBLEM for finding in findings)
