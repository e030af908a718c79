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
    out = stream if stream is not None else sys.stderr
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
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def get_logger(**context: Any) -> Any:
    """A bound structlog logger with ``context`` attached."""
    return structlog.get_logger("gfd").bind(**context)
