"""The simulator's C files keep their state in one unit and call each other in one order.

``gfd/sim/nvmlsim.h`` writes down the order of the library's files, lowest first (its
"Unit order" table). These tests read that table and the C sources (comments, strings
and preprocessor lines taken out; simple text matching, no C parser) and fail on:

- a variable at file scope, or a ``static`` one inside a function, that can change and is
  outside ``sim_state.c`` (the state's one home), one there that is not ``static``, and
  any ``extern`` variable, in a source or the header;
- a file that names a function of a file on its own row of the table or a row above
  (so the calls between files form no circle);
- a file missing from the table, or a name in it that is no file.

The checks are run on small made-up sources too, so that each is seen to fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[2] / "gfd" / "sim"
HEADER = SIM / "nvmlsim.h"
STATE_UNIT = "sim_state.c"

pytestmark = pytest.mark.checkout_sources

_COMMENT_OR_LITERAL = re.compile(
    r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.DOTALL
)
_PREPROCESSOR = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
# A function definition starts at column 0: return type, name, parameters, then "{".
_DEFINITION = re.compile(
    r"^(?P<head>[A-Za-z_][\w \t*]*?)\b(?P<name>[A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.MULTILINE
)
_NAME_USED = re.compile(r"(?<![.\w])(?<!->)([A-Za-z_]\w*)")
_ORDER_ROW = re.compile(r"^ \*\s+(\d+)\s+((?:sim_\w+\.c\s*)+)$")


def code_of(text: str) -> str:
    """C text without comments, string and character literals or preprocessor lines.

    What is taken out becomes its newlines (a literal becomes ``0``), so that lines keep
    their numbers and definitions stay at the start of a line.
    """

    def blank(match: re.Match[str]) -> str:
        gone = match.group()
        return "0" if gone[0] in "\"'" else "\n" * gone.count("\n")

    return _PREPROCESSOR.sub(blank, _COMMENT_OR_LITERAL.sub(blank, text))


def unit_order(header_text: str) -> dict[str, int]:
    """The header's "Unit order" table: file name -> row (1 is the lowest)."""
    lines = header_text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Unit order, lowest first" in line)
    order: dict[str, int] = {}
    for line in lines[start + 1 :]:
        row = _ORDER_ROW.match(line)
        if row is None:
            if order:
                break
            continue
        for name in row[2].split():
            assert name not in order, f"{name} is on two rows of the unit order"
            order[name] = int(row[1])
    return order


def split_scopes(code: str) -> tuple[list[str], list[str]]:
    """The declarations at file scope (each ending in ";") and the function bodies.

    Braces at file scope belong to a function body when what precedes them ends in ")",
    else to a declaration (a struct, an initialiser), which then runs on to its ";".
    """
    declarations: list[str] = []
    bodies: list[str] = []
    chunk: list[str] = []
    i = 0
    while i < len(code):
        c = code[i]
        if c == "{":
            depth, j = 1, i + 1
            while depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            if "".join(chunk).rstrip().endswith(")"):
                bodies.append(code[i + 1 : j - 1])
                chunk = []
            else:
                chunk.append("{}")
            i = j
            continue
        if c == ";":
            declarations.append(" ".join("".join(chunk).split()))
            chunk = []
        else:
            chunk.append(c)
        i += 1
    return declarations, bodies


def _is_const_object(declaration: str) -> bool:
    """Whether the object declared (not what it points to) is const."""
    before_init = declaration.split("=", 1)[0]
    if "*" in before_init:
        return bool(re.search(r"\*\s*const\b[^*]*$", before_init))
    return bool(re.search(r"\bconst\b", before_init))


def variable_declarations(declarations: list[str]) -> list[str]:
    """Those file-scope declarations that declare an object, not a type or a function."""
    found = []
    for declaration in declarations:
        if not declaration or declaration.startswith("typedef"):
            continue
        before_init = declaration.split("=", 1)[0]
        if re.fullmatch(r"(?:\w+\s+)*(?:struct|union|enum)(?:\s+\w+)?\s*(?:\{\})?\s*", before_init):
            continue  # a struct, union or enum and no object of it
        if "(" in before_init and not re.search(r"\(\s*\*", before_init):
            continue  # a function's declaration
        found.append(declaration)
    return found


