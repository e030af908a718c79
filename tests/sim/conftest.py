"""Fixtures for the NVML simulator tests: the real pynvml binding on the simulator library."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from types import ModuleType

import pynvml
import pytest

from gfd.sim import library_path

NVML_ERROR_UNINITIALIZED = 1


def _drain_init_count(library: ctypes.CDLL) -> None:
    """Shut NVML down until it says it is not initialised (a failed test may leave it up)."""
    for _ in range(1000):
        if library.nvmlShutdown() == NVML_ERROR_UNINITIALIZED:
            return
    raise AssertionError("nvmlShutdown never reported UNINITIALIZED")


@pytest.fixture
def lib() -> Iterator[ctypes.CDLL]:
    """The simulator library for raw C calls (NULL pointers, small buffers, return codes)."""
    library = ctypes.CDLL(str(library_path()))
    library.nvmlErrorString.restype = ctypes.c_char_p
    _drain_init_count(library)
    yield library
    _drain_init_count(library)


@pytest.fixture
def nvml(lib: ctypes.CDLL) -> Iterator[ModuleType]:
    """pynvml bound to the simulator, as a reader would bind it; restored afterwards."""
    saved_library = pynvml.nvmlLib
    cache = pynvml._nvmlGetFunctionPointer_cache
    saved_cache = dict(cache)
    pynvml.nvmlLib = lib
    cache.clear()
    try:
        yield pynvml
    finally:
        pynvml.nvmlLib = saved_library
        cache.clear()
        cache.update(saved_cache)
