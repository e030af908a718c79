"""The C extension is required: these tests fail (never skip) when it is not built.

Also checks that the two builders agree at the largest size the issue names. Speed
is measured by ``bench/topology.py``, never asserted in a test.
"""

from __future__ import annotations

import importlib

import pytest

from gfd.topology import build_from_input, python_builder, topology_input
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
