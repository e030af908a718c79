"""Logging set-up: structlog's event model, in the format ``--log-format`` chooses.

Logs go to stderr so that stdout stays clean for labels, facts and tables. The format
(:data:`LOG_FORMATS`) is ``json`` (one JSON object a line), ``text`` (one line an event:
time, level, event, then ``key=value`` pairs, a value quoted when it holds a space, a
quote or ``=``), or ``auto``, the default: whether stderr is a terminal decides
(:func:`logs_are_json`), whatever stdout is: ``gfd labels > file`` typed at a terminal
logs for a person (structlog's console lines), a pod logs JSON.

Importing structlog costs more than all of gfd's own modules together (it pulls in
asyncio and ssl), which a one-shot run would pay to write one line. So loggers from
:func:`get_logger` filter by level themselves, and a JSON line (the format of every
log that is not a terminal: a pod's) is rendered here as structlog's pipeline renders
it (``add_log_level``, ``TimeStamper(fmt="iso", utc=True)``, ``format_exc_info``,
``JSONRenderer(sort_keys=True)``): ``tests/base/test_logs.py`` holds the two to the same
bytes for generated events. A text line is rendered here too, from the same event. A
terminal under ``auto`` gets structlog's ``ConsoleRenderer``, imported with its first
line.
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
#: ``--log-format``: ``auto`` (JSON unless stderr is a terminal), ``text`` or ``json``.
LOG_FORMATS = ("auto", "text", "json")
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
        #: One of :data:`LOG_FORMATS`, or ``console`` (structlog's console lines, which
        #: ``auto`` means on a terminal).
        self.format = "auto"
        #: Bumped on each configure_logging; a logger re-binds when it has an older one.
        self.generation = 0
        #: The generation structlog was last configured for (-1: not yet).
        self.applied = -1
        #: How lines are rendered (json, text, console), decided at the first line after
        #: a configuration.
        self._renderer: str | None = None

    def renderer(self) -> str:
        if self._renderer is None:
            if self.format == "auto":
                self._renderer = "json" if logs_are_json(self.stream) else "console"
            else:
                self._renderer = self.format
        return self._renderer

    def apply(self) -> Any:
        """Import and configure structlog for the current settings; return the module."""
        import structlog

        if self.applied != self.generation:
            renderer: Any = (
                structlog.processors.JSONRenderer(sort_keys=True)
                if self.renderer() == "json"
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
    level: str = "info",
    *,
    log_format: str = "auto",
    stream: TextIO | None = None,
    json: bool | None = None,
) -> None:
    """Set the level and format (again on reload: either may change).

    ``log_format`` is one of :data:`LOG_FORMATS`; ``json`` (for tests and programs that
    embed gfd) overrides it: True, JSON lines; False, structlog's console lines whatever
    the stream. Cheap: structlog is configured when the next event that passes ``level``
    is emitted, and only for console lines.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    _CONFIGURATION.level = _LEVELS[level]
    _CONFIGURATION.stream = stream
    _CONFIGURATION.format = log_format if json is None else ("json" if json else "console")
    _CONFIGURATION._renderer = None
    _CONFIGURATION.generation += 1


def rendered_line(method: str, event: str) -> str | None:
    """``event`` as the configured format renders it at ``method``'s level, without
    structlog; None for console lines (structlog's). For a line that must be written with
    one system call (:mod:`gfd.app.signals`)."""
    renderer = _CONFIGURATION.renderer()
    if renderer == "json":
        return json_line(method, event, {}, {})
    if renderer == "text":
        return text_line(method, event, {}, {})
    return None


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
        renderer = _CONFIGURATION.renderer()
        if renderer == "json":
            _LineLogger(_CONFIGURATION.stream).msg(json_line(method, event, self._context, fields))
            return
        if renderer == "text":
            _LineLogger(_CONFIGURATION.stream).msg(text_line(method, event, self._context, fields))
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


def text_line(method: str, event: str, context: dict[str, Any], fields: dict[str, Any]) -> str:
    """The text line for ``log.<method>(event, **fields)`` on a logger bound to ``context``:
    the time (UTC, as in a JSON line), the level, the event, then ``key=value`` for the
    context and the fields in the order given, a traceback last as ``exception``. A string
    value is quoted (JSON's escapes: a traceback stays on its one line) when it is empty or
    holds a space, a quote or ``=``; any other value is written as compact JSON, quoted
    whole when it holds a space."""
    pairs = dict(context)
    pairs.update(fields)
    exc_info = _exc_info(pairs.pop("exc_info", None))
    if exc_info is not None:
        pairs["exception"] = _format_exception(exc_info)
    now = datetime.datetime.now(tz=datetime.UTC)
    words = [
        now.isoformat().replace("+00:00", "Z"),
        _LEVEL_NAMES.get(method, method),
        event,
        *(f"{key}={_text_value(value)}" for key, value in pairs.items()),
    ]
    return " ".join(words)


def _text_value(value: Any) -> str:
    if isinstance(value, str):
        if value and value.isprintable() and not any(c in value for c in ' "='):
            return value
        return json_module.dumps(value, ensure_ascii=False)
    # Compact JSON (sinks=["node"]), quoted whole only when a space is inside.
    text = json_module.dumps(
        value, default=_json_fallback, ensure_ascii=False, separators=(",", ":")
    )
    return text if text.isprintable() and " " not in text else json_module.dumps(text)


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
