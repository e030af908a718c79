"""Bad input: garbage config files, facts files, flags and environment give a clear error.

Hypothesis writes the garbage: arbitrary bytes and text, YAML documents shaped like
a config file or a facts file but wrong in random places, profiles whose ``faults:``
section names random calls and codes, random flag and environment values. Each goes
through ``gfd.cli.main`` in this process (fast), and a few through a real ``gfd``
process. The contract: exit 0, 1 or 2; on failure one ``gfd: error:`` line; never a
traceback, whatever the input.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gfd.config import OPTIONS
from gfd.sim import profile_path
from gfd.sim.faults import EXPORTED_CALLS, NVML_ERROR_CODES
from tests.host import gfd_main
from tests.reliability.agent_process import assert_clean_error, run_gfd

#: Examples per property: enough to reach deep into the schemas, small enough for 2 cores.
#: ``RELIABILITY_FUZZ_EXAMPLES=2000 pytest tests/reliability/test_bad_input.py`` digs deeper.
EXAMPLES = int(os.environ.get("RELIABILITY_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@contextlib.contextmanager
def scratch_file(content: bytes) -> Iterator[Path]:
    """A file holding ``content``, removed afterwards (hypothesis reuses no fixtures)."""
    with tempfile.TemporaryDirectory(prefix="gfd-fuzz-") as directory:
        path = Path(directory) / "input.yaml"
        path.write_bytes(content)
        yield path


def run_in_process(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """``gfd.cli.main`` with stderr captured; any exception escaping it fails the case."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = gfd_main([*argv, "--log-level", "error"], env=env or {}, stdout=io.StringIO())
    return code, err.getvalue()


#: Errors about how settings combine (wherever each came from) name the flags, not a file.
_COMBINATION_ERRORS = (
    "gfd: error: --timestamp-annotation needs",
    "gfd: error: --patch-node and --use-node-feature-api need",
)


def assert_contract(code: int, err: str, *, mentions: str | None = None) -> None:
    assert code in (0, 1, 2), code
    assert "Traceback" not in err, err
    if code != 0:
        lines = [line for line in err.splitlines() if line.startswith("gfd: error: ")]
        assert len(lines) == 1, err
        assert len(lines[0]) < 2000, "an error is one readable line"
        if mentions is not None and code == 2 and not lines[0].startswith(_COMBINATION_ERRORS):
            assert mentions in lines[0], lines[0]


# --------------------------------------------------------------------------- #
# Strategies

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["v1", "60s", "infinite", "-1s", "1h30m", "mixed", "true", "", "all"])
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=12) | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)

_CONFIG_PATHS = (
    ("version",),
    ("flags", "migStrategy"),
    ("flags", "failOnInitError"),
    ("flags", "useNodeFeatureAPI"),
    ("flags", "plugin", "passDeviceSpecs"),
    ("flags", "gfd", "oneshot"),
    ("flags", "gfd", "noTimestamp"),
    ("flags", "gfd", "sleepInterval"),
    ("flags", "gfd", "outputFile"),
    ("flags", "gfd", "outputFileExpiry"),
    ("flags", "gfd", "machineTypeFile"),
    ("flags", "gfd", "logLevel"),
    ("flags", "gfd", "metricsAddress"),
    ("flags", "gfd", "unknownKey"),
    ("sharing",),
    ("sharing", "timeSlicing"),
    ("sharing", "timeSlicing", "resources"),
    ("sharing", "mps", "resources"),
    ("sharing", "timeSlicing", "renameByDefault"),
    ("resources",),
)


def _set_path(document: dict[Any, Any], path: tuple[str, ...], value: Any) -> None:
    node = document
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


@st.composite
def config_documents(draw: st.DrawFn) -> bytes:
    """Config files: mostly ``version: v1`` documents with random values at real keys."""
    kind = draw(st.sampled_from(["structured", "structured", "structured", "text", "bytes"]))
    if kind == "text":
        return draw(st.text(max_size=200)).encode("utf-8")
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    document: dict[Any, Any] = {}
    if draw(st.integers(0, 9)) > 0:
        document["version"] = "v1"
    for path in draw(st.lists(st.sampled_from(_CONFIG_PATHS), max_size=5)):
        _set_path(document, path, draw(_values))
    if draw(st.booleans()):
        resources = [
            {"name": draw(st.text(max_size=20)), "replicas": draw(_scalars)}
            for _ in range(draw(st.integers(0, 2)))
        ]
        _set_path(document, ("sharing", "timeSlicing", "resources"), resources)
    text = yaml.safe_dump(document, default_flow_style=draw(st.booleans()), allow_unicode=True)
    return text.encode("utf-8")


@functools.cache
def _profile_document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(
        profile_path(name).read_text(encoding="utf-8"), Loader=yaml.CSafeLoader
    )
    return loaded


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_paths(value, (*prefix, index)))
    return found


