"""The one in-process timer the micro-benchmarks share (``health.py``, ``memory_health.py``,
``dra.py``); not a benchmark itself (``run_all.py`` skips ``_`` files)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_us(fn: Callable[[], object], runs: int) -> float:
    """The median of ``runs`` calls of ``fn``, in microseconds."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6
