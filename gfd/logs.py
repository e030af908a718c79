"""Logging set-up: structlog's event model, JSON lines when the log's stream is not a terminal.

Logs go to stderr so that stdout stays clean for labels, facts and tables; so whether
stderr is a terminal decides their format (:func:`logs_are_json`), whatever stdout is:
``gfd labels > file`` typed at a terminal logs for a person, a pod logs JSON.

Importing structlog costs more than all of gfd's own modules together (it pulls in
asyncio and ssl), which a one-shot run would pay to write one line. So loggers from
:func:`get_logger` filter by level themselves, and a JSON line (the format of every
log that is not a terminal: a pod's) is rendered here as structlog's pipeline renders
it (``add_log_level``, ``TimeStamper(fmt="iso", utc=True)``, ``format_exc_info``,
``JSONRenderer(sort_keys=True)``): ``tests/test_logs.py`` holds the two to the same
bytes for generated events. A terminal gets structlog's ``ConsoleRenderer``, imported
with its first line.
"""

from __future__ import annotations

import datetime
import json as json_module
import sys
import types
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
        self.stream: TextIO | None = None
        self.json: bool | None = None
        #: Bumped on each configure_logging; a logger re-binds when it has an older one.
        self.generation = 0
        #: The generation structlog was last configured for (-1: not yet).
        self.applied = -1
        #: Whether lines are JSON, decided at the first line after a configuration.
        self._as_json: bool | None = None

    def as_json(self) -> bool:
        if self._as_json is None:
            self._as_json = logs_are_json(self.stream) if self.json is None else self.json
        return self._as_json

    def apply(self) -> Any:
        """Import and configure structlog for the current settings; return the module."""
        import structlog

        if self.applied != self.generation:
            as_json = self.as_json()
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


def logs_are_json(stream: TextIO | None = None) -> bool:
    """Whether log lines written to ``stream`` (``sys.stderr`` when None) are JSON: yes
    unless it is a terminal. A stream that cannot say (closed, or no file) is no terminal."""
    out = stream if stream is not None else sys.stderr
    try:
        return not out.isatty()
    except (AttributeError, OSError, ValueError):
        return True


def configure_logging(
    level: str = "info", *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Set the level and format (again on reload: the level may change).

    Cheap: structlog is configured when the next event that passes ``level`` is emitted.
    """
    _CONFIGURATION.level = _LEVELS[level]
    _CONFIGURATION.stream = stream
    _CONFIGURATION.json = json
    _CONFIGURATION._as_json = None
    _CONFIGURATION.generation += 1


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
        if _CONFIGURATION.as_json():
            _LineLogger(_CONFIGURATION.stream).msg(json_line(method, event, self._context, fields))
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


#: structlog's ``add_log_level``: the method's name, but ``warn`` and ``exception``.
_LEVEL_NAMES = {"warn": "warning", "exception": "error"}


def json_line(method: str, event: str, context: dict[str, Any], fields: dict[str, Any]) -> str:
    """The JSON line structlog writes for ``log.<method>(event, **fields)`` on a logger
    bound to ``context``, with gfd's processors (see the module docstring)."""
    event_dict = dict(context)
    event_dict.update(fields)
    event_dict["event"] = event
    event_dict["level"] = _LEVEL_NAMES.get(method, method)
    now = datetime.datetime.now(tz=datetime.UTC)
    event_dict["timestamp"] = now.isoformat().replace("+00:00", "Z")
    exc_info = _exc_info(event_dict.pop("exc_info", None))
    if exc_info is not None:
        event_dict["exception"] = _format_exception(exc_info)
    return json_module.dumps(event_dict, default=_json_fallback, sort_keys=True)


def _exc_info(value: Any) -> tuple[Any, Any, Any] | None:
    """An ``exc_info`` field as an exception triple, as structlog reads it."""
    if isinstance(value, BaseException):
        return (value.__class__, value, value.__traceback__)
    if isinstance(value, tuple) and len(value) == 3:
        kind, exc, tb = value
        if (
            isinstance(kind, type)
            and issubclass(kind, BaseException)
            and isinstance(exc, BaseException)
            and (tb is None or isinstance(tb, types.TracebackType))
        ):
            return (kind, exc, tb)
    if value:
        current = sys.exc_info()
        return None if current == (None, None, None) else current
    return None


def _format_exception(exc_info: tuple[Any, Any, Any]) -> str:
    import traceback

    text = "".join(traceback.format_exception(*exc_info))
    return text[:-1] if text.endswith("\n") else text


def _json_fallback(value: Any) -> Any:
    try:
        return value.__structlog__()
    except AttributeError:
        return repr(value)


def get_logger(**context: Any) -> Logger:
    """A logger with ``context`` attached to every event it writes."""
    return Logger(context)
