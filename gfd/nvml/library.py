"""Which ``libnvidia-ml`` pynvml calls into, and the lock that serialises its use.

pynvml keeps the loaded library, its cached symbols and NVML's initialisation in module
state, one per process. This module owns switching that state between the driver's
library (``None``: pynvml loads ``libnvidia-ml.so.1`` itself) and a library at a path
(the simulator), and :data:`library_lock`, which whoever starts or stops NVML holds.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import pynvml

from gfd.errors import NvmlNotReady

#: Held while NVML is started, read or shut down: pynvml's state is per process.
library_lock = threading.Lock()
_loaded_library: str | None = None


def select_library(library_path: str | Path | None) -> None:
    """Point pynvml at ``library_path`` (or back at the driver's library); the caller holds
    :data:`library_lock`."""
    global _loaded_library
    wanted = str(library_path) if library_path is not None else None
    if wanted == _loaded_library and (wanted is None or pynvml.nvmlLib is not None):
        return
    # pynvml caches symbols by name; a different library must not inherit them.
    pynvml._nvmlGetFunctionPointer_cache.clear()
    if wanted is None:
        pynvml.nvmlLib = None
    else:
        try:
            pynvml.nvmlLib = ctypes.CDLL(wanted)
        except OSError as exc:
            raise NvmlNotReady(
                "load",
                pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                "NVML_ERROR_LIBRARY_NOT_FOUND",
                str(exc),
            ) from exc
    _loaded_library = wanted
