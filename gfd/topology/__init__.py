"""GPU topology: the GPU-by-GPU link matrix, NVLink domains and the interconnect summary.

This package owns turning facts into a :class:`Topology` and rendering it (see
``docs/topology.md``). Two builders implement one contract: the C extension
``gfd.topology._builder`` (the default, and required: gfd is not installed without
it, and a test fails when it is missing) and its pure-Python twin
:mod:`gfd.topology.python_builder`. Both take the compact input made by
:func:`gfd.topology.compact.topology_input`, so choosing one changes nothing but
speed; the test suite runs every topology test against both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from gfd.facts import NodeFacts
from gfd.topology import python_builder
from gfd.topology.compact import TopologyInput, topology_input
from gfd.topology.model import NvLinkDomain, RawTopology, Topology, TopologySummary, assemble
from gfd.topology.render import (
    ANNOTATION_KEY,
    matrix_from_annotation,
    render_table,
    render_topology,
    to_annotation,
    topology_to_json,
)

Implementation = Literal["c", "python"]

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
    """Build the topology of ``facts``; raise TopologyError on malformed facts."""
    return build_from_input(topology_input(facts), implementation=implementation)


def build_from_input(compact: TopologyInput, *, implementation: Implementation = "c") -> Topology:
    """Build a topology from already encoded input (lets a benchmark time the builder alone)."""
    if implementation == "c":
        build = _c_builder()
    elif implementation == "python":
        build = python_builder.build
    else:
        raise ValueError(f"unknown topology implementation {implementation!r}: use 'c' or 'python'")
    raw = build(
        compact.gpu_count,
        compact.bus_keys,
        compact.numa_nodes,
        compact.levels,
        compact.links,
        compact.p2p,
    )
    return assemble(raw, compact.gpu_count)


def _c_builder() -> Callable[[int, bytes, bytes, bytes, bytes, bytes], RawTopology]:
    # Imported on first use, so that the Python twin (and its tests) still work in a tree
    # where the extension failed to build; its own test fails loudly instead.
    try:
        from gfd.topology import _builder
    except ImportError as exc:
        raise ImportError(
            "the C topology builder gfd.topology._builder is not built: install gfd with pip "
            "(which compiles it) or run 'python setup.py build_ext --inplace'"
        ) from exc
    return _builder.build