def _replace(document: Any, path: tuple[Any, ...], value: Any, *, delete: bool) -> None:
    node = document
    for part in path[:-1]:
        node = node[part]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_fault_entries = st.fixed_dictionaries(
    {"call": st.sampled_from(EXPORTED_CALLS) | st.text(max_size=15)},
    optional={
        "error": st.sampled_from(sorted(NVML_ERROR_CODES)) | _scalars,
        "gpu": st.integers(-2, 9) | _scalars,
        "times": st.integers(-1, 3) | _scalars,
        "surprise": _scalars,
    },
)
_faults = st.fixed_dictionaries(
    {},
    optional={
        "errors": st.lists(_fault_entries, max_size=3) | _values,
        "gpu_lost": st.lists(
            st.fixed_dictionaries(
                {
                    "gpu": st.integers(-1, 9) | _scalars,
                    "after_calls": st.integers(-1, 60) | _scalars,
                }
            ),
            max_size=2,
        ),
        "gpu_vanished": st.lists(
            st.fixed_dictionaries(
                {
                    "gpu": st.integers(-1, 9) | _scalars,
                    "after_calls": st.integers(-1, 60) | _scalars,
                }
            ),
            max_size=2,
        ),
        "nvlink_down": st.lists(
            st.fixed_dictionaries(
                {
                    "gpu": st.integers(-1, 9) | _scalars,
                    "after_calls": st.integers(-1, 60) | _scalars,
                },
                optional={"links": st.lists(st.integers(-1, 20) | _scalars, max_size=3)},
            ),
            max_size=2,
        ),
        "driver_not_loaded_inits": st.integers(-1, 3) | _scalars,
    },
)


@st.composite
def facts_documents(draw: st.DrawFn) -> bytes:
    """Facts files: a real profile with a few fields replaced, removed or added, and faults."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "faults", "text", "bytes"]))
    if kind == "text":
        return draw(st.text(max_size=300)).encode("utf-8")
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    document = copy.deepcopy(_profile_document(draw(st.sampled_from(["pcie-l4x4", "dgx-a100"]))))
    if kind == "faults":
        document["faults"] = draw(_faults)
    else:
        paths = _paths(document)
        for _ in range(draw(st.integers(1, 3))):
            paths = _paths(document)
            if not paths:
                break
            path = draw(st.sampled_from(paths))
            action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
            if action == "add":
                parent = path[:-1]
                target = document
                for part in parent:
                    target = target[part]
                if isinstance(target, dict):
                    target[draw(st.text(min_size=1, max_size=10))] = draw(_values)
                continue
            _replace(document, path, draw(_values), delete=action == "delete")
    return yaml.safe_dump(document, allow_unicode=True).encode("utf-8")


# --------------------------------------------------------------------------- #
# Properties


@FUZZ
@given(content=config_documents())
def test_any_config_file_gives_labels_or_a_one_line_error(content: bytes) -> None:
    with scratch_file(content) as path:
        code, err = run_in_process(
            ["--config-file", str(path), "--simulate", "t4-single", "labels"]
        )
        assert_contract(code, err, mentions=str(path))


@FUZZ
@given(content=facts_documents())
def test_any_facts_file_gives_labels_or_a_one_line_error(content: bytes) -> None:
    with scratch_file(content) as path:
        code, err = run_in_process(["--simulate", str(path), "labels"])
        assert_contract(code, err)
        if code != 0:
            assert str(path) in err or "NVML" in err, err


_SETTABLE = [option for option in OPTIONS if option.name not in {"oneshot", "simulate"}]


@FUZZ
@given(
    option=st.sampled_from(_SETTABLE),
    value=st.text(max_size=30).filter(lambda v: "\0" not in v),
    through_env=st.booleans(),
)
def test_any_flag_or_environment_value_gives_labels_or_a_one_line_error(
    option: Any, value: str, through_env: bool
) -> None:
    if through_env and option.env:
        code, err = run_in_process(["--simulate", "t4-single", "labels"], {option.env[0]: value})
    else:
        code, err = run_in_process([f"{option.flag}={value}", "--simulate", "t4-single", "labels"])
    assert_contract(code, err)


# --------------------------------------------------------------------------- #
# The same through a real process

_PROCESS_CASES: dict[str, tuple[bytes, str, int]] = {
    "config-not-utf8": (b"\xff\xfe\x00garbage", "config", 2),
    "config-not-yaml": (b"version: v1\nflags: [unclosed\n", "config", 2),
    "config-wrong-type": (b"version: v1\nflags:\n  gfd:\n    sleepInterval: [1, 2]\n", "config", 2),
    "config-unknown-key": (b"version: v1\nflags:\n  gfd:\n    slepInterval: 10s\n", "config", 2),
    "facts-a-list": (b"- 1\n- 2\n", "facts", 2),
    "facts-bad-bus-id": (
        b"gpus:\n- index: 0\n  name: X\n  uuid: GPU-1\n  bus_id: 'zz:00'\n",
        "facts",
        2,
    ),
    "facts-bad-fault": (
        b"gpus: []\nfaults:\n  errors:\n  - call: nvmlDeviceGetNmae\n    error: UNKNOWN\n",
        "facts",
        2,
    ),
}


@pytest.mark.parametrize("case", list(_PROCESS_CASES))
def test_bad_input_to_a_real_process_is_one_line_without_a_traceback(
    case: str, tmp_path: Path
) -> None:
    content, kind, code = _PROCESS_CASES[case]
    path = tmp_path / "input.yaml"
    path.write_bytes(content)
    if kind == "config":
        args = ["--config-file", str(path), "--simulate", "t4-single", "--oneshot", "-o", "-"]
    else:
        args = ["--simulate", str(path), "--oneshot", "-o", "-"]
    line = assert_clean_error(run_gfd(args), codes=(code,))
    assert str(path) in line
