"""The guard that keeps the suite off the machine it runs on.

A test reads and writes only its own temporary folders (``tests/host.py`` gives gfd a host of
the test's own). This plugin holds the whole suite to that, so a test that writes ``/etc``
fails on the developer's machine, not on the first user's:

- **Its own temporary folder and home.** Before any test runs, the run gets a folder of its
  own in the system temp folder; ``TMPDIR`` (so ``tempfile``, pytest's ``tmp_path`` and every
  subprocess) and ``HOME`` (so kubectl's, Helm's and the Python client's caches) point inside
  it, each worker a subfolder of its own. It is removed when the run ends.
- **Nothing left behind, named by test.** Each worker notes which test made each entry of its
  temp folder; what is still there when the worker ends (a session fixture's folders are gone
  by then) fails the run, naming the test that made it.
- **Nothing changed under /etc, /var, /run or the real home, named by test.** Around each
  test, the modification times of those trees' directories are compared (an entry made,
  removed or renamed changes its directory's); a change is an error of that test (or of one
  running beside it in another worker: the error says so). When the run ends, a full
  comparison (every entry's type, size and time) of the same trees, and of the system temp
  folder's top level, fails the run for what the per-test look cannot see (a file rewritten
  in place).

Left out, as a daemon's own state rather than a test's write: the container engine's folders
(``/var/lib/docker``, ``/var/lib/containerd``, ``/run/docker``, ``/run/containerd`` and the
like: the image tests drive Docker), logs (``/var/log``) and the package manager's state.
``GFD_HOST_GUARD=0`` turns the guard off (to debug a test with the machine's ``HOME``, say);
CI never sets it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The trees a test must leave as it found them; the real home is added at start.
GUARDED_ROOTS = ("/etc", "/var", "/run")
#: Daemons' and tools' own state under those trees (see the module docstring).
NOT_GUARDED = (
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/buildkit",
    "/var/run",  # a link to /run, walked there
    "/run/docker",
    "/run/docker.sock",
    "/run/containerd",
    "/run/buildkit",
    "/run/systemd",
    "/run/user",
    "/var/log",
    "/var/cache",
    "/var/lib/apt",
    "/var/lib/dpkg",
    "/var/lib/systemd",
    "/var/tmp",  # a temp folder: its top level is compared with /tmp's
)
#: How deep the per-test look, and the comparison at the end, go into the real home: it
#: holds toolchains of hundreds of thousands of files that no test has any business in,
#: and a test's cache or config file lands in a folder of its top levels.
HOME_DEPTH = 2
HOME_DEPTH_AT_END = 3
#: pytest's own folder of the tests' tmp_path folders (``pytest-of-USER``), in the run's.
PYTEST_TEMP_ROOT = "pytest-of-"
#: The variable that turns the guard off.
SWITCH = "GFD_HOST_GUARD"

_REAL_HOME_ENV = "GFD_GUARD_REAL_HOME"
_RUN_DIR_ENV = "GFD_GUARD_RUN_DIR"

Entry = tuple[int, int, int]  # file type, size, mtime in ns


def _excluded(path: str, skip: tuple[str, ...]) -> bool:
    return any(path == e or path.startswith(e + "/") for e in (*NOT_GUARDED, *skip))


def _walk(
    root: str, *, max_depth: int | None, skip: tuple[str, ...], files: bool
) -> Iterator[tuple[str, os.stat_result]]:
    """Each directory under ``root`` (and with ``files``, each other entry too) with its
    lstat, to ``max_depth`` levels; links are not followed, other filesystems not entered."""
    try:
        top = os.lstat(root)
    except OSError:
        return
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError:
            continue
        for entry in entries:
            is_dir = entry.is_dir(follow_symlinks=False)
            if not (is_dir or files) or _excluded(entry.path, skip):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield entry.path, st
            if is_dir and st.st_dev == top.st_dev and (max_depth is None or depth + 1 < max_depth):
                stack.append((entry.path, depth + 1))


def _directory_times(roots: list[tuple[str, int | None]], skip: tuple[str, ...]) -> dict[str, int]:
    """Each directory's mtime: what an entry made, removed or renamed in it changes."""
    times: dict[str, int] = {}
    for root, depth in roots:
        with contextlib.suppress(OSError):
            times[root] = os.stat(root).st_mtime_ns
        for path, st in _walk(root, max_depth=depth, skip=skip, files=False):
            times[path] = st.st_mtime_ns
    return times


def _full(roots: list[tuple[str, int | None]], skip: tuple[str, ...]) -> dict[str, Entry]:
    """Each entry's type, size (not a directory's) and mtime."""
    found: dict[str, Entry] = {}
    for root, depth in roots:
        for path, st in _walk(root, max_depth=depth, skip=skip, files=True):
            size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size
            found[path] = (stat.S_IFMT(st.st_mode), size, st.st_mtime_ns)
    return found


