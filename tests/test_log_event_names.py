"""Every event gfd logs is named in one style: a short sentence in lower case.

Event names came in two styles (issue 44): sentences (``labels published``) and
snake_case identifiers (``node_labels_updated``). The sentences won, being most of them
and what a person reads in ``--log-format text``. This test reads every logger call in
``gfd/`` (``log.info("...")``, ``self._log.warning(...)``, ``get_logger().debug(...)``)
with :mod:`ast` and holds its event name to :data:`WORD`: lower-case words (digits,
hyphens and apostrophes allowed) or one of :data:`NAMES`, separated by single spaces; a
word may end in ``:``, ``;`` or ``,`` (``label dropped: not valid for Kubernetes``).

An event that is not a literal is followed to where it is: both arms of a conditional,
the literal parts of an f-string, and a parameter of the enclosing function (a helper
such as ``_report_failure(event, exc)``) to the arguments of that function's calls in
the same module. One it cannot follow fails, so that no event escapes the rule.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

GFD = Path(__file__).resolve().parents[1] / "gfd"

#: The names an event may spell as their owners do: acronyms and Kubernetes kinds.
NAMES = frozenset(
    {
        "API",
        "CA",
        "GPU",
        "Kubernetes",
        "NFD",
        "NVML",
        "NodeFeature",
        "ResourceSlices",
        "TLS",
        "Xids",
    }
)
#: One word of an event: lower case, or a name (with its possessive), then at most one
#: of ``:;,``.
WORD = re.compile(r"^(?:[a-z0-9][a-z0-9'-]*|(?:" + "|".join(sorted(NAMES)) + r")(?:'s)?)[:;,]?$")
#: The logger methods; the receiver must be a logger (a name ending in log or logger, or
#: get_logger()), so that argparse's parser.error and the like are not read.
METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical"})
LOGGER = re.compile(r"(^|[._])log(ger)?$|get_logger\(.*\)$")
#: What stands for an f-string's replacement field when its literal parts are judged.
PLACEHOLDER = "x"


def style_problem(event: str) -> str | None:
    """What is wrong with ``event`` as an event name, or None."""
    if not event:
        return "empty"
    words = event.split(" ")
    if "" in words:
        return "not single spaces between words"
    if words[-1][-1] in ":;,":
        return "ends in punctuation"
    bad = [word for word in words if not WORD.match(word)]
    if bad:
        return f"words not in the style: {bad}"
    return None


class Unresolved(Exception):
    """An event expression this test cannot follow to literals."""


def _enclosing_functions(tree: ast.AST) -> dict[ast.AST, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Each node's innermost enclosing function."""
    owner: dict[ast.AST, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, function: ast.FunctionDef | ast.AsyncFunctionDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if function is not None:
                owner[child] = function
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else None
            visit(child, inner or function)

    visit(tree, None)
    return owner


def _calls_to(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                yield node


def _argument(
    call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, param: str
) -> ast.expr:
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    for keyword in call.keywords:
        if keyword.arg == param:
            return keyword.value
    index = params.index(param)
    if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        index -= 1
    if index >= len(call.args):
        raise Unresolved(f"a call of {function.name} at line {call.lineno} does not pass {param}")
    return call.args[index]


def events_of(expr: ast.expr, tree: ast.AST, owners: dict, depth: int = 0) -> Iterator[str]:
    """The literal event names ``expr`` may be."""
    if depth > 5:
        raise Unresolved(f"line {expr.lineno}: followed too far")
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        yield expr.value
    elif isinstance(expr, ast.IfExp):
        yield from events_of(expr.body, tree, owners, depth)
        yield from events_of(expr.orelse, tree, owners, depth)
    elif isinstance(expr, ast.JoinedStr):
        parts = []
        for value in expr.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append(PLACEHOLDER)
        yield "".join(parts)
    elif isinstance(expr, ast.Name):
        function = owners.get(expr)
        params = (
            [
                a.arg
                for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs
            ]
            if function is not None
            else []
        )
        if expr.id not in params:
            raise Unresolved(f"line {expr.lineno}: {expr.id} is no parameter of its function")
        assert function is not None
        calls = list(_calls_to(tree, function.name))
        if not calls:
            raise Unresolved(f"line {expr.lineno}: {function.name} is never called here")
        for call in calls:
            yield from events_of(_argument(call, function, expr.id), tree, owners, depth + 1)
    else:
        raise Unresolved(f"line {expr.lineno}: {ast.unparse(expr)}")


def logged_events(source: str) -> Iterator[tuple[int, str]]:
    """(line, event name) of every logger call in ``source``, followed to its literals."""
    tree = ast.parse(source)
    owners = _enclosing_functions(tree)
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in METHODS
            and LOGGER.search(ast.unparse(node.func.value))
            and node.args
        ):
            continue
        for event in events_of(node.args[0], tree, owners):
            yield node.lineno, event


def all_events() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(GFD.rglob("*.py")):
        for line, event in logged_events(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(GFD.parent)), line, event))
    return found


def test_every_event_name_is_a_lower_case_sentence() -> None:
    events = all_events()
    # The scan sees gfd's events (more than 50 calls today), helpers' callers included.
    assert len(events) > 50
    assert ("gfd/agent/cycle.py", "labels published") in {(p, e) for p, _, e in events}
    assert "node taint not written" in {e for _, _, e in events}
    problems = [
        f"{path}:{line}: {event!r}: {why}"
        for path, line, event in events
        if (why := style_problem(event)) is not None
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "event",
    [
        "node_labels_updated",
        "Labels published",
        "labels  published",
        "labels published.",
        "labels published:",
        "kubeCaReloaded",
        "",
    ],
)
def test_the_rule_refuses_other_styles(event: str) -> None:
    assert style_problem(event) is not None


@pytest.mark.parametrize(
    "event",
    [
        "labels published",
        "label dropped: not valid for Kubernetes",
        "Kubernetes API request failed; retrying",
        "kernel log not read: Xids come from NVML's events alone, and those are not seen",
        "credentials reloaded after a 401",
    ],
)
def test_the_rule_takes_the_sentences(event: str) -> None:
    assert style_problem(event) is None


def test_events_are_followed_through_helpers_and_conditionals() -> None:
    source = """
def report(self, event, exc):
    log.warning(event, reason=str(exc))

def caller(self, dry):
    self.report("node taint not written", None)
    self.report("node_taint_conflict", None)
    log.info("node labels dry run" if dry else "node_labels_updated")
    self._log.error(f"GPU health {dry} failed")
    parser.error("not_a_log_event")
"""
    assert sorted(e for _, e in logged_events(source)) == [
        "GPU health x failed",
        "node labels dry run",
        "node taint not written",
        "node_labels_updated",
        "node_taint_conflict",
    ]


def test_an_event_it_cannot_follow_fails() -> None:
    source = "def f():\n    name = compute()\n    log.info(name)\n"
    with pytest.raises(Unresolved):
        list(logged_events(source))
