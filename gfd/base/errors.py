"""gfd's exception hierarchy, in one place.

::

    GfdError                  anything gfd reports to the user as a one-line reason
    ├── ConfigError           a flag, environment variable or config file is invalid
    ├── FactsError            a facts document is malformed (file, field, problem)
    ├── NvmlError             NVML failed; carries the NVML error name and code
    │   ├── NvmlNotReady      driver not loaded / library missing: worth retrying later
    │   └── NvmlGpuLost       a GPU fell off the bus during the read
    ├── TopologyError         facts that no topology can be built from
    └── SinkError             a sink could not publish
        └── SinkPermanentError  retrying cannot help (403, 422, read-only directory)
"""

from __future__ import annotations

from typing import Any

#: How much of an offending value a message echoes before cutting it with ``…``.
ECHO_LIMIT = 80


def echo(value: Any, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters then ``…``.

    A hostile input (a 2 GB line, a 50,000-level document) must never become a log
    line or an error message of the same size.
    """
    try:
        text = repr(value)
    except Exception:  # a repr that fails (or recurses too deep) must not mask the error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


def shorten(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters then ``…`` (free-form reasons from libraries)."""
    return text if len(text) <= limit else text[:limit] + "…"


class GfdError(Exception):
    """Base of every error gfd reports with a clear one-line reason."""


class ConfigError(GfdError):
    """A flag, environment variable or config file is invalid."""


class FactsError(GfdError, ValueError):
    """A facts document is malformed; the message names the source, field and problem.

    Defined here rather than with the facts model (``gfd.facts`` re-exports it) so
    that this module imports nothing of gfd's and :func:`error_kind` needs no import
    inside a function to dodge a circle.
    """

    def __init__(self, source: str, path: str, problem: str) -> None:
        self.source = source
        self.path = path
        self.problem = problem
        where = f"{source}: {path}" if path else source
        super().__init__(f"{where}: {problem}")


class NvmlError(GfdError):
    """An NVML call failed. ``name`` is NVML's error name (e.g. ``NVML_ERROR_UNKNOWN``)."""

    def __init__(self, call: str, code: int, name: str, detail: str = "") -> None:
        self.call = call
        self.code = code
        self.name = name
        self.detail = detail
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"NVML {call} failed: {name} (code {code}){suffix}")


class NvmlNotReady(NvmlError):
    """NVML cannot start yet (driver not loaded, library not found): retry later."""


class NvmlGpuLost(NvmlError):
    """A GPU stopped answering (NVML_ERROR_GPU_IS_LOST) during the read.

    ``gpu_index`` is NVML's index of the GPU being read when it answered so (None when
    the call named no GPU): the health checks name the lost GPU from it.
    """

    gpu_index: int | None = None


class TopologyError(GfdError):
    """The facts cannot describe a topology (a bus id that names no GPU, a bad level)."""


class SinkError(GfdError):
    """A sink could not publish; the previous published state is left intact."""


class SinkPermanentError(SinkError):
    """A sink failure that retrying cannot fix (permission denied, invalid object)."""


#: The bounded set of ``kind`` values of a failed cycle (logs, ``gfd_cycle_errors_total``).
ERROR_KINDS = (
    "config",
    "facts",
    "nvml-not-ready",
    "nvml-gpu-lost",
    "nvml",
    "topology",
    "sink-permanent",
    "sink",
    "internal",
)


def error_kind(error: BaseException) -> str:
    """Map an exception to its ``kind`` label: one of :data:`ERROR_KINDS`.

    Most specific class first; anything that is not a :class:`GfdError` is a bug
    in gfd and counts as ``internal``.
    """
    ordered: tuple[tuple[type[GfdError], str], ...] = (
        (NvmlNotReady, "nvml-not-ready"),
        (NvmlGpuLost, "nvml-gpu-lost"),
        (NvmlError, "nvml"),
        (SinkPermanentError, "sink-permanent"),
        (SinkError, "sink"),
        (TopologyError, "topology"),
        (FactsError, "facts"),
        (ConfigError, "config"),
    )
    for cls, kind in ordered:
        if isinstance(error, cls):
            return kind
    return "internal"
