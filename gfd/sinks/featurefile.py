"""The NFD feature-file sink and the stdout sink.

A feature file is what node-feature-discovery's ``local`` source reads from its
``features.d`` directory (rules in ``reference/NFD-AND-K8S.md``). This module owns
its format and how it is replaced:

- sorted ``key=value`` lines, so equal labels give equal bytes;
- the features directory created when it is missing, parents included, each with mode
  0755 (less the umask), as ``mkdir -p`` would: NVIDIA's GFD did so before v0.16 (its
  staging directory's ``MkdirAll`` made the folder), the kubelet makes its ``hostPath``
  (``DirectoryOrCreate``) so, and a first run on a node without NFD yet should not fail
  for want of a folder. It is made by the first write, never when the sink is built: a
  run that never gets as far as labels (NVML cannot start, a flag is wrong) leaves the
  host's ``/etc`` as it found it;
- optionally a leading ``# +expiry-time=<RFC3339>`` directive, so NFD drops the
  labels of an agent that died; the expiry is refreshed when half of it has passed,
  not every cycle;
- written to a temporary file with a unique name, created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (so nothing planted at that name, a symlink
  least of all, is ever opened), fsynced, chmod-ed to 0644 *before* the rename (the
  reference chmod-ed after, and NFD sometimes read a file it could not open),
  renamed over the target, directory fsynced;
- the temporary file lives in the staging directory ``.<name>.staging`` inside the
  features directory: the same filesystem (so the rename is atomic), but not the
  top level NFD's worker watches and reads, so NFD never sees a half-written file
  nor an event for one. When that directory cannot be used (it is a symlink or not
  a directory, or cannot be created) the temporary file is a dot-file beside the
  target instead, which NFD skips;
- events spaced for NFD's worker: it re-reads the directory on the first inotify
  event after each tick of a one-second ticker and drops the others until the next
  tick (a dropped change waits for its periodic pass, 60 s by default). So the
  rename, the one event a write causes, comes at least :data:`EVENT_SPACING` after
  the directory last changed (its mtime: the previous rename, the staging
  directory's creation, a temporary file beside the target in the fallback, another
  writer's file, or another gfd process), waiting out the rest when it comes sooner.
  That is at most one write a second; a change under a second after the previous
  write is written as soon as the second has passed. The staging directory is made
  by the first write on a node and then stays, so only that write waits out its
  event (at most the spacing);
- only ever a regular file at the target: a target that exists and is anything
  else (a symlink, a device such as ``/dev/null``, a FIFO, a directory) is refused
  with one line, and never opened, followed or replaced;
- read back (to compare) through ``O_NOFOLLOW | O_NONBLOCK`` and at most
  :data:`NFD_MAX_FILE_BYTES` + 1 bytes;
- not rewritten when its bytes would not change, and kept on exit: labels must not
  vanish during a restart or an upgrade.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TextIO

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.base.logs import get_logger
from gfd.sinks import Publication

log = get_logger()

#: NFD skips a feature file larger than this, whole.
NFD_MAX_FILE_BYTES = 65536
EXPIRY_DIRECTIVE = "# +expiry-time="
FILE_MODE = 0o644
DIRECTORY_MODE = 0o755
#: How many unique temporary names a write tries before it gives up (each taken
#: name means something else is there: never opened, never removed).
TEMP_NAME_ATTEMPTS = 8
#: Least seconds between two changes of the features directory that gfd makes: NFD's
#: worker starts a re-read on the first event after each tick of its 1 s ticker and
#: drops the rest until the next tick; 0.1 s more covers the coarse clock of directory
#: timestamps and the worker's scheduling.
EVENT_SPACING = 1.1
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def unique_temp_names(target: str) -> Iterator[str]:
    """Dot-names no one can guess: ``.<target>.<16 hex digits>.tmp``."""
    while True:
        # os.urandom is what secrets.token_hex reads; the secrets module would add the
        # import of hmac and hashlib to every run's start.
        yield f".{target}.{os.urandom(8).hex()}.tmp"


def _kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _absent(path: Path) -> bool:
    """Nothing is at ``path``; what cannot be inspected is left to ``mkdir`` to report."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


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
        temp_names: Callable[[str], Iterator[str]] = unique_temp_names,
        event_spacing: float = EVENT_SPACING,
        wait: Callable[[float], object] = time.sleep,
        wall_clock: Callable[[], float] = time.time,
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
        # A seam for the tests that plant things at the temporary name.
        self._temp_names = temp_names
        self.staging_name = f".{path.name}.staging"
        self.event_spacing = event_spacing
        # How a write waits for NFD's next tick (the agent passes its stop event's wait,
        # so a SIGTERM ends the wait at once) and the clock directory mtimes are read on.
        self._wait = wait
        self._wall_clock = wall_clock

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
        """The target's bytes (None when absent); refuses a target that is not a regular file."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | _NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                self._refuse("a symbolic link")
            if exc.errno in (errno.EACCES, errno.EISDIR, errno.ENXIO):
                self._check_regular()
                raise SinkPermanentError(
                    f"feature file {self.path}: cannot read: {exc.strerror}"
                ) from exc
            # Unreadable is not fatal: rewriting replaces it.
            return None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                self._refuse(_kind_of(mode))
            chunks: list[bytes] = []
            budget = NFD_MAX_FILE_BYTES + 1
            while budget > 0:
                chunk = os.read(fd, budget)
                if not chunk:
                    break
                chunks.append(chunk)
                budget -= len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _refuse(self, kind: str) -> None:
        raise SinkPermanentError(
            f"feature file {self.path}: exists and is {kind}, not a regular file; gfd never "
            "writes through or replaces it: remove it or choose another --output-file"
        )

    def _check_regular(self, dir_fd: int | None = None) -> None:
        """Refuse a target that exists and is not a regular file (never following a link)."""
        try:
            if dir_fd is None:
                mode = os.lstat(self.path).st_mode
            else:
                mode = os.stat(self.path.name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return
        except OSError:
            return  # what cannot be inspected is left to the write to report
        if not stat.S_ISREG(mode):
            self._refuse(_kind_of(mode))

    def _replace(self, content: bytes) -> None:
        dir_fd = self._open_directory()
        try:
            self._check_regular(dir_fd)
            stage_fd = self._open_staging(dir_fd)
            try:
                self._write_and_rename(content, dir_fd, stage_fd)
            finally:
                if stage_fd != dir_fd:
                    os.close(stage_fd)
            with contextlib.suppress(OSError):
                # Some filesystems refuse fsync on directories; the rename is atomic anyway.
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _open_directory(self) -> int:
        """The features directory's descriptor; a missing directory is created first."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        try:
            return os.open(self.path.parent, flags)
        except FileNotFoundError:
            self._create_directory()
        except OSError as exc:
            raise self._unusable_directory(exc) from exc
        try:
            return os.open(self.path.parent, flags)
        except OSError as exc:
            raise self._unusable_directory(exc) from exc

    def _unusable_directory(self, exc: OSError) -> SinkPermanentError:
        return SinkPermanentError(
            f"feature file {self.path}: cannot create a temporary file in "
            f"{self.path.parent}: {exc.strerror}"
        )

    def _create_directory(self) -> None:
        """Create the missing features directory and its missing parents, top down, each
        with :data:`DIRECTORY_MODE` (see the module docstring)."""
        directory = self.path.parent
        missing = [folder for folder in (directory, *directory.parents) if _absent(folder)]
        for folder in reversed(missing):
            try:
                os.mkdir(folder, DIRECTORY_MODE)
            except FileExistsError:
                continue  # made meanwhile by another writer (NFD, the kubelet, another gfd)
            except OSError as exc:
                raise SinkPermanentError(
                    f"feature file {self.path}: its folder {directory} does not exist and "
                    f"{folder} cannot be created: {exc.strerror}; create it, or choose "
                    "another --output-file"
                ) from exc
        if missing:
            log.info("feature file directory created", directory=str(directory))

    def _space_event(self, dir_fd: int) -> None:
        """Wait until the features directory has been still for :attr:`event_spacing`.

        Its mtime is when an entry last appeared, went or was renamed there (by gfd, by
        an earlier gfd process, or anyone): NFD's worker saw that as an event, and a
        rename before its next tick would be dropped. A wait is never longer than the
        spacing itself, whatever the timestamps say (a clock set back).
        """
        if self.event_spacing <= 0:
            return
        changed = os.fstat(dir_fd).st_mtime_ns / 1e9
        delay = min(changed + self.event_spacing - self._wall_clock(), self.event_spacing)
        if delay > 0:
            self._wait(delay)

    def _open_staging(self, dir_fd: int) -> int:
        """The staging directory's descriptor, or ``dir_fd`` when it cannot be used."""
        with contextlib.suppress(FileExistsError, OSError):
            os.mkdir(self.staging_name, DIRECTORY_MODE, dir_fd=dir_fd)
        try:
            # O_NOFOLLOW: a symlink planted at the staging name is never entered.
            return os.open(
                self.staging_name,
                os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _NOFOLLOW,
                dir_fd=dir_fd,
            )
        except OSError:
            return dir_fd

    def _create_temp(self, stage_fd: int) -> tuple[int, str]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _NOFOLLOW
        names = self._temp_names(self.path.name)
        taken = []
        for _ in range(TEMP_NAME_ATTEMPTS):
            name = next(names)
            try:
                return os.open(name, flags, FILE_MODE, dir_fd=stage_fd), name
            except FileExistsError:
                # Something is already there (planted or stale): never opened, never removed.
                taken.append(name)
                continue
            except OSError as exc:
                error = (
                    SinkPermanentError
                    if exc.errno in (errno.EACCES, errno.EROFS, errno.ENOENT, errno.EPERM)
                    else SinkError
                )
                raise error(
                    f"feature file {self.path}: cannot create a temporary file in "
                    f"{self.path.parent}: {exc.strerror}"
                ) from exc
        raise SinkError(
            f"feature file {self.path}: {len(taken)} temporary names were all taken "
            f"(e.g. {taken[0]}); something is planting files in {self.path.parent}"
        )

    def _write_and_rename(self, content: bytes, dir_fd: int, stage_fd: int) -> None:
        fd, temp = self._create_temp(stage_fd)
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
            self._space_event(dir_fd)
            # rename(2) replaces a symlink or file at the target itself, never what it
            # points to; one that appeared since the check is replaced, not followed.
            os.replace(temp, self.path.name, src_dir_fd=stage_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=stage_fd)
            raise SinkError(
                f"feature file {self.path}: write failed: {exc.strerror or exc}; the previous file is intact"
            ) from exc
        except BaseException:
            # Interrupted (in the wait for NFD's tick, say): no temporary file stays behind.
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=stage_fd)
            raise


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
        try:
            stream.write(text)
            stream.flush()
        except BrokenPipeError as exc:
            raise SinkPermanentError("the reader of stdout went away (broken pipe)") from exc
        except OSError as exc:
            raise SinkError(f"stdout: write failed: {exc.strerror or exc}") from exc
        self._last = text
        return True

    def close(self) -> None:
        """Nothing to release."""
