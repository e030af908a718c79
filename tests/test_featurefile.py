"""The feature-file and stdout sinks: NFD reads what gfd meant, atomically, and only on change."""

from __future__ import annotations

import datetime as dt
import io
import os
import stat
import threading
from pathlib import Path

import pytest

from gfd.errors import SinkError, SinkPermanentError
from gfd.sinks import Publication
from gfd.sinks.featurefile import FeatureFileSink, StdoutSink, render_feature_file
from tests.nfd_rules import parse_feature_file, read_features_dir

LABELS = {
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.family": "hopper",
}
T0 = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def test_file_is_sorted_and_nfd_reads_exactly_the_labels(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    assert FeatureFileSink(path).publish(Publication(LABELS)) is True
    text = path.read_text()
    assert text.splitlines() == sorted(f"{k}={v}" for k, v in LABELS.items())
    assert read_features_dir(tmp_path, T0) == LABELS


def test_equal_labels_give_equal_bytes_whatever_the_order() -> None:
    reordered = dict(reversed(list(LABELS.items())))
    assert render_feature_file(LABELS, None) == render_feature_file(reordered, None)


def test_unchanged_labels_are_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path)
    sink.publish(Publication(LABELS))
    inode = path.stat().st_ino
    assert sink.publish(Publication(dict(LABELS))) is False
    assert path.stat().st_ino == inode
    # A new process (new sink) sees the same bytes on disk and does not rewrite either.
    assert FeatureFileSink(path).publish(Publication(LABELS)) is False
    assert path.stat().st_ino == inode


def test_changed_labels_replace_the_file_atomically_with_mode_set(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path)
    sink.publish(Publication(LABELS))
    assert sink.publish(Publication({**LABELS, "nvidia.com/gpu.count": "7"})) is True
    assert read_features_dir(tmp_path, T0)["nvidia.com/gpu.count"] == "7"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["gfd"]


def test_expiry_directive_is_written_and_honoured_by_nfd(tmp_path: Path) -> None:
    clock = Clock(T0)
    path = tmp_path / "gfd"
    FeatureFileSink(path, expiry=dt.timedelta(minutes=10), clock=clock).publish(Publication(LABELS))
    assert path.read_text().splitlines()[0] == "# +expiry-time=2026-12-02T12:10:00Z"
    assert parse_feature_file(path.read_bytes(), T0 + dt.timedelta(minutes=9)) == LABELS
    assert parse_feature_file(path.read_bytes(), T0 + dt.timedelta(minutes=11)) == {}


def test_expiry_is_refreshed_only_after_half_its_life(tmp_path: Path) -> None:
    clock = Clock(T0)
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path, expiry=dt.timedelta(minutes=10), clock=clock)
    sink.publish(Publication(LABELS))
    clock.now = T0 + dt.timedelta(minutes=4)
    assert sink.publish(Publication(LABELS)) is False
    clock.now = T0 + dt.timedelta(minutes=6)
    assert sink.publish(Publication(LABELS)) is True
    assert "2026-12-02T12:16:00Z" in path.read_text()


def test_file_is_kept_on_close(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path)
    sink.publish(Publication(LABELS))
    sink.close()
    assert path.exists()


def test_oversized_file_is_refused_and_previous_kept(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path)
    sink.publish(Publication(LABELS))
    huge = {f"nvidia.com/k{i}": "v" * 60 for i in range(2000)}
    with pytest.raises(SinkPermanentError, match="over NFD's limit"):
        sink.publish(Publication(huge))
    assert read_features_dir(tmp_path, T0) == LABELS


def test_missing_directory_is_a_clear_permanent_error(tmp_path: Path) -> None:
    with pytest.raises(SinkPermanentError, match="cannot create .gfd.tmp"):
        FeatureFileSink(tmp_path / "absent" / "gfd").publish(Publication(LABELS))


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_keeps_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    FeatureFileSink(path).publish(Publication(LABELS))
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(SinkError):
            FeatureFileSink(path).publish(Publication({"a": "b"}))
    finally:
        tmp_path.chmod(0o755)
    assert read_features_dir(tmp_path, T0) == LABELS


def test_dot_file_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SinkPermanentError, match="begin with '.'"):
        FeatureFileSink(tmp_path / ".hidden")


def test_reader_polling_during_rewrites_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path)
    versions = [{f"nvidia.com/k{j}": str(i) for j in range(50)} for i in range(40)]
    sink.publish(Publication(versions[0]))
    valid = {render_feature_file(v, None) for v in versions}
    seen_bad: list[bytes] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for entry in tmp_path.iterdir():
                if entry.name.startswith("."):
                    continue
                data = entry.read_bytes()
                if data not in valid:
                    seen_bad.append(data)

    reader = threading.Thread(target=poll)
    reader.start()
    for version in versions[1:]:
        sink.publish(Publication(version))
    done.set()
    reader.join()
    assert seen_bad == []


def test_stdout_sink_prints_once_per_change() -> None:
    out = io.StringIO()
    sink = StdoutSink(out)
    assert sink.publish(Publication(LABELS)) is True
    assert sink.publish(Publication(LABELS)) is False
    assert out.getvalue() == "".join(f"{k}={LABELS[k]}\n" for k in sorted(LABELS))
