"""What a doctor check answers: one line, ok, problem or cannot tell.

This module owns what the checks under :mod:`gfd.doctor.checks` give back: an
:class:`Answer`, whose state is :data:`OK`, :data:`PROBLEM` or :data:`CANNOT_TELL`, and
which the doctor names after its check, a :class:`Finding` (a line of the report). A
problem always carries its fix; an answer that cannot tell may say what would let it tell.
"""

from __future__ import annotations

from gfd.base.errors import shorten
from gfd.base.frozen import frozen_dataclass

OK = "ok"
PROBLEM = "problem"
#: The check could not find out (nothing to look at in this setup, or an earlier link of
#: the chain is broken): never a problem by itself.
CANNOT_TELL = "cannot tell"
STATES = (OK, PROBLEM, CANNOT_TELL)

#: The longest message or fix an answer keeps: one line a terminal still shows.
TEXT_LIMIT = 600


def one_line(text: str) -> str:
    """``text`` on one line, shortened to :data:`TEXT_LIMIT` (messages quote servers)."""
    return shorten(" ".join(text.split()), TEXT_LIMIT)


@frozen_dataclass
class Answer:
    """What a check found: its state, what it saw, and (for a problem) what to do."""

    state: str
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"an answer's state is one of {STATES}, not {self.state!r}")
        if self.state == PROBLEM and not self.fix.strip():
            raise ValueError(f"a problem without a fix: {self.message!r}")
        object.__setattr__(self, "message", one_line(self.message))
        object.__setattr__(self, "fix", one_line(self.fix))


def ok(message: str) -> Answer:
    return Answer(OK, message)


def problem(message: str, fix: str) -> Answer:
    return Answer(PROBLEM, message, fix)


def cannot_tell(message: str, fix: str = "") -> Answer:
    return Answer(CANNOT_TELL, message, fix)


@frozen_dataclass
class Finding:
    """One check's answer, named: a line of the report."""

    check: str
    answer: Answer

    @property
    def state(self) -> str:
        return self.answer.state

    def as_json(self) -> dict[str, str]:
        """The documented JSON form (docs/doctor.md): check, state, message, fix."""
        answer = self.answer
        return {
            "check": self.check,
            "state": answer.state,
            "message": answer.message,
            "fix": answer.fix,
        }
