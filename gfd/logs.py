"""Logging set-up: structlog, JSON lines when stdout is not a terminal, console otherwise.

Logs go to stderr so that stdout stays clean for labels, facts and tables.

structlog is imported when the first event at an enabled level is emitted, not before:
importing it costs more than all of gfd's own modules together (it pulls in asyncio
and ssl), and a one-shot run that has nothing to say, or an agent at ``warning``,
should not pay for it. Loggers from :func:`get_logger` filter by level themselves and
hand what passes to a structlog logger configured as :func:`configure_logging` last
asked, so the output is structlog's, line for line.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

#: The standard library's numeric levels (``logging.DEBUG`` ...), without importing it;
#: ``critical`` is for programs that embed gfd and want it silent, not a CLI choice.
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
#: Numeric level of each logger method.
_METHOD_LEVELS = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "exception": 40,
    "critical": 50,
}


class _Configuration:
    """What :func:`configure_logging` asked for, and whether structlog has it yet."""

    def __init__(self) -> None:
        self.level = _LEVELS["info"]
        self.level_name = "info"
        self.stream: TextIO | None = None
        self.json: bool | None = None
        #: Bumped on each configure_logging; a logger re-binds when it has an older one.
        self.generation = 0
        #: The generation structlog was last configured for (-1: not yet).
        self.applied = -1

    def apply(self) -> Any:
        """Import and configure structlog for the current settings; return the module."""
        import structlog

        if self.applied != self.generation:
            as_json = (not sys.stdout.isatty()) if self.json is None else self.json
            renderer: Any = (
                structlog.processors.JSONRenderer(sort_keys=True)
                if as_json
                else structlog.dev.ConsoleRenderer(colors=False)
            )
            stream = self.stream
            structlog.configure(
                processors=[
                    structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info,
                    renderer,
                ],
                wrapper_class=structlog.make_filtering_bound_logger(self.level),
                logger_factory=lambda *_args: _LineLogger(stream),
                cache_logger_on_first_use=False,
            )
            self.applied = self.generation
        return structlog


_CONFIGURATION = _Configuration()


def configure_logging(
    level: str = "info", *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Set the level and format (again on reload: the level may change).

    Cheap: structlog is configured when the next event that passes ``level`` is emitted.
    """
    _CONFIGURATION.level = _LEVELS[level]
    _CONFIGURATION.level_name = level
    _CONFIGURATION.stream = stream
    _CONFIGURATION.json = json
    _CONFIGURATION.generation += 1


def logging_level() -> str:
    """The level name :func:`configure_logging` last set."""
    return _CONFIGURATION.level_name


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


class Logger:
    """A structlog-shaped logger (``log.info("event", key=value)``, ``bind``) that loads
    structlog on its first event at an enabled level."""

    __slots__ = ("_bound", "_context", "_generation")

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context
        self._bound: Any = None
        self._generation = -1

    def bind(self, **context: Any) -> Logger:
        return Logger({**self._context, **context})

    def is_enabled_for(self, method: str) -> bool:
        """Whether an event sent through ``method`` (``"debug"``, ...) would be written."""
        return _METHOD_LEVELS[method] >= _CONFIGURATION.level

    def _emit(self, method: str, event: str, fields: dict[str, Any]) -> None:
        if _METHOD_LEVELS[method] < _CONFIGURATION.level:
            return
        structlog = _CONFIGURATION.apply()
        if self._bound is None or self._generation != _CONFIGURATION.generation:
            self._bound = structlog.get_logger("gfd").bind(**self._context)
            self._generation = _CONFIGURATION.generation
        getattr(self._bound, method)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    warn = warning

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        fields.setdefault("exc_info", True)
        self._emit("error", event, fields)

    def critical(self, event: str, **fields: Any) -> None:
        self._emit("critical", event, fields)


def get_logger(**context: Any) -> Logger:
    """A logger with ``context`` attached to every event it writes."""
    return Logger(context)
