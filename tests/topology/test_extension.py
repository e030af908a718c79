"""The C extension is required: these tests fail (never skip) when it is not built.

Also checks, at the largest size the issue names, that the two builders agree and
that the C builder is the faster one by a wide margin.
"""

from __future__ import annotations

import importlib
import statistics
import time

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


@pytest.mark.slow
def test_c_is_at_least_20_times_faster_at_1024_gpus() -> None:
    compact = topology_input(generated_machine(1024))
    c = build_from_input(compact, implementation="c")
    assert c == build_from_input(compact, implementation="python")

    def median_seconds(implementation: str, runs: int) -> float:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            build_from_input(compact, implementation=implementation)  # type: ignore[arg-type]
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    assert median_seconds("python", 3) >= 20 * median_seconds("c", 9)
