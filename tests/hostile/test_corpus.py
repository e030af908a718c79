"""Every row of the hostile-input corpus (``cases.py``) through ``gfd``'s entry point.

Each case runs ``gfd.cli.main`` in this process (the cases marked ``process`` also as a
real ``gfd`` process) in a scratch directory that holds a good feature file written
before; the contract for every row: the expected exit code, the expected line (the
first line of stderr that is not a JSON log record) and no other, never a traceback,
the good feature file neither rewritten nor replaced, the node's labels and
annotations as they were, and any file the case names left byte-for-byte alone.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.emulator import ApiServerEmulator, Fault
from tests.host import gfd_main
from tests.hostile.cases import (
    ALL,
    BASES,
    Case,
    CharDevice,
    Directory,
    Fifo,
    FileSpec,
    Sparse,
    Symlink,
)
from tests.kube_fixtures import NODE
from tests.reliability.agent_process import (
    ROOT,
    environment,
    file_state,
    gfd_command,
    write_previous_file,
)

#: Labels of a previous good run; any publication by a hostile case would change them.
GOOD_LABELS = {"nvidia.com/gpu.product": "GOOD-PREVIOUS-RUN", "nvidia.com/gpu.count": "3"}
#: A case that has not finished after this long is hung (a FIFO read, an endless file).
HANG_SECONDS = 30


class CaseHung(BaseException):
    """Raised by the alarm in a case that blocks; not an Exception, so gfd cannot catch it."""


@dataclass
class Scene:
    tmp: Path
    good: Path
    kubeconfig: str
    emulator: ApiServerEmulator | None

    def fill(self, text: str) -> str:
        return (
            text.replace("{tmp}", str(self.tmp))
            .replace("{good}", str(self.good))
            .replace("{kubeconfig}", self.kubeconfig)
        )

    def plant(self, name: str, spec: FileSpec) -> None:
        path = self.tmp / name
        if isinstance(spec, bytes):
            path.write_bytes(spec.replace(b"{tmp}", str(self.tmp).encode()))
        elif isinstance(spec, Fifo):
            os.mkfifo(path)
        elif isinstance(spec, Directory):
            path.mkdir()
        elif isinstance(spec, CharDevice):
            if os.geteuid() != 0:
                pytest.skip("mknod of a character device needs root")
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        elif isinstance(spec, Symlink):
            path.symlink_to(self.fill(spec.target))
        elif isinstance(spec, Sparse):
            with path.open("wb") as handle:
                handle.truncate(spec.size)


def _case_id(case: Case) -> str:
    return f"{case.family}/{case.id}"


@pytest.fixture
def scene(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scene]:
    case: Case = request.param
    features = tmp_path / "features.d"
    features.mkdir()
    good = features / "gfd"
    write_previous_file(good, GOOD_LABELS)
    emulator = None
    kubeconfig = str(tmp_path / "unused-kubeconfig")
    if case.family == "node":
        emulator = request.getfixturevalue("emulator")
        request.getfixturevalue("cluster")
        kubeconfig = str(request.getfixturevalue("kubeconfig"))
    result = Scene(tmp_path, good, kubeconfig, emulator)
    for name, spec in case.files.items():
        result.plant(name, spec)
    yield result


def _argv(case: Case, scene: Scene) -> list[str]:
    return [scene.fill(word) for word in (*BASES[case.base], *case.args)]


def _env(case: Case, scene: Scene) -> dict[str, str]:
    # Through the environment, so that a case may set the log level by flag or variable.
    variables = {"GFD_LOG_LEVEL": "error", **case.env}
    return {key: scene.fill(value) for key, value in variables.items()}


def _run_in_process(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    def hung(_signum: int, _frame: Any) -> None:
        raise CaseHung(f"gfd did not finish within {HANG_SECONDS}s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_SECONDS)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = gfd_main(argv, env=env, stdout=io.StringIO())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, err.getvalue()


def _run_process(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run(
        gfd_command(*argv),
        env=environment(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    return done.returncode, done.stderr


def _human_lines(stderr: str) -> list[str]:
    lines = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            lines.append(line)
    return lines


def _check(case: Case, scene: Scene, runner: Any) -> None:
    good_before = file_state(scene.good)
    untouched = {path: Path(path).read_bytes() for path in map(scene.fill, case.untouched)}
    if scene.emulator is not None:
        node_before = scene.emulator.node(NODE)["metadata"]
        assert case.node_reply is not None
        scene.emulator.inject(Fault(raw=case.node_reply, method="GET", times=None))
    code, stderr = runner(_argv(case, scene), _env(case, scene))
    assert "Traceback" not in stderr, stderr[-3000:]
    human = _human_lines(stderr)
    expected = scene.fill(case.line)
    assert human, f"no error line; stderr:\n{stderr[-3000:]}"
    assert human[0].startswith(expected), f"\nexpected: {expected}\n     got: {human[0]}"
    assert len(human) == 1, human
    assert len(human[0]) <= 1100, "an error line stays readable"
    assert code == case.code, (code, human[0])
    assert file_state(scene.good) == good_before, "the good feature file was touched"
    for path, content in untouched.items():
        assert Path(path).read_bytes() == content, f"{path} was changed"
    if scene.emulator is not None:
        scene.emulator.clear_faults()
        assert scene.emulator.node(NODE)["metadata"] == node_before
        assert scene.emulator.count(writes=True) == 0


@pytest.mark.parametrize("scene", ALL, ids=_case_id, indirect=True)
def test_hostile_input(scene: Scene, request: pytest.FixtureRequest) -> None:
    case: Case = request.node.callspec.params["scene"]
    _check(case, scene, _run_in_process)


_PROCESS_CASES = [case for case in ALL if case.process]


@pytest.mark.parametrize("scene", _PROCESS_CASES, ids=_case_id, indirect=True)
def test_hostile_input_to_a_real_process(scene: Scene, request: pytest.FixtureRequest) -> None:
    case: Case = request.node.callspec.params["scene"]
    _check(case, scene, _run_process)
