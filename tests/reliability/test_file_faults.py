"""File faults: the previous feature file stays intact and is never seen half-written.

A read-only directory and a full disk are real filesystems (a small tmpfs, mounted
for the case) where the runner is allowed to mount; a writer that fails halfway is
injected into the sink on every runner. A reader in another process polls the file
while it is rewritten hundreds of times and must only ever see a whole old or a
whole new file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.sinks import Publication
from gfd.sinks.featurefile import FeatureFileSink, render_feature_file
from tests.host import gfd_main
from tests.reliability.agent_process import (
    AgentProcess,
    assert_clean_error,
    expected_labels,
    file_state,
    parse_label_lines,
    run_gfd,
    write_previous_file,
)

#: Two machines with different labels: the file on disk says one, the agent wants the other.
OLD_PROFILE = "dgx-h100"
NEW_PROFILE = "dgx-a100"


class Tmpfs:
    """A small tmpfs mounted on a fresh directory, for real EROFS and ENOSPC."""

    def __init__(self, directory: Path, size: str) -> None:
        self.directory = directory
        directory.mkdir()
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(directory)],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except OSError as exc:
            pytest.skip(f"cannot mount a tmpfs here (no mount command: {exc.strerror})")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")

    def remount(self, mode: str) -> None:
        subprocess.run(
            ["mount", "-o", f"remount,{mode}", str(self.directory)],
            check=True,
            capture_output=True,
            timeout=10,
        )

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.directory)], capture_output=True, timeout=10)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected-writer cases cover this runner")
    mounted = Tmpfs(tmp_path / "features.d", "16k")
    try:
        yield mounted
    finally:
        mounted.unmount()


def _publish_old(path: Path) -> tuple[bytes, int, int]:
    return write_previous_file(path, expected_labels(OLD_PROFILE))


def _leftovers(directory: Path, keep: str) -> list[str]:
    """Everything in ``directory`` but the target, looking into the staging directory too."""
    staging = directory / f".{keep}.staging"
    found = [p.name for p in directory.iterdir() if p.name != keep and p != staging]
    if staging.is_dir():
        found += [f"{staging.name}/{p.name}" for p in staging.iterdir()]
    return sorted(found)


# --------------------------------------------------------------------------- #
# Read-only directory


@pytest.mark.slow
def test_read_only_directory_keeps_the_file_and_the_agent_converges_when_writable(
    tmpfs: Tmpfs,
) -> None:
    output = tmpfs.directory / "gfd"
    before = _publish_old(output)
    tmpfs.remount("ro")
    with AgentProcess(
        "--simulate", NEW_PROFILE, "--sleep-interval", "1s", "--no-timestamp", "-o", str(output),
    ) as agent:  # fmt: skip
        failed = agent.wait_for_event("cycle failed", count=2, kind="sink-permanent")
        assert "Read-only file system" in failed[0]["reason"]
        assert str(output) in failed[0]["reason"]
        assert file_state(output) == before
        assert agent.metric("gfd_cycle_errors_total", kind="sink-permanent") >= 2
        tmpfs.remount("rw")
        agent.wait_for_event("labels published")
        assert agent.stop() == 0
    assert parse_label_lines(output.read_text()) == expected_labels(NEW_PROFILE)
    assert _leftovers(tmpfs.directory, "gfd") == []


def test_read_only_directory_oneshot_fails_with_one_line(tmpfs: Tmpfs) -> None:
    output = tmpfs.directory / "gfd"
    before = _publish_old(output)
    tmpfs.remount("ro")
    done = run_gfd(["--simulate", NEW_PROFILE, "--oneshot", "--no-timestamp", "-o", str(output)])
    line = assert_clean_error(done, codes=(1,))
    assert "Read-only file system" in line and str(output) in line
    assert file_state(output) == before


def test_unwritable_directory_without_root_keeps_the_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions; the read-only tmpfs cases cover root")
    output = tmp_path / "gfd"
    before = _publish_old(output)
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(SinkPermanentError, match="Permission denied"):
            FeatureFileSink(output).publish(Publication(expected_labels(NEW_PROFILE)))
    finally:
        tmp_path.chmod(0o755)
    assert file_state(output) == before


# --------------------------------------------------------------------------- #
# Disk full


def _fill(directory: Path) -> Path:
    """Write a filler file until the filesystem refuses another byte."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 1024)
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_disk_full_keeps_the_file_and_the_agent_converges_when_space_returns(
    tmpfs: Tmpfs,
) -> None:
    output = tmpfs.directory / "gfd"
    before = _publish_old(output)
    filler = _fill(tmpfs.directory)
    with AgentProcess(
        "--simulate", NEW_PROFILE, "--sleep-interval", "1s", "--no-timestamp", "-o", str(output),
    ) as agent:  # fmt: skip
        failed = agent.wait_for_event("cycle failed", count=2, kind="sink")
        assert "No space left on device" in failed[0]["reason"]
        assert "the previous file is intact" in failed[0]["reason"]
        assert file_state(output) == before
        assert _leftovers(tmpfs.directory, "gfd") == ["filler"]
        assert agent.metric("gfd_cycle_errors_total", kind="sink") >= 2
        filler.unlink()
        agent.wait_for_event("labels published")
        assert agent.stop() == 0
    assert parse_label_lines(output.read_text()) == expected_labels(NEW_PROFILE)
    assert _leftovers(tmpfs.directory, "gfd") == []