def _differences(
    before: dict[str, Entry] | dict[str, int], after: dict[str, Entry] | dict[str, int]
) -> list[str]:
    lines = [f"made: {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"removed: {p}" for p in sorted(before.keys() - after.keys())]
    lines += [
        f"changed: {p}"
        for p in sorted(p for p in before.keys() & after.keys() if before[p] != after[p])
    ]
    return lines


def _shown(lines: list[str], most: int = 10) -> str:
    more = f"; and {len(lines) - most} more" if len(lines) > most else ""
    return "; ".join(lines[:most]) + more


class HostGuard:
    """One per pytest process: the controller (or a serial run) and each worker."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # A pytest-xdist worker has its input (a nested run inherits the variable, not this).
        workerinput = getattr(config, "workerinput", None)
        self.worker: str | None = workerinput["workerid"] if workerinput else None
        self.findings: list[str] = []
        if self.worker is None:
            self._start_run()
        self.run_dir = Path(os.environ[_RUN_DIR_ENV])
        self.real_home = os.environ[_REAL_HOME_ENV]
        # This process's own temp folder, inside the run's.
        self.temp = self.run_dir / f"tmp-{self.worker or 'main'}"
        self.temp.mkdir(exist_ok=True)
        self._point_temp_at(self.temp)
        self.skip = (str(self.run_dir),)
        self.roots: list[tuple[str, int | None]] = [(r, None) for r in GUARDED_ROOTS]
        self.roots.append((self.real_home, HOME_DEPTH))
        self.made_by: dict[str, str] = {}
        self._temp_before: set[str] = set()
        self._times_before: dict[str, int] = {}

    # ------------------------------------------------------------ the run

    def _start_run(self) -> None:
        """The controller: the run's folder, its home, and the before-picture of the host."""
        system_temp = tempfile.gettempdir()
        self.system_temp = system_temp
        run_dir = Path(tempfile.mkdtemp(prefix="gfd-tests-", dir=system_temp))
        os.environ[_RUN_DIR_ENV] = str(run_dir)
        os.environ.setdefault(_REAL_HOME_ENV, os.environ.get("HOME", str(Path.home())))
        home = run_dir / "home"
        home.mkdir()
        os.environ["HOME"] = str(home)
        for variable in (
            "XDG_CACHE_HOME",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_STATE_HOME",
            "KUBECONFIG",
        ):
            os.environ.pop(variable, None)
        self.temp_tops = {system_temp: set(os.listdir(system_temp))}
        if os.path.isdir("/var/tmp") and os.path.realpath("/var/tmp") != os.path.realpath(
            system_temp
        ):
            self.temp_tops["/var/tmp"] = set(os.listdir("/var/tmp"))
        self.full_before = _full(self._full_roots(os.environ[_REAL_HOME_ENV]), (str(run_dir),))

    @staticmethod
    def _full_roots(home: str) -> list[tuple[str, int | None]]:
        return [*((root, None) for root in GUARDED_ROOTS), (home, HOME_DEPTH_AT_END)]

    @staticmethod
    def _point_temp_at(folder: Path) -> None:
        os.environ["TMPDIR"] = str(folder)
        tempfile.tempdir = None  # tempfile caches the folder: look it up again

    # ------------------------------------------------------------ each test

    def before_test(self) -> None:
        self._temp_before = set(os.listdir(self.temp))
        self._times_before = _directory_times(self.roots, self.skip)

    def after_test(self, nodeid: str) -> str | None:
        """What the test changed on the host, as one line, or None."""
        for name in set(os.listdir(self.temp)) - self._temp_before:
            if not name.startswith(PYTEST_TEMP_ROOT):
                self.made_by.setdefault(name, nodeid)
        changed = _differences(self._times_before, _directory_times(self.roots, self.skip))
        if not changed:
            return None
        beside = " (or a test running beside it in another worker)" if self.worker else ""
        return (
            f"{nodeid}{beside} changed the machine outside its temporary folders: "
            f"{_shown(changed)}; a test must use tmp_path (and gfd a host of its own: tests/host.py)"
        )

    # ------------------------------------------------------------ the end

    def leftovers(self) -> list[str]:
        """What this process's tests left in its temp folder, named by test."""
        lines = []
        for name in sorted(os.listdir(self.temp)):
            if name.startswith(PYTEST_TEMP_ROOT):
                continue
            test = self.made_by.get(name, "a session fixture or plugin")
            lines.append(f"{test} left {self.temp / name} in the temp folder")
        return lines

    def finish(self, leftovers: list[str]) -> list[str]:
        """The controller: every finding of the run; the run's folder is removed."""
        findings = list(leftovers)
        after = _full(self._full_roots(self.real_home), self.skip)
        changed = _differences(self.full_before, after)
        if changed:
            findings.append(
                f"the run changed the machine outside its temporary folders: {_shown(changed, 20)}"
            )
        for folder, before in self.temp_tops.items():
            new = sorted(set(os.listdir(folder)) - before)
            if new:
                findings.append(
                    f"the run left {', '.join(os.path.join(folder, n) for n in new[:10])} in {folder} "
                    "(something ignored TMPDIR: pass a folder of the test's own)"
                )
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return findings


_guard: list[HostGuard] = []


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0" and sys.platform == "linux"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if enabled():
        _guard[:] = [HostGuard(config)]


@pytest.fixture(autouse=True)
def _machine_left_alone(request: pytest.FixtureRequest) -> Iterator[None]:
    """Set up first and torn down last of a test's fixtures: it sees all they did."""
    if not _guard:
        yield
        return
    guard = _guard[0]
    guard.before_test()
    yield
    problem = guard.after_test(request.node.nodeid)
    if problem:
        pytest.fail(problem, pytrace=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _guard:
        return
    guard = _guard[0]
    leftovers = guard.leftovers()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a worker: the controller reports
        workeroutput["gfd_host_guard"] = leftovers
        return
    guard.findings = guard.finish([*leftovers, *_from_workers])
    if guard.findings:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_from_workers: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {}) or {}
    _from_workers.extend(output.get("gfd_host_guard", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _guard and _guard[0].findings:
        terminalreporter.section("host guard: the suite touched the machine", sep="=", red=True)
        for line in _guard[0].findings:
            terminalreporter.line(f"host guard: {line}", red=True)
