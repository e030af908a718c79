"""The feature-file and stdout sinks: NFD reads what gfd meant, atomically, and only on change."""

from __future__ import annotations

import datetime as dt
import io
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.sinks import Publication
from gfd.sinks.featurefile import (
    EVENT_SPACING,
    FeatureFileSink,
    StdoutSink,
    render_feature_file,
)
from tests.inotify import DirectoryWatch, Event
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
    sink = FeatureFileSink(path, event_spacing=0)
    sink.publish(Publication(LABELS))
    inode = path.stat().st_ino
    assert sink.publish(Publication(dict(LABELS))) is False
    assert path.stat().st_ino == inode
    # A new process (new sink) sees the same bytes on disk and does not rewrite either.
    assert FeatureFileSink(path, event_spacing=0).publish(Publication(LABELS)) is False
    assert path.stat().st_ino == inode


def test_changed_labels_replace_the_file_atomically_with_mode_set(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path, event_spacing=0)
    sink.publish(Publication(LABELS))
    assert sink.publish(Publication({**LABELS, "nvidia.com/gpu.count": "7"})) is True
    assert read_features_dir(tmp_path, T0)["nvidia.com/gpu.count"] == "7"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gfd.staging", "gfd"]
    assert list((tmp_path / ".gfd.staging").iterdir()) == [], "no temporary file is left"


def test_expiry_directive_is_written_and_honoured_by_nfd(tmp_path: Path) -> None:
    clock = Clock(T0)
    path = tmp_path / "gfd"
    FeatureFileSink(path, expiry=dt.timedelta(minutes=10), clock=clock, event_spacing=0).publish(
        Publication(LABELS)
    )
    assert path.read_text().splitlines()[0] == "# +expiry-time=2026-12-02T12:10:00Z"
    assert parse_feature_file(path.read_bytes(), T0 + dt.timedelta(minutes=9)) == LABELS
    assert parse_feature_file(path.read_bytes(), T0 + dt.timedelta(minutes=11)) == {}


def test_expiry_is_refreshed_only_after_half_its_life(tmp_path: Path) -> None:
    clock = Clock(T0)
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path, expiry=dt.timedelta(minutes=10), clock=clock, event_spacing=0)
    sink.publish(Publication(LABELS))
    clock.now = T0 + dt.timedelta(minutes=4)
    assert sink.publish(Publication(LABELS)) is False
    clock.now = T0 + dt.timedelta(minutes=6)
    assert sink.publish(Publication(LABELS)) is True
    assert "2026-12-02T12:16:00Z" in path.read_text()


def test_file_is_kept_on_close(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path, event_spacing=0)
    sink.publish(Publication(LABELS))
    sink.close()
    assert path.exists()


def test_oversized_file_is_refused_and_previous_kept(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path, event_spacing=0)
    sink.publish(Publication(LABELS))
    huge = {f"nvidia.com/k{i}": "v" * 60 for i in range(2000)}
    with pytest.raises(SinkPermanentError, match="over NFD's limit"):
        sink.publish(Publication(huge))
    assert read_features_dir(tmp_path, T0) == LABELS


def _umask() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError("no Umask line in /proc/self/status")


def test_a_missing_features_directory_is_made_with_its_parents_by_the_first_write(
    tmp_path: Path,
) -> None:
    # NVIDIA's GFD before v0.16 made it with Go's os.MkdirAll(dir, 0777) (under umask 022:
    # 0755, parents included), and the kubelet's DirectoryOrCreate hostPath makes it 0755.
    features = tmp_path / "etc" / "kubernetes" / "node-feature-discovery" / "features.d"
    sink = FeatureFileSink(features / "gfd", event_spacing=0)
    # Not when the sink is built: a run that never gets to labels leaves the host as it was.
    assert list(tmp_path.iterdir()) == []
    assert sink.publish(Publication(LABELS)) is True
    made = [tmp_path / "etc", features.parent.parent, features.parent, features]
    for folder in made:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755 & ~_umask(), folder
    assert (features / ".gfd.staging").is_dir()
    assert read_features_dir(features, T0) == LABELS


