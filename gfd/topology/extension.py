"""Choosing a topology implementation, and loading the C one.

This module owns the one switch every topology step takes (:data:`Implementation`:
the C extension ``gfd.topology._builder`` or the pure-Python twins) and the import of
the extension, with the message a user sees when it was not built.
"""

from __future__ import annotations

from types import ModuleType
from typing import Literal

Implementation = Literal["c", "python"]


def check_implementation(implementation: str) -> None:
    """Raise ValueError unless ``implementation`` names one."""
    if implementation not in ("c", "python"):
        raise ValueError(f"unknown topology implementation {implementation!r}: use 'c' or 'python'")


def c_extension() -> ModuleType:
    """The C extension (typed by ``_builder.pyi``); ImportError saying how to build it."""
    # Imported on first use, so that the Python twins (and their tests) still work in a
    # tree where the extension failed to build; its own test fails loudly instead.
    try:
        from gfd.topology import _builder
    except ImportError as exc:
        raise ImportError(
            "the C topology builder gfd.topology._builder is not built: install gfd with pip "
            "(which compiles it) or run 'python setup.py build_ext --inplace'"
        ) from exc
    return _builder
