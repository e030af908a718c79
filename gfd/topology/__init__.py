"""GPU topology: the GPU-by-GPU link matrix, NVLink domains and the interconnect summary.

This package owns turning facts into a :class:`Topology` and rendering it (see
``docs/topology.md``). Every step of the path (facts → compact input → builder →
matrix cells of the JSON and the annotation) has two implementations of one
contract: the C extension ``gfd.topology._builder`` (the default, and required: gfd
is not installed without it, and a test fails when it is missing) and its pure-Python
twins (:mod:`gfd.topology.compact`, :mod:`gfd.topology.python_builder`,
:mod:`gfd.topology.render`). Choosing one changes nothing but speed; the test suite
runs every topology test against both.
"""

from __future__ import annotations

from gfd.facts import NodeFacts
from gfd.topology.compact import TopologyInput, topology_input
from gfd.topology.extension import Implementation, c_extension, check_implementation
from gfd.topology.model import NvLinkDomain, Topology, TopologySummary, assemble
from gfd.topology.render import (
    ANNOTATION_KEY,
    matrix_from_annotation,
    render_table,
    render_topology,
    to_annotation,
    topology_to_json,
)

__all__ = [
    "ANNOTATION_KEY",
    "Implementation",
    "NvLinkDomain",
    "Topology",
    "TopologyInput",
    "TopologySummary",
    "build_from_input",
    "build_topology",
    "matrix_from_annotation",
    "render_table",
    "render_topology",
    "to_annotation",
    "topology_input",
    "topology_to_json",
]


def build_topology(facts: NodeFacts, *, implementation: Implementation = "c") -> Topology:
    """Build the topology of ``facts``; raise TopologyError on malformed facts.

    ``implementation`` picks the encoder and the builder alike.
    """
    check_implementation(implementation)
    compact = topology_input(facts, implementation=implementation)
    return build_from_input(compact, implementation=implementation)


def build_from_input(compact: TopologyInput, *, implementation: Implementation = "c") -> Topology:
    """Build a topology from already encoded input (lets a benchmark time the builder alone)."""
    check_implementation(implementation)
    if implementation == "c":
        build = c_extension().build
    else:
        # Imported only when asked for: the agent's path never runs the twin.
        from gfd.topology import python_builder

        build = python_builder.build
    raw = build(
        compact.gpu_count,
        compact.bus_keys,
        compact.numa_nodes,
        compact.levels,
        compact.links,
        compact.p2p,
    )
    return assemble(raw, compact.gpu_count)