def test_a_features_directory_removed_while_running_is_made_again(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    sink = FeatureFileSink(features / "gfd", event_spacing=0)
    sink.publish(Publication(LABELS))
    for entry in sorted(features.rglob("*"), reverse=True):
        entry.rmdir() if entry.is_dir() else entry.unlink()
    features.rmdir()
    assert sink.publish(Publication(LABELS)) is True
    assert read_features_dir(features, T0) == LABELS


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ("file", "cannot create a temporary file in {features}: Not a directory"),
        (
            "dangling-symlink",
            "its folder {features} does not exist and {features} cannot be created: "
            "No such file or directory; create it, or choose another --output-file",
        ),
    ],
)
def test_a_features_directory_that_cannot_be_made_is_one_clear_permanent_error(
    tmp_path: Path, planted: str, expected: str
) -> None:
    etc = tmp_path / "etc"
    if planted == "file":
        etc.write_text("a file where a folder should be")
    else:
        etc.symlink_to(tmp_path / "nowhere")
    features = etc / "features.d"
    sink = FeatureFileSink(features / "gfd", event_spacing=0)  # the failure is left to the write
    with pytest.raises(SinkPermanentError) as failure:
        sink.publish(Publication(LABELS))
    message = str(failure.value)
    assert "\n" not in message
    assert expected.format(features=features) in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etc"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_keeps_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    FeatureFileSink(path, event_spacing=0).publish(Publication(LABELS))
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(SinkError):
            FeatureFileSink(path, event_spacing=0).publish(Publication({"a": "b"}))
    finally:
        tmp_path.chmod(0o755)
    assert read_features_dir(tmp_path, T0) == LABELS


def test_dot_file_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SinkPermanentError, match="begin with '.'"):
        FeatureFileSink(tmp_path / ".hidden")


def test_reader_polling_during_rewrites_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(path, event_spacing=0)
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


# --------------------------------------------------------------------------- #
# A features directory others can write: nothing planted there is followed or replaced


