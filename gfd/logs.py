"""Logging set-up: structlog, JSON lines when stdout is not a terminal, console otherwise.

Logs go to stderr so that stdout stays clean for labels, facts and tables.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    level: str = "info", *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Configure structlog once per process (again on reload: the level may change)."""
    as_json = (not sys.stdout.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=lambda *_args: _LineLogger(stream),
        cache_logger_on_first_use=False,
    )


class _LineLogger:
    """Writes each rendered event as one line to ``stream``, or to ``sys.stderr`` as it is *now*.

    Looking stderr up per line (rather than once at configuration) keeps logging working
    when the process swaps its streams, as test runners do.
    """

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def msg(self, message: str) -> None:
        out = self._stream if self._stream is not None else sys.stderr
        out.write(message + "\n")
        out.flush()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def get_logger(**context: Any) -> Any:
    """A bound structlog logger with ``context`` attached."""
    return structlog.get_logger("gfd").bind(**context)
