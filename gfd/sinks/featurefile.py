"""The NFD feature-file sink and the stdout sink.

A feature file is what node-feature-discovery's ``local`` source reads from its
``features.d`` directory (rules in ``reference/NFD-AND-K8S.md``). This module owns
its format and how it is replaced:

- sorted ``key=value`` lines, so equal labels give equal bytes;
- optionally a leading ``# +expiry-time=<RFC3339>`` directive, so NFD drops the
  labels of an agent that died; the expiry is refreshed when half of it has passed,
  not every cycle;
- written to a dot-file in the same directory (NFD skips dot-files), fsynced,
  chmod-ed *before* the rename (the reference chmod-ed after, and NFD sometimes
  read a file it could not open), renamed over the target, directory fsynced;
- not rewritten when its bytes would not change, and kept on exit: labels must not
  vanish during a restart or an upgrade.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from gfd.errors import SinkError, SinkPermanentError
from gfd.sinks import Publication

#: NFD skips a feature file larger than this, whole.
NFD_MAX_FILE_BYTES = 65536
EXPIRY_DIRECTIVE = "# +expiry-time="
FILE_MODE = 0o644


def render_labels(labels: Mapping[str, str]) -> str:
    """``key=value`` lines sorted by key, each ending in a newline."""
    return "".join(f"{key}={labels[key]}\n" for key in sorted(labels))


def render_feature_file(labels: Mapping[str, str], expires_at: dt.datetime | None) -> bytes:
    """The feature file's bytes: an optional expiry directive, then the sorted labels."""
    head = ""
    if expires_at is not None:
        stamp = expires_at.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = f"{EXPIRY_DIRECTIVE}{stamp}\n"
    return (head + render_labels(labels)).encode("utf-8")


def _parse_expiry(content: bytes) -> dt.datetime | None:
    first = content.split(b"\n", 1)[0].decode("utf-8", "replace")
    if not first.startswith(EXPIRY_DIRECTIVE):
        return None
    try:
        return dt.datetime.fromisoformat(first[len(EXPIRY_DIRECTIVE) :].replace("Z", "+00:00"))
    except ValueError:
        return None


class FeatureFileSink:
    """Publishes labels as an NFD feature file at ``path``."""

    name = "feature-file"

    def __init__(
        self,
        path: Path,
        *,
        expiry: dt.timedelta | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        write: Callable[[int, memoryview], int] = os.write,
    ) -> None:
        if path.name.startswith(".") or not path.name:
            raise SinkPermanentError(
                f"feature file {path}: NFD ignores files whose names begin with '.'; choose another name"
            )
        self.path = path
        self.expiry = expiry
        self._clock = clock
        # A seam for the reliability suite's writer faults (a disk that fills mid-write).
        self._write = write

    def publish(self, publication: Publication) -> bool:
        labels = publication.labels
        current = self._read_current()
        now = self._clock()
        if current is not None and self._still_fresh(current, labels, now):
            return False
        expires_at = now + self.expiry if self.expiry is not None else None
        content = render_feature_file(labels, expires_at)
        if content == current:
            return False
        if len(content) > NFD_MAX_FILE_BYTES:
            raise SinkPermanentError(
                f"feature file {self.path}: {len(content)} bytes is over NFD's limit of "
                f"{NFD_MAX_FILE_BYTES}; NFD would skip the whole file"
            )
        self._replace(content)
        return True

    def close(self) -> None:
        """Nothing to release; the file stays so labels survive a restart."""

    def _still_fresh(self, current: bytes, labels: Mapping[str, str], now: dt.datetime) -> bool:
        """The file already says ``labels`` and its expiry (if any) is not yet half spent."""
        if self.expiry is None:
            return current == render_feature_file(labels, None)
        expires_at = _parse_expiry(current)
        if expires_at is None or current != render_feature_file(labels, expires_at):
            return False
        return expires_at - now > self.expiry / 2

    def _read_current(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            # Unreadable is not fatal: rewriting replaces it.
            if exc.errno in (errno.EACCES, errno.EISDIR):
                raise SinkPermanentError(
                    f"feature file {self.path}: cannot read: {exc.strerror}"
                ) from exc
            return None

    def _replace(self, content: bytes) -> None:
        directory = self.path.parent
        temp = directory / f".{self.path.name}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            error = (
                SinkPermanentError
                if exc.errno in (errno.EACCES, errno.EROFS, errno.ENOENT)
                else SinkError
            )
            raise error(
                f"feature file {self.path}: cannot create {temp.name} in {directory}: {exc.strerror}"
            ) from exc
        try:
            try:
                view = memoryview(content)
                while view:
                    written = self._write(fd, view)
                    view = view[written:]
                os.fsync(fd)
                # Before the rename: NFD must never see the final name with the wrong mode.
                os.fchmod(fd, FILE_MODE)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
        except OSError as exc:
            _unlink_quietly(temp)
            raise SinkError(
                f"feature file {self.path}: write failed: {exc.strerror or exc}; the previous file is intact"
            ) from exc
        _fsync_directory(directory)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        # Some filesystems refuse fsync on directories; the rename itself is already atomic.
        pass
    finally:
        os.close(fd)


class StdoutSink:
    """Prints ``key=value`` lines, once per change (``--output-file -``)."""

    name = "stdout"

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._last: str | None = None

    def publish(self, publication: Publication) -> bool:
        text = render_labels(publication.labels)
        if text == self._last:
            return False
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(text)
        stream.flush()
        self._last = text
        return True

    def close(self) -> None:
        """Nothing to release."""