def _names(*names: str):  # type: ignore[no-untyped-def]
    def generate(_target: str):  # type: ignore[no-untyped-def]
        yield from names

    return generate


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the features directory that a planted symlink points at."""
    path = tmp_path / "etc-shadow"
    path.write_bytes(b"root:secret\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def features(tmp_path: Path) -> Path:
    directory = tmp_path / "features.d"
    directory.mkdir()
    return directory


@pytest.mark.parametrize("where", ["staging", "features-dir"])
def test_a_symlink_planted_at_the_temporary_name_is_never_followed(
    features: Path, victim: Path, where: str
) -> None:
    if where == "features-dir":
        # A staging name that is not a directory: the temporary file goes beside the target.
        (features / ".gfd.staging").write_text("not a directory")
        stage = features
    else:
        stage = features / ".gfd.staging"
        stage.mkdir()
    (stage / ".gfd.planted.tmp").symlink_to(victim)
    (stage / ".gfd.dangling.tmp").symlink_to(features.parent / "would-be-created")
    sink = FeatureFileSink(
        features / "gfd", temp_names=_names(".gfd.planted.tmp", ".gfd.dangling.tmp", ".gfd.ok.tmp")
    )
    assert sink.publish(Publication(LABELS)) is True
    assert victim.read_bytes() == b"root:secret\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (features.parent / "would-be-created").exists()
    assert (stage / ".gfd.planted.tmp").readlink() == victim, "the planted link is left alone"
    assert read_features_dir(features, T0) == LABELS


def test_the_fixed_temporary_name_of_old_versions_is_not_used(features: Path, victim: Path) -> None:
    (features / ".gfd.tmp").symlink_to(victim)
    assert FeatureFileSink(features / "gfd", event_spacing=0).publish(Publication(LABELS)) is True
    assert victim.read_bytes() == b"root:secret\n"
    assert (features / ".gfd.tmp").is_symlink()


def test_a_symlink_planted_at_the_staging_directory_is_never_entered(
    features: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (features / ".gfd.staging").symlink_to(elsewhere)
    assert FeatureFileSink(features / "gfd", event_spacing=0).publish(Publication(LABELS)) is True
    assert list(elsewhere.iterdir()) == []
    assert read_features_dir(features, T0) == LABELS
    assert sorted(p.name for p in features.iterdir()) == [".gfd.staging", "gfd"]


def test_every_temporary_name_taken_is_an_error_that_removes_nothing(features: Path) -> None:
    stage = features / ".gfd.staging"
    stage.mkdir()
    taken = [f".gfd.{i}.tmp" for i in range(8)]
    for name in taken:
        (stage / name).write_text("someone else's")
    sink = FeatureFileSink(features / "gfd", temp_names=_names(*taken), event_spacing=0)
    with pytest.raises(SinkError, match="temporary names were all taken"):
        sink.publish(Publication(LABELS))
    assert sorted(p.name for p in stage.iterdir()) == sorted(taken)
    assert not (features / "gfd").exists()


@pytest.mark.parametrize("kind", ["symlink-to-file", "dangling-symlink", "directory", "fifo"])
def test_a_target_that_is_not_a_regular_file_is_refused_with_one_line(
    features: Path, victim: Path, kind: str
) -> None:
    target = features / "gfd"
    if kind == "symlink-to-file":
        target.symlink_to(victim)
    elif kind == "dangling-symlink":
        target.symlink_to(features.parent / "nowhere")
    elif kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    with pytest.raises(SinkPermanentError) as refused:
        FeatureFileSink(target, event_spacing=0).publish(Publication(LABELS))
    message = str(refused.value)
    assert "\n" not in message and "not a regular file" in message and str(target) in message
    assert victim.read_bytes() == b"root:secret\n"
    assert not (features.parent / "nowhere").exists()
    assert target.is_symlink() or target.is_dir() or stat.S_ISFIFO(target.lstat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_character_device_target_is_never_replaced(features: Path) -> None:
    # The device numbers of /dev/null (1, 3), made here so the real one is never at risk.
    null = features / "gfd"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(SinkPermanentError, match="exists and is a character device"):
        FeatureFileSink(null, event_spacing=0).publish(Publication(LABELS))
    mode = null.lstat().st_mode
    assert stat.S_ISCHR(mode) and null.lstat().st_rdev == os.makedev(1, 3)


def test_a_huge_target_is_read_back_bounded(features: Path) -> None:
    target = features / "gfd"
    with target.open("wb") as handle:
        handle.truncate(1 << 30)  # a sparse 1 GiB file: reading it whole would take a GiB
    assert FeatureFileSink(target, event_spacing=0).publish(Publication(LABELS)) is True
    assert read_features_dir(features, T0) == LABELS


# ---------------------------------------------------------------- what NFD's watch sees
# NFD's worker re-reads features.d on the first inotify event after each tick of a 1 s
# ticker and drops the others until the next tick. A write it never misses is therefore
# one event, the final file's, at least a second after the directory's previous event.


def count(value: int) -> dict[str, str]:
    return {**LABELS, "nvidia.com/gpu.count": str(value)}


def kinds(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.kind, e.name) for e in events]


def test_a_write_is_one_event_the_final_file_s_a_second_after_the_last(features: Path) -> None:
    sink = FeatureFileSink(features / "gfd")
    sink.publish(Publication(count(1)))  # the first write on a node makes the staging folder
    time.sleep(EVENT_SPACING)  # ... and that write is a tick behind
    with DirectoryWatch(features) as watch:
        started = time.monotonic()
        assert sink.publish(Publication(LABELS)) is True
        first_took = time.monotonic() - started
        time.sleep(0.3)  # a change 0.3 s after the previous write ...
        assert sink.publish(Publication(count(4))) is True
        assert sink.publish(Publication(count(4))) is False  # unchanged: no event at all
        events = watch.events()
    assert kinds(events) == [("MOVED_TO", "gfd"), ("MOVED_TO", "gfd")]
    # Had it waited, it would have waited the whole spacing.
    assert first_took < EVENT_SPACING - 0.1, "a directory still for a second is written at once"
    # ... is written once the second has passed, and not a periodic pass later. The reader
    # thread stamps an event when it reads it, never before it happened: so the lower bound
    # is measured from this thread's clock before the first write (a late stamp of the
    # first event cannot shrink it), and the upper bound is loose for late stamps.
    assert events[1].at - started >= 1.0
    assert events[1].at - events[0].at < EVENT_SPACING + 3.0
    assert read_features_dir(features, T0) == count(4)
    assert list((features / ".gfd.staging").iterdir()) == []


def test_the_staging_directory_s_creation_is_a_tick_before_the_first_file(
    features: Path,
) -> None:
    with DirectoryWatch(features) as watch:
        started = time.monotonic()  # before the first event: see the test above
        FeatureFileSink(features / "gfd").publish(Publication(LABELS))
        events = watch.events()
    assert [(e.kind, e.name, e.is_dir) for e in events] == [
        ("CREATE", ".gfd.staging", True),
        ("MOVED_TO", "gfd", False),
    ]
    assert events[1].at - started >= 1.0


def test_a_later_process_and_other_writers_are_waited_for_too(features: Path) -> None:
    FeatureFileSink(features / "gfd", event_spacing=0).publish(Publication(LABELS))
    with DirectoryWatch(features) as watch:
        started = time.monotonic()  # before the first event
        (features / "other-vendor").write_text("example.com/a=1\n")
        # A new sink (a restarted agent, the next one-shot run) knows nothing of the
        # last event but the directory's timestamp.
        FeatureFileSink(features / "gfd").publish(Publication(count(2)))
        events = watch.events()
    assert kinds(events)[0] == ("CREATE", "other-vendor")
    assert kinds(events)[-1] == ("MOVED_TO", "gfd")
    assert events[-1].at - started >= 1.0
    assert read_features_dir(features, T0) == {**count(2), "example.com/a": "1"}


def test_without_the_staging_directory_the_rename_still_comes_a_tick_later(
    features: Path,
) -> None:
    (features / ".gfd.staging").write_text("not a directory")
    time.sleep(EVENT_SPACING)
    with DirectoryWatch(features) as watch:
        started = time.monotonic()  # before the first event
        FeatureFileSink(features / "gfd").publish(Publication(LABELS))
        events = watch.events()
    # The temporary dot-file's events start NFD's re-read (which skips it); the final
    # file's comes after the next tick, so that re-read is not the last one.
    assert events[0].kind == "CREATE" and events[0].name.startswith(".gfd.")
    assert kinds(events)[-1] == ("MOVED_TO", "gfd")
    assert events[-1].at - started >= 1.0
    # (a bound loose enough for a busy machine's late stamps, under the spacing)
    assert all(e.at - events[0].at < EVENT_SPACING - 0.1 for e in events[:-2])
    assert read_features_dir(features, T0) == LABELS


def test_a_stop_request_ends_the_wait_and_the_file_is_still_written(features: Path) -> None:
    stop = threading.Event()
    sink = FeatureFileSink(features / "gfd", wait=stop.wait)
    stop.set()  # SIGTERM: the agent's stop event is set
    started = time.monotonic()
    sink.publish(Publication(LABELS))
    sink.publish(Publication(count(1)))
    # Two waits of the spacing, had they not ended at once (loose for a busy machine).
    assert time.monotonic() - started < EVENT_SPACING
    assert read_features_dir(features, T0) == count(1)
    assert list((features / ".gfd.staging").iterdir()) == []


def test_an_interrupted_wait_leaves_no_temporary_file(features: Path) -> None:
    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    sink = FeatureFileSink(features / "gfd", wait=interrupted)
    with pytest.raises(KeyboardInterrupt):
        sink.publish(Publication(LABELS))
    assert sorted(p.name for p in features.iterdir()) == [".gfd.staging"]
    assert list((features / ".gfd.staging").iterdir()) == []