@dataclass(frozen=True)
class Unit:
    name: str
    code: str

    @classmethod
    def read(cls, path: Path) -> Unit:
        return cls(path.name, code_of(path.read_text()))

    def defined_functions(self) -> set[str]:
        return {m["name"] for m in _DEFINITION.finditer(self.code)}

    def shared_functions(self) -> set[str]:
        """The functions other files may call: those not static."""
        return {
            m["name"] for m in _DEFINITION.finditer(self.code) if "static" not in m["head"].split()
        }

    def names_used(self) -> set[str]:
        """Every identifier but a struct member's (after "." or "->")."""
        return set(_NAME_USED.findall(self.code))


def state_problems(units: list[Unit], header_code: str) -> list[str]:
    """Variables that can change outside the state unit, or are shared (extern)."""
    problems = []
    header_declarations, _ = split_scopes(header_code)
    for declaration in variable_declarations(header_declarations):
        problems.append(f"nvmlsim.h declares a variable: {declaration}")
    for unit in units:
        declarations, bodies = split_scopes(unit.code)
        for declaration in variable_declarations(declarations):
            words = declaration.split()
            if "extern" in words:
                problems.append(f"{unit.name}: an extern variable: {declaration}")
            elif unit.name == STATE_UNIT:
                if "static" not in words:
                    problems.append(f"{unit.name}: the state is not static: {declaration}")
            elif not _is_const_object(declaration):
                problems.append(f"{unit.name}: a variable outside {STATE_UNIT}: {declaration}")
        for body in bodies:
            for statement in re.findall(r"\b(?:static|extern)\b[^;{]*", body):
                if statement.startswith("extern") or (
                    unit.name != STATE_UNIT and not _is_const_object(statement)
                ):
                    problems.append(f"{unit.name}: a variable inside a function: {statement}")
    return problems


def order_problems(units: list[Unit], order: dict[str, int]) -> list[str]:
    """Files that name a function of a file on their own row of the order or above."""
    problems = []
    home = {name: unit.name for unit in units for name in unit.shared_functions()}
    for unit in units:
        for name in sorted(unit.names_used() - unit.defined_functions()):
            callee = home.get(name)
            if callee is not None and order[callee] >= order[unit.name]:
                problems.append(
                    f"{unit.name} (row {order[unit.name]}) calls {name} of {callee} "
                    f"(row {order[callee]}): a file calls only files on rows above its own"
                )
    return problems


@pytest.fixture(scope="module")
def units() -> list[Unit]:
    found = [Unit.read(path) for path in sorted(SIM.glob("sim_*.c"))]
    assert len(found) >= 10, f"the simulator's C sources are not in {SIM}"
    return found


@pytest.fixture(scope="module")
def order() -> dict[str, int]:
    return unit_order(HEADER.read_text())


def test_every_file_has_a_place_in_the_order(units: list[Unit], order: dict[str, int]) -> None:
    assert order[STATE_UNIT] == 1, "the state unit calls no other file: it is the lowest"
    assert set(order) == {unit.name for unit in units}


def test_the_state_lives_in_one_unit(units: list[Unit]) -> None:
    assert state_problems(units, code_of(HEADER.read_text())) == []
    # The parse sees the state at all (not a silently empty match).
    state = next(unit for unit in units if unit.name == STATE_UNIT)
    declarations, _ = split_scopes(state.code)
    assert any("sim_state state" in d for d in variable_declarations(declarations))


def test_files_call_only_files_below_them(units: list[Unit], order: dict[str, int]) -> None:
    assert order_problems(units, order) == []
    # The parse sees calls between files at all.
    core = next(unit for unit in units if unit.name == "sim_core.c")
    assert "sim_load_machine" in core.names_used()


def test_the_documented_order_is_the_headers(order: dict[str, int]) -> None:
    architecture = (SIM.parents[1] / "docs" / "architecture.md").read_text()
    for name, row in order.items():
        assert re.search(rf"^\| {row} \|.*`{re.escape(name)}`", architecture, re.MULTILINE), (
            f"docs/architecture.md does not show {name} on row {row}"
        )


# The checks themselves, on made-up sources: each must fail where it should.

