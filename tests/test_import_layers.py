"""The package's import layers, checked: imports only point down, no cycle, no tests.

Every import in ``gfd/`` (those inside functions too) is read from the source with ``ast``.
Each top-level part of the package sits in one layer of :data:`LAYERS`, lowest first; an
import may only go to a lower layer, so no cycle can form between the parts, and a new
upward import fails here with the two modules named. Within one part, the modules' own
imports must not form a cycle either. The product never imports the tests.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import gfd

PACKAGE = Path(gfd.__file__).resolve().parent

#: Lowest first. A part is a top-level module or subpackage of ``gfd``.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        {"gfd"},
        {"gfd.base"},
        {"gfd.facts", "gfd.config"},
        {"gfd.topology", "gfd.kube_api"},
        {"gfd.nvml", "gfd.labels"},
        {"gfd.sim", "gfd.health"},
        {"gfd.sinks", "gfd.scheduling"},
        {"gfd.agent"},
        {"gfd.metrics"},
        {"gfd.app"},
        {"gfd.cleanup", "gfd.doctor", "gfd.explain", "gfd.fleet"},
        {"gfd.cli"},
        {"gfd.console"},
        {"gfd.__main__"},
    )
)

#: Layers inside a part whose modules must point down too, lowest first; a module sits in
#: the layer of the longest name it is or starts with (the part's own name holds only the
#: package itself: a module left out fails, it is not put on top). In gfd.health the
#: checks know only the Check protocol and, below it, the one decision whether the DRA
#: driver hands out the GPUs (a new check is one file and one registry line, and no check
#: leans on another), and the condition knows neither the registry nor the monitor.
INNER_LAYERS: dict[str, tuple[frozenset[str], ...]] = {
    # gfd.base is what every part stands on: the errors and the record declaration, then
    # the bounded reads and the collector's pause, then logging; the package itself holds
    # nothing, so that importing one of them does not import the others.
    "gfd.base": tuple(
        frozenset(layer)
        for layer in (
            {"gfd.base.errors", "gfd.base.frozen"},
            {"gfd.base.inputs", "gfd.base.startup_gc"},
            {"gfd.base.logs"},
            {"gfd.base"},
        )
    ),
    "gfd.health": tuple(
        frozenset(layer)
        for layer in (
            {"gfd.health.dra_node", "gfd.health.xid_catalog"},
            {"gfd.health.check"},
            {"gfd.health.checks"},
            {"gfd.health.registry", "gfd.health.condition", "gfd.health.resource_slices"},
            {"gfd.health.monitor", "gfd.health.taint"},
            {"gfd.health.reporter"},
            {"gfd.health"},
        )
    ),
    # In gfd.doctor the checks know the finding and the examination, never each other;
    # the registry names them; the package's face runs them.
    "gfd.doctor": tuple(
        frozenset(layer)
        for layer in (
            {"gfd.doctor.finding", "gfd.doctor.api", "gfd.doctor.agent_command"},
            {"gfd.doctor.examination"},
            {"gfd.doctor.checks"},
            {"gfd.doctor.registry", "gfd.doctor.report"},
            {"gfd.doctor", "gfd.explain", "gfd.fleet"},
        )
    ),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str) -> Iterator[str]:
    """Every module ``name`` imports, at any depth of its code, as absolute names."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _gfd_imports(name: str) -> set[str]:
    """The gfd modules ``name`` imports (a name imported from a module counts as it)."""
    targets = set()
    for target in _imports(name):
        while target not in MODULES and "." in target:
            target = target.rpartition(".")[0]
        if target in MODULES and target != name:
            targets.add(target)
    return targets


def _part(name: str) -> str:
    return ".".join(name.split(".")[:2])


def _layer(part: str) -> int:
    for index, layer in enumerate(LAYERS):
        if part in layer:
            return index
    raise AssertionError(f"{part} is in no layer of tests/test_import_layers.py: add it")


def test_every_part_of_the_package_has_a_layer() -> None:
    for name in MODULES:
        _layer(_part(name))


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of ``graph`` (module -> modules it imports) that does not point down."""
    upward = []
    for name in sorted(graph):
        for target in sorted(graph[name]):
            source_part, target_part = _part(name), _part(target)
            if source_part != target_part and _layer(target_part) >= _layer(source_part):
                upward.append(f"{name} imports {target} ({source_part} is not above {target_part})")
    return upward


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph``, or None. A package's ``__init__`` importing its own submodules
    that import names from it is the usual facade, not counted: such an edge is left out."""
    edges = {
        name: {t for t in targets if not name.startswith(t + ".")}
        for name, targets in graph.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for target in sorted(edges.get(name, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target, [*path, target])
                if found:
                    return found
        state[name] = 2
        return None

    for name in sorted(edges):
        if name not in state:
            found = visit(name, [name])
            if found:
                return found
    return None


GRAPH = {name: _gfd_imports(name) for name in MODULES}


def test_imports_only_point_down() -> None:
    upward = upward_imports(GRAPH)
    assert not upward, "\n".join(upward)


def _inner_layer(name: str, layers: tuple[frozenset[str], ...]) -> int:
    found = [
        (len(prefix), index)
        for index, layer in enumerate(layers)
        for prefix in layer
        if name == prefix or (prefix != _part(name) and name.startswith(prefix + "."))
    ]
    if not found:
        raise AssertionError(f"{name} is in no INNER_LAYERS layer of its part: add it")
    return max(found)[1]


def test_inside_a_layered_part_imports_point_down_too() -> None:
    for part, layers in INNER_LAYERS.items():
        for name in MODULES:
            if _part(name) == part:
                _inner_layer(name, layers)
    upward = [
        f"{name} imports {target} (not below it in INNER_LAYERS[{part!r}])"
        for part, layers in INNER_LAYERS.items()
        for name in sorted(m for m in GRAPH if _part(m) == part)
        for target in sorted(GRAPH[name])
        if _part(target) == part and _inner_layer(target, layers) >= _inner_layer(name, layers)
    ]
    assert not upward, "\n".join(upward)


def test_no_module_import_cycle() -> None:
    cycle = import_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_product_never_imports_the_tests() -> None:
    offenders = [
        name
        for name in sorted(MODULES)
        for target in _imports(name)
        if target == "tests" or target.startswith("tests.")
    ]
    assert not offenders, offenders


def test_the_checks_catch_an_upward_import_and_a_cycle() -> None:
    """The checks themselves, on made-up graphs: facts importing the agent is upward, and
    the config reaching back to itself through health and labels (as it once did) a cycle."""
    assert upward_imports({"gfd.facts": {"gfd.agent"}}) == [
        "gfd.facts imports gfd.agent (gfd.facts is not above gfd.agent)"
    ]
    assert upward_imports({"gfd.agent": {"gfd.facts"}}) == []
    looped = {
        "gfd.config.options": {"gfd.health"},
        "gfd.health": {"gfd.labels.mig"},
        "gfd.labels.mig": {"gfd.config.options"},
    }
    assert import_cycle(looped) == [
        "gfd.config.options",
        "gfd.health",
        "gfd.labels.mig",
        "gfd.config.options",
    ]
    assert (
        import_cycle(
            {"gfd.topology": {"gfd.topology.compact"}, "gfd.topology.compact": {"gfd.topology"}}
        )
        is None
    )