class FailingWriter:
    """``os.write`` that writes ``budget`` bytes, then fails like a full disk."""

    def __init__(self, budget: int, error: int = errno.ENOSPC) -> None:
        self.budget = budget
        self.error = error
        self.calls = 0

    def __call__(self, fd: int, data: memoryview) -> int:
        self.calls += 1
        if self.budget <= 0:
            raise OSError(self.error, os.strerror(self.error))
        written = os.write(fd, data[: self.budget])
        self.budget -= written
        return written


@pytest.mark.parametrize(
    ("budget", "error"),
    [(0, errno.ENOSPC), (700, errno.ENOSPC), (700, errno.EIO), (1, errno.EDQUOT)],
    ids=["nothing-written", "half-written", "io-error", "quota"],
)
def test_a_writer_that_fails_midway_leaves_the_previous_file_and_no_debris(
    tmp_path: Path, budget: int, error: int
) -> None:
    output = tmp_path / "gfd"
    before = _publish_old(output)
    writer = FailingWriter(budget, error)
    sink = FeatureFileSink(output, write=writer)
    new = Publication(expected_labels(NEW_PROFILE))
    with pytest.raises(SinkError) as raised:
        sink.publish(new)
    assert not isinstance(raised.value, SinkPermanentError), "a full disk may clear: retry"
    assert str(output) in str(raised.value) and os.strerror(error) in str(raised.value)
    assert "the previous file is intact" in str(raised.value)
    assert file_state(output) == before
    assert _leftovers(tmp_path, "gfd") == []
    # Space comes back: the next cycle replaces the file whole.
    assert FeatureFileSink(output).publish(new) is True
    assert output.read_bytes() == render_feature_file(new.labels, None)


# --------------------------------------------------------------------------- #
# A reader polling during rewrites

_POLLER = textwrap.dedent(
    """
    import json, sys, pathlib
    target, stop = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    allowed = {pathlib.Path(p).read_bytes() for p in sys.argv[3:]}
    reads = missing = 0
    bad = []
    while not stop.exists():
        try:
            content = target.read_bytes()
        except FileNotFoundError:
            missing += 1
            continue
        reads += 1
        if content not in allowed and len(bad) < 3:
            bad.append(content[:200].decode("utf-8", "replace"))
    print(json.dumps({"reads": reads, "missing": missing, "bad": bad}))
    """
)


def test_a_reader_polling_during_rewrites_sees_only_whole_files(tmp_path: Path) -> None:
    output = tmp_path / "features.d" / "gfd"
    output.parent.mkdir()
    publications = [
        Publication(expected_labels(OLD_PROFILE)),
        Publication(expected_labels("t4-single")),
    ]
    expected = []
    for i, publication in enumerate(publications):
        copy = tmp_path / f"expected-{i}"
        copy.write_bytes(render_feature_file(publication.labels, None))
        expected.append(str(copy))
    # Hundreds of rewrites back to back: no spacing for NFD's watch (test_featurefile).
    sink = FeatureFileSink(output, event_spacing=0)
    sink.publish(publications[0])
    stop = tmp_path / "stop"
    poller = subprocess.Popen(
        [sys.executable, "-c", _POLLER, str(output), str(stop), *expected],
        stdout=subprocess.PIPE,
        text=True,
    )
    rewrites = 0
    try:
        for i in range(300):
            rewrites += sink.publish(publications[(i + 1) % 2])
    finally:
        stop.touch()
        out, _ = poller.communicate(timeout=20)
    seen = json.loads(out)
    assert rewrites == 300
    assert seen["bad"] == [] and seen["missing"] == 0
    assert seen["reads"] > 300, "the reader should have raced many rewrites"


# --------------------------------------------------------------------------- #
# Paths that can never work


@pytest.mark.parametrize("where", ["under-a-file", "is-a-directory", "dot-file"])
def test_an_impossible_output_path_is_a_one_line_error(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("a file where a folder should be")
    path = {
        # A missing folder is made (tests/sinks/test_featurefile.py); one under a file cannot be.
        "under-a-file": tmp_path / "a-file" / "features.d" / "gfd",
        "is-a-directory": tmp_path,
        "dot-file": tmp_path / ".gfd",
    }[where]
    code = gfd_main(
        ["--simulate", "t4-single", "--oneshot", "--no-timestamp", "-o", str(path)],
        env={},
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("gfd: error: ")]
    assert len(lines) == 1 and str(path) in lines[0]
