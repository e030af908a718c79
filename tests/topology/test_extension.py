"""The C extension is required: these tests fail (never skip) when it is not built.

Also checks that the two builders agree at the largest size the issue names, and that
the C encoder and cell functions keep every reference count, wherever they stop. Speed
is measured by ``bench/topology.py``, never asserted in a test.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys

import pytest

from gfd.facts import PCI_LEVELS, NodeFacts, NvLink, PciPair
from gfd.topology import build_from_input, build_topology, python_builder, topology_input
from gfd.topology.compact import _REMOTE_CODES
from gfd.topology.extension import c_extension
from gfd.topology.synthetic import generated_machine


def test_c_builder_is_built_and_importable() -> None:
    builder = importlib.import_module("gfd.topology._builder")
    assert callable(builder.build)
    assert builder.MAX_GPUS == python_builder.MAX_GPUS
    assert builder.MAX_ACTIVE_LINKS == python_builder.MAX_ACTIVE_LINKS


@pytest.mark.parametrize("wiring", ["nvswitch", "mesh"])
def test_builders_agree_on_a_generated_576_gpu_machine(wiring: str) -> None:
    compact = topology_input(generated_machine(576, wiring=wiring))  # type: ignore[arg-type]
    c = build_from_input(compact, implementation="c")
    assert c == build_from_input(compact, implementation="python")
    assert c.summary.interconnect == "nvlink-partial"
    assert len(c.domains) == 72


def test_builders_agree_at_1024_gpus() -> None:
    """The largest size the issue names; how much faster C is there is bench/topology.py's job."""
    compact = topology_input(generated_machine(1024))
    assert build_from_input(compact, implementation="c") == build_from_input(
        compact, implementation="python"
    )


def held_objects(facts: NodeFacts) -> list[object]:
    """Every object the C encoder reads from ``facts``, shared singletons left out."""
    found: list[object] = [facts.gpus, facts.pci_pairs]
    for gpu in facts.gpus:
        found += [gpu, gpu.bus_id, gpu.nvlinks, gpu.index, gpu.numa_node]
        for link in gpu.nvlinks:
            found += [link, link.index, link.remote_bus_id, link.remote_type]
    for pair in facts.pci_pairs:
        found += [pair, pair.a, pair.b, pair.level]
    # Small ints, None, True and interned strings are shared with the whole interpreter.
    return [item for item in found if sys.getrefcount(item) < 1000]


def fresh(text: str) -> str:
    """An equal str that is a new object (not the interned literal)."""
    return "".join(list(text))


def with_fresh_strings(facts: NodeFacts) -> NodeFacts:
    gpus = tuple(
        dataclasses.replace(
            gpu,
            bus_id=fresh(gpu.bus_id),
            nvlinks=tuple(
                dataclasses.replace(link, remote_type=fresh(link.remote_type or "gpu"))
                for link in gpu.nvlinks
            ),
        )
        for gpu in facts.gpus
    )
    pairs = tuple(PciPair(pair.a, pair.b, fresh(pair.level)) for pair in facts.pci_pairs)  # type: ignore[arg-type]
    return dataclasses.replace(facts, gpus=gpus, pci_pairs=pairs)


def faulty_variants(facts: NodeFacts) -> dict[str, NodeFacts]:
    """Facts the C encoder gives up on at each place where it can."""
    gpus = list(facts.gpus)

    def gpu_3(**changes: object) -> NodeFacts:
        changed = [*gpus[:3], dataclasses.replace(gpus[3], **changes), *gpus[4:]]  # type: ignore[arg-type]
        return dataclasses.replace(facts, gpus=tuple(changed))

    link = gpus[3].nvlinks
    pairs = facts.pci_pairs
    return {
        "valid": facts,
        "level": dataclasses.replace(facts, pci_pairs=(*pairs, PciPair(0, 1, fresh("bogus")))),  # type: ignore[arg-type]
        "twice": dataclasses.replace(facts, pci_pairs=(*pairs, pairs[-1])),
        "range": dataclasses.replace(facts, pci_pairs=(PciPair(0, 10**6, "node"), *pairs)),
        "unhashable": dataclasses.replace(facts, pci_pairs=(*pairs[:9], PciPair(0, 1, [1]))),  # type: ignore[arg-type]
        "bus-id": gpu_3(bus_id=fresh("zz")),
        "index": gpu_3(index=10**6),
        "numa": gpu_3(numa_node=2**40),
        "remote-bus": gpu_3(nvlinks=(*link, NvLink(99, True, fresh("x"), "switch"))),
        "remote-type": gpu_3(nvlinks=(*link, NvLink(99, True, None, fresh("nv")))),  # type: ignore[arg-type]
        "link-index": gpu_3(nvlinks=(*link, NvLink(None, True, None, "gpu"))),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("wiring", ["nvswitch", "mesh"])
def test_c_encoder_and_cells_keep_every_reference_count(wiring: str) -> None:
    """No reference is leaked or lost, on success and wherever the encoder gives up."""
    _builder = c_extension()
    # 260 GPUs: indices past 256 are ints of their own, not the interpreter's shared ones.
    facts = with_fresh_strings(generated_machine(260, wiring=wiring))  # type: ignore[arg-type]
    for name, variant in faulty_variants(facts).items():
        held = held_objects(variant)
        before = [sys.getrefcount(item) for item in held]
        outcomes = [
            _builder.encode(variant.gpus, variant.pci_pairs, PCI_LEVELS, _REMOTE_CODES)
            for _ in range(3)
        ]
        assert (outcomes[0] is None) == (name != "valid"), name
        del outcomes
        assert [sys.getrefcount(item) for item in held] == before, name
    topology = build_topology(facts)
    n, levels, nvlinks = topology.gpu_count, topology.levels, topology.nvlinks
    cells = {id(cell): cell for row in _builder.matrix_rows(n, levels, nvlinks) for cell in row}
    before = [sys.getrefcount(cell) for cell in cells.values()]
    for _ in range(3):
        _builder.matrix_rows(n, levels, nvlinks)
        _builder.run_length_rows(n, levels, nvlinks)
        for make in (_builder.matrix_rows, _builder.run_length_rows):
            with pytest.raises(IndexError):
                make(n, levels[:-1], nvlinks)
            with pytest.raises(IndexError, match="tuple index out of range"):
                make(2, bytes([0, 9, 9, 0]), bytes(4))
    assert [sys.getrefcount(cell) for cell in cells.values()] == before
