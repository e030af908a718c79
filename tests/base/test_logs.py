"""gfd's JSON log lines are structlog's, byte for byte; its text lines read back.

:func:`gfd.base.logs.json_line` renders a JSON line without importing structlog (whose import
costs a one-shot run more than all of gfd). It must write what structlog's own pipeline
with gfd's processors writes; here structlog itself is the oracle, for generated events:
bound context and call fields of every JSON-able kind and some that are not (paths,
objects with ``__structlog__``, sets), every method, and exceptions given as an
instance, a triple or ``True`` inside an ``except``. A text line
(:func:`gfd.base.logs.text_line`) is read back by a parser of its documented form (time,
level, event, ``key=value``) to the values it was given, and ``--log-format`` (flag and
environment) chooses the format whatever stderr is.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd.base.logs import configure_logging, get_logger, json_line, text_line

TIMESTAMP = re.compile(r'"timestamp": "(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z)"')


class Custom:
    def __structlog__(self) -> str:
        return "custom-rendering"


class Opaque:
    def __repr__(self) -> str:
        return "<opaque 'thing'>"


def structlog_line(method: str, event: str, context: dict[str, Any], fields: dict[str, Any]) -> str:
    """What structlog writes for the same call, configured as gfd configures it."""
    out: list[str] = []

    class Capture:
        def msg(self, message: str) -> None:
            out.append(message)

        debug = info = warning = warn = error = critical = exception = msg

    logger = structlog.wrap_logger(
        Capture(),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
        context_class=dict,
    ).bind(**context)
    getattr(logger, method)(event, **fields)
    (line,) = out
    return line


def _same_but_time(ours: str, theirs: str) -> None:
    assert TIMESTAMP.search(ours) and TIMESTAMP.search(theirs), (ours, theirs)
    assert TIMESTAMP.sub('"timestamp": "T"', ours) == TIMESTAMP.sub('"timestamp": "T"', theirs)


# Field names a structlog call cannot carry: the two it reads itself, and "self", the name
# of its bound methods' own first parameter (bind(self=...) and info("x", self=...) are
# TypeErrors there, and in gfd, whose calls take keyword fields alike).
keys = st.text(min_size=1, max_size=12).filter(lambda k: k not in {"exc_info", "event", "self"})
plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
odd = st.sampled_from([Path("/sys/bus/pci"), Custom(), Opaque(), b"bytes", (1, "two")])
values = plain | odd


@settings(max_examples=300)
@given(
    method=st.sampled_from(["debug", "info", "warning", "warn", "error", "critical"]),
    event=st.text(max_size=30),
    context=st.dictionaries(keys, values, max_size=4),
    fields=st.dictionaries(keys, values, max_size=4),
)
def test_json_lines_equal_structlogs(
    method: str, event: str, context: dict[str, Any], fields: dict[str, Any]
) -> None:
    _same_but_time(
        json_line(method, event, context, fields), structlog_line(method, event, context, fields)
    )


def _raise(message: str) -> BaseException:
    try:
        try:
            raise KeyError(message)
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        return exc


def test_exceptions_render_as_structlog_renders_them() -> None:
    exc = _raise("cause")
    for exc_info in (exc, (type(exc), exc, exc.__traceback__), False, None):
        fields = {"exc_info": exc_info, "kind": "internal"}
        _same_but_time(
            json_line("error", "cycle failed", {}, dict(fields)),
            structlog_line("error", "cycle failed", {}, dict(fields)),
        )
    try:
        raise ValueError("current")
    except ValueError:
        _same_but_time(
            json_line("error", "failed", {"node": "n"}, {"exc_info": True}),
            structlog_line("error", "failed", {"node": "n"}, {"exc_info": True}),
        )
        _same_but_time(
            json_line("exception", "failed", {}, {"exc_info": True}),
            structlog_line("exception", "failed", {}, {}),
        )
    assert sys.exc_info() == (None, None, None)
    # exc_info=True outside an except: no exception field, as structlog has it.
    _same_but_time(
        json_line("error", "failed", {}, {"exc_info": True}),
        structlog_line("error", "failed", {}, {"exc_info": True}),
    )


def test_a_logger_writes_the_line_to_the_configured_stream() -> None:
    stream = io.StringIO()
    configure_logging("info", stream=stream, json=True)
    try:
        get_logger(node="n1").bind(cycle=3).warning("label withheld", key="k")
    finally:
        configure_logging("info")
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line) == {
        "cycle": 3,
        "event": "label withheld",
        "key": "k",
        "level": "warning",
        "node": "n1",
        "timestamp": json.loads(line)["timestamp"],
    }
    _same_but_time(
        line, structlog_line("warning", "label withheld", {"node": "n1", "cycle": 3}, {"key": "k"})
    )


def _gfd_debug_labels(
    *, stdout: int, stderr: int, extra: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> None:
    """``gfd --log-level debug --simulate t4-single labels``: debug lines on stderr."""
    import os

    root = Path(__file__).resolve().parents[2]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gfd",
            "--log-level",
            "debug",
            *extra,
            "--simulate",
            "t4-single",
            "labels",
        ],
        stdout=stdout,
        stderr=stderr,
        cwd=root,
        check=True,
        timeout=60,
        env={**environment, **(env or {})},
    )


def _read_terminal(master: int) -> str:
    import os

    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_log_format_follows_stderr_not_stdout(tmp_path: Path) -> None:
    """Logs go to stderr, so stderr's terminal-ness chooses their format: ``gfd labels >
    file`` at a terminal logs for a person; stderr sent to a file (a pod's log) gets JSON
    even when stdout is a terminal."""
    import os
    import pty

    master, terminal = pty.openpty()
    try:
        with (tmp_path / "labels").open("wb") as labels:
            _gfd_debug_labels(stdout=labels.fileno(), stderr=terminal)
        os.close(terminal)
        terminal = -1
        for_a_person = _read_terminal(master).splitlines()
    finally:
        os.close(master)
        if terminal >= 0:
            os.close(terminal)
    # structlog's console form: "<time> [<level>   ] <event>  key=value ...".
    console = re.compile(r"^\S+Z \[(debug|info|warning|error) *\] ")
    assert for_a_person and all(console.match(line) for line in for_a_person), for_a_person
    assert "nvidia.com/gpu.product=Tesla-T4" in (tmp_path / "labels").read_text()

    master, terminal = pty.openpty()
    try:
        with (tmp_path / "log").open("wb") as log:
            _gfd_debug_labels(stdout=terminal, stderr=log.fileno())
    finally:
        os.close(terminal)
        os.close(master)
    records = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    assert records and "debug" in {record["level"] for record in records}


# ------------------------------------------------------------------ text lines

#: A text line as docs and README describe it: time (UTC), level, event, key=value pairs
#: (a value either bare, without a space and not starting with a quote, or a JSON string).
TEXT_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z) "
    r"(?P<level>debug|info|warning|error|critical) "
    r"(?P<event>[^=]*?)"
    r"(?P<pairs>(?: [A-Za-z_][A-Za-z0-9_]*=(?:\"(?:[^\"\\]|\\.)*\"|[^\s\"]\S*))*)$"
)
PAIR = re.compile(r" ([A-Za-z_][A-Za-z0-9_]*)=(\"(?:[^\"\\]|\\.)*\"|[^\s\"]\S*)")


def read_text_line(line: str) -> tuple[str, str, dict[str, str]]:
    """(level, event, pairs) of a text line; a quoted value unquoted, a bare one as it is."""
    match = TEXT_LINE.match(line)
    assert match, line
    pairs = {
        key: json.loads(value) if value.startswith('"') else value
        for key, value in PAIR.findall(match["pairs"])
    }
    return match["level"], match["event"], pairs


def test_a_text_line_is_time_level_event_then_pairs() -> None:
    line = text_line(
        "warn",
        "label withheld: its facts could not be read",
        {"node": "gpu-node-1"},
        {
            "key": "nvidia.com/gpu.product",
            "reason": "NVML call failed",
            "empty": "",
            "selector": "a=b",
            "count": 3,
            "sinks": ["node"],
            "none": None,
        },
    )
    assert "\n" not in line
    assert line.split(" ", 2)[1] == "warning"
    assert line.endswith(
        " label withheld: its facts could not be read node=gpu-node-1 key=nvidia.com/gpu.product"
        ' reason="NVML call failed" empty="" selector="a=b" count=3 sinks=["node"] none=null'
    )
    assert read_text_line(line) == (
        "warning",
        "label withheld: its facts could not be read",
        {
            "node": "gpu-node-1",
            "key": "nvidia.com/gpu.product",
            "reason": "NVML call failed",
            "empty": "",
            "selector": "a=b",
            "count": "3",
            "sinks": '["node"]',
            "none": "null",
        },
    )


def test_a_text_lines_traceback_stays_on_its_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError as exc:
        line = text_line("exception", "internal error", {}, {"exc_info": exc})
    assert "\n" not in line
    level, event, pairs = read_text_line(line)
    assert (level, event) == ("error", "internal error")
    assert pairs["exception"].startswith("Traceback (most recent call last):\n")
    assert pairs["exception"].endswith("ValueError: bad\nvalue")


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
        st.text(max_size=20),
        max_size=5,
    )
)
def test_text_line_values_read_back(fields: dict[str, str]) -> None:
    fields.pop("exc_info", None)
    assert read_text_line(text_line("info", "labels published", {}, fields)) == (
        "info",
        "labels published",
        fields,
    )


def test_a_configured_text_format_writes_text_lines() -> None:
    stream = io.StringIO()
    configure_logging("info", log_format="text", stream=stream)
    try:
        get_logger(node="n1").warning("label withheld", key="k v")
    finally:
        configure_logging("info")
    (line,) = stream.getvalue().splitlines()
    assert read_text_line(line) == ("warning", "label withheld", {"node": "n1", "key": "k v"})


def test_log_format_text_and_json_hold_whatever_stderr_is(tmp_path: Path) -> None:
    """--log-format text to a file (where auto is JSON) writes text lines; GFD_LOG_FORMAT
    json to a terminal (where auto is for a person) writes JSON."""
    import os
    import pty

    with (tmp_path / "text").open("wb") as log:
        _gfd_debug_labels(
            stdout=subprocess.DEVNULL, stderr=log.fileno(), extra=("--log-format", "text")
        )
    lines = (tmp_path / "text").read_text().splitlines()
    assert lines and all(read_text_line(line) for line in lines)
    assert "debug" in {read_text_line(line)[0] for line in lines}

    master, terminal = pty.openpty()
    try:
        _gfd_debug_labels(
            stdout=subprocess.DEVNULL, stderr=terminal, env={"GFD_LOG_FORMAT": "json"}
        )
        os.close(terminal)
        terminal = -1
        records = [json.loads(line) for line in _read_terminal(master).splitlines()]
    finally:
        os.close(master)
        if terminal >= 0:
            os.close(terminal)
    assert records and "debug" in {record["level"] for record in records}
