"""Bounded reads and guarded YAML: hostile files are one clear error, never a hang or a crash."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gfd.base.inputs import (
    CONFIG_FILE_LIMIT,
    YAML_MAX_ALIASES,
    InputRejected,
    check_yaml,
    read_bounded,
)
from gfd.config import ConfigError, load_config_file
from gfd.kube_api import connect_kubernetes, object_shape_problem

ROOT = Path(__file__).resolve().parents[2]


def laughs(levels: int, width: int = 9) -> str:
    """The "billion laughs": each level is ``width`` aliases of the one before."""
    lines = ['a0: &a0 "lol"']
    for level in range(1, levels + 1):
        refs = ", ".join(f"*a{level - 1}" for _ in range(width))
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_a_regular_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100


def test_a_file_over_the_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "huge"
    with path.open("wb") as handle:
        handle.truncate(4 << 30)  # sparse: 4 GiB that would take minutes to read
    with pytest.raises(InputRejected, match="is larger than 1 MiB, the most gfd reads"):
        read_bounded(path, CONFIG_FILE_LIMIT)


def test_a_character_device_is_refused() -> None:
    with pytest.raises(InputRejected, match="is a character device, not a regular file"):
        read_bounded("/dev/zero", CONFIG_FILE_LIMIT)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def read() -> None:
        try:
            read_bounded(fifo, 100)
        except BaseException as exc:
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "reading a FIFO with no writer blocked"
    assert isinstance(result[0], InputRejected) and "a FIFO" in str(result[0])


def test_a_symlink_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    # A ConfigMap mount is a chain of symlinks to the real file.
    (tmp_path / "real").write_text("version: v1\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_bounded(tmp_path / "link", 100) == b"version: v1\n"


def test_a_billion_laughs_is_refused_before_it_expands() -> None:
    with pytest.raises(InputRejected, match="expands to more than 1,000,000 YAML nodes"):
        check_yaml(laughs(9, width=9))


def test_aliases_beyond_the_budget_are_refused() -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * (YAML_MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(InputRejected, match=f"more than {YAML_MAX_ALIASES} YAML aliases"):
        check_yaml(text)


@pytest.mark.parametrize("opener", ["[", "{a: ", "- "])
def test_50000_levels_of_nesting_are_refused_without_a_recursion_error(opener: str) -> None:
    text = opener * 50_000 if opener != "- " else "".join("  " * 0 + "- " for _ in range(50_000))
    with pytest.raises(InputRejected, match="nested more than 64 levels deep"):
        check_yaml(text + "1")


def test_ordinary_anchors_and_documents_pass() -> None:
    check_yaml("base: &b {replicas: 2}\nresources: [*b, *b]\n")
    check_yaml(laughs(2, width=3))
    check_yaml((ROOT / "gfd" / "sim" / "profiles" / "dgx-a100-mig-single.yaml").read_text())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (laughs(9).encode(), "expands to more than 1,000,000 YAML nodes"),
        (b"[" * 50_000, "nested more than 64 levels deep"),
        (b"version: v1\n#" + b"x" * CONFIG_FILE_LIMIT, "is larger than 1 MiB"),
    ],
)
def test_a_hostile_config_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path))
    assert str(caught.value) == f"config file {path}: {caught.value.args[0].split(': ', 1)[1]}"
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_config_file_may_not_be_dev_zero() -> None:
    with pytest.raises(ConfigError, match="config file /dev/zero: is a character device"):
        load_config_file("/dev/zero")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe garbage", "not UTF-8 text"),
        (b"- a\n- list\n", "expected a kubeconfig mapping"),
        (b"{unclosed: [", "not valid YAML"),
        (laughs(9).encode(), "expands to more than"),
        (b"apiVersion: v1\nclusters: 5\ncontexts: 7\ncurrent-context: x\n", "kubeconfig"),
        (b"apiVersion: v1\nkind: Config\n", "kubeconfig"),
    ],
)
def test_a_garbage_kubeconfig_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        connect_kubernetes(kubeconfig=str(path))
    text = str(caught.value)
    assert text.startswith(f"kubeconfig {path}: ") and message in text and "\n" not in text
    assert len(text) < 400


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        ([], "a list, not an object"),
        ("x", "a string, not an object"),
        ({"metadata": "x"}, "metadata is a string, not an object"),
        ({"metadata": {"labels": ["a"]}}, "metadata.labels is a list, not a map of strings"),
        ({"metadata": {"annotations": {"k": 5}}}, "metadata.annotations['k'] is a int"),
        ({"metadata": {"resourceVersion": 7}}, "metadata.resourceVersion is a int, not a string"),
        ({"metadata": {"ownerReferences": {"a": 1}}}, "ownerReferences is not a list of objects"),
    ],
)
def test_malformed_objects_are_named(node: object, problem: str) -> None:
    found = object_shape_problem(node)
    assert found is not None and problem in found


def test_well_formed_objects_pass() -> None:
    assert object_shape_problem({}) is None
    assert (
        object_shape_problem({"metadata": {"labels": {"a": "b"}, "resourceVersion": "1"}}) is None
    )


@pytest.mark.parametrize("command", [["labels"], ["facts"], ["topo"]])
def test_a_broken_pipe_on_stdout_exits_quietly(command: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`head -1`) is gone before gfd writes
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gfd", "--simulate", "t4-single", "--log-level", "error",
             *command],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == 1


class _EndlessBody:
    """A response body that never ends (a chunked answer with no Content-Length)."""

    def __init__(self) -> None:
        self.closed = False

    def read(self, amount: int) -> bytes:
        return b"x" * amount

    def close(self) -> None:
        self.closed = True


class _Answer:
    def __init__(self, body: _EndlessBody, headers: dict[str, str]) -> None:
        self.response = body
        self.headers = headers


def test_an_endless_api_answer_is_cut_at_the_limit_and_its_connection_closed() -> None:
    from gfd.base.errors import SinkError
    from gfd.kube_api.responses import MAX_RESPONSE_BYTES, _read_bounded_body

    body = _EndlessBody()
    with pytest.raises(SinkError, match=f"over gfd's limit of {MAX_RESPONSE_BYTES} bytes"):
        _read_bounded_body(_Answer(body, {}), "GET", "/api/v1/nodes/n")
    assert body.closed, "a connection with unread bytes must not go back to the pool"
    announced = _Answer(_EndlessBody(), {"content-length": str(MAX_RESPONSE_BYTES + 1)})
    with pytest.raises(SinkError, match="announced a"):
        _read_bounded_body(announced, "GET", "/api/v1/nodes/n")
