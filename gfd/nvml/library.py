"""Which ``libnvidia-ml`` pynvml calls into, and the lock that serialises its use.

pynvml keeps the loaded library, its cached symbols and NVML's initialisation in module
state, one per process. This module owns switching that state between the driver's
library (``None``: pynvml loads ``libnvidia-ml.so.1`` itself) and a library at a path
(the simulator), :data:`library_lock`, which whoever starts or stops NVML holds, and
which file the loaded library came from (:func:`loaded_library_file`).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pynvml

from gfd.base.errors import NvmlNotReady

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


class _DlInfo(ctypes.Structure):
    """``Dl_info`` of ``<dlfcn.h>``: what ``dladdr`` says about an address."""

    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def loaded_library_file(symbol: str = "nvmlShutdown") -> str | None:
    """The file of the NVML library pynvml has loaded, as the dynamic linker opened it
    (the path it searched its way to, not resolved further), or None when none is loaded.

    Asked of the linker itself (``dladdr`` on one of the library's functions), so it is
    right however the library was found: the linker's search, a driver root, the simulator.
    """
    library = pynvml.nvmlLib
    if library is None:
        return None
    try:
        address = ctypes.cast(getattr(library, symbol), ctypes.c_void_p)
        # glibc 2.34 moved dladdr from libdl into libc; the process image exports it.
        process = ctypes.CDLL(None)
        dladdr = getattr(process, "dladdr", None) or ctypes.CDLL("libdl.so.2").dladdr
    except (AttributeError, OSError):
        return None
    info = _DlInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)