FAKE_ORDER = {"sim_state.c": 1, "sim_low.c": 2, "sim_high.c": 3, "sim_side.c": 3}


def fake(name: str, text: str) -> Unit:
    return Unit(name, code_of(text))


GOOD = [
    fake(
        "sim_state.c",
        "static sim_state state = {.lock = X};\nsim_state *sim_state_lock(void) {\n"
        "    return &state;\n}\n",
    ),
    fake(
        "sim_low.c",
        'static const char *const names[] = {"a"};\nstatic const struct {\n    int a;\n}'
        " table[2] = {{1}, {2}};\ntypedef struct {\n    int x;\n} thing;\n"
        "int sim_low(sim_state *st);\nint sim_low(sim_state *st) {\n"
        "    static const int k = 1;\n    return st->x + k;\n}\n",
    ),
    fake(
        "sim_high.c",
        "/* sim_side() */\nint nvmlHigh(void) {\n    sim_state *st = sim_state_lock();\n"
        '    puts("sim_side()");\n    return sim_low(st);\n}\n',
    ),
    fake("sim_side.c", "int sim_side(void) {\n    return 0;\n}\n"),
]


def test_the_checks_pass_a_good_made_up_library() -> None:
    assert state_problems(GOOD, "") == []
    assert order_problems(GOOD, FAKE_ORDER) == []


@pytest.mark.parametrize(
    ("unit", "problem"),
    [
        (fake("sim_low.c", "int calls;\n"), "a variable outside sim_state.c: int calls"),
        (fake("sim_low.c", "static int calls = 0;\n"), "a variable outside sim_state.c"),
        (fake("sim_low.c", "static const char *names[2];\n"), "a variable outside"),
        (fake("sim_low.c", "static struct {\n    int a;\n} s;\n"), "a variable outside"),
        (fake("sim_low.c", "extern int calls;\n"), "an extern variable"),
        (fake("sim_state.c", "sim_state state;\n"), "the state is not static"),
        (
            fake("sim_low.c", "int f(void) {\n    static int n;\n    return n++;\n}\n"),
            "a variable inside a function: static int n",
        ),
    ],
)
def test_a_variable_outside_the_state_unit_fails(unit: Unit, problem: str) -> None:
    others = [u for u in GOOD if u.name != unit.name]
    problems = state_problems([*others, unit], "")
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_variable_in_the_header_fails() -> None:
    header = code_of("SIM_INTERNAL extern sim_machine *g_machine;\nint f(void);\n")
    assert state_problems(GOOD, header) == [
        "nvmlsim.h declares a variable: SIM_INTERNAL extern sim_machine *g_machine"
    ]


@pytest.mark.parametrize(
    ("caller", "text", "problem"),
    [
        # Upwards: the low file calls the high one.
        ("sim_low.c", "int sim_low(void) {\n    return nvmlHigh();\n}\n", "calls nvmlHigh of"),
        # Sideways: a file on the same row.
        ("sim_high.c", "int nvmlHigh(void) {\n    return sim_side();\n}\n", "calls sim_side of"),
        # The state unit calls no file: it is the lowest.
        (
            "sim_state.c",
            "static sim_state state;\nint sim_state_lock(void) {\n    return sim_low(0);\n}\n",
            "calls sim_low of sim_low.c",
        ),
        # A function's address counts as much as a call.
        (
            "sim_low.c",
            "int sim_low(void) {\n    return run(&sim_side);\n}\n",
            "calls sim_side of sim_side.c",
        ),
    ],
)
def test_a_call_upwards_or_sideways_fails(caller: str, text: str, problem: str) -> None:
    units = [u for u in GOOD if u.name != caller] + [fake(caller, text)]
    problems = order_problems(units, FAKE_ORDER)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_order_table_is_read_from_the_header() -> None:
    header = (
        "/*\n * Unit order, lowest first. A file calls ...\n * more words:\n"
        " *   1  sim_state.c\n *   2  sim_parse.c sim_event_queue.c\n *   3  sim_core.c\n"
        " * The state is below everything.\n */\n"
    )
    assert unit_order(header) == {
        "sim_state.c": 1,
        "sim_parse.c": 2,
        "sim_event_queue.c": 2,
        "sim_core.c": 3,
    }
