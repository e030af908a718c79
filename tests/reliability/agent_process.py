"""Whole gfd agents under test: start one, follow its JSON logs, scrape its metrics, stop it.

Every wait here is bounded: a case that hangs fails with the agent's last log lines
instead of stalling the suite. Profiles with a ``faults:`` section are written from
the bundled ones, so a case states only what goes wrong.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from gfd.sim import profile_path
from tests.host import gfd_main

ROOT = Path(__file__).resolve().parents[2]
#: Upper bound on any single wait for an agent; generous for a loaded 2-core runner.
WAIT_SECONDS = 20.0
#: How long SIGTERM may take to end an agent (the product promises about a second).
STOP_SECONDS = 5.0

Event = dict[str, Any]


@functools.cache
def _bundled_document(name: str) -> str:
    return profile_path(name).read_text(encoding="utf-8")


def write_profile(
    directory: Path, faults: Mapping[str, Any] | None = None, *, base: str = "dgx-h100"
) -> Path:
    """A profile file: bundled ``base`` plus a ``faults:`` section; returns its path."""
    document = copy.deepcopy(yaml.load(_bundled_document(base), Loader=yaml.CSafeLoader))
    if faults is not None:
        document["faults"] = dict(faults)
    path = directory / f"{base}-faulty.yaml"
    path.write_text(yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False), "utf-8")
    return path


def expected_labels(profile: str | Path) -> dict[str, str]:
    """The labels gfd derives from ``profile`` without faults (``gfd labels``, in process)."""
    out = io.StringIO()
    code = gfd_main(
        ["--simulate", str(profile), "--log-level", "error", "labels"], env={}, stdout=out
    )
    assert code == 0, f"gfd labels failed for {profile}"
    return parse_label_lines(out.getvalue())


def parse_label_lines(text: str) -> dict[str, str]:
    """``key=value`` lines (a feature file without directives) as a dict."""
    labels: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            labels[key] = value
    return labels


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The agent's environment: this checkout importable, no stray gfd settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GFD_", "KUBECONFIG", "NODE_NAME"))
    }
    env["PYTHONPATH"] = str(ROOT)
    # Where an agent that will not stop is held: SIGABRT then dumps every thread's stack
    # to its stderr (AgentProcess.stop), which the failure shows.
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(extra or {})
    return env


def gfd_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gfd", *args]


def run_gfd(args: Sequence[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """One gfd process to completion (one-shot runs, bad input)."""
    return subprocess.run(
        gfd_command(*args),
        env=environment(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_clean_error(done: subprocess.CompletedProcess[str], codes: Sequence[int]) -> str:
    """The process failed with one of ``codes`` and a ``gfd: error:`` line, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode in codes, (done.returncode, done.stderr[-3000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("gfd: error: ")]
    assert errors, done.stderr[-3000:]
    return errors[-1]


class AgentProcess:
    """A periodic gfd process whose stderr (JSON logs) is read line by line."""

    def __init__(self, *args: str, metrics: bool = True, log_level: str = "info") -> None:
        command = list(args)
        if metrics:
            command += ["--metrics-address", "127.0.0.1:0"]
        self.command = gfd_command(*command, "--log-level", log_level)
        self.events: list[Event] = []
        self.raw_lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            self.command,
            env=environment(),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self._metrics_url: str | None = None

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.raw_lines.append(line)
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None
                if isinstance(event, dict):
                    self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        # Stopped as the kubelet stops a pod, so that the agent removes what it made (a
        # simulated machine's files in the temp folder); killed only if it will not stop.
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_SECONDS)
        self.kill()

    # ------------------------------------------------------------------ waiting

    def tail(self, lines: int = 25) -> str:
        with self._changed:
            return "".join(self.raw_lines[-lines:])

    def wait_for(
        self, predicate: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS
    ) -> None:
        """Poll ``predicate`` (woken by every log line, else every 50 ms) until it holds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}; agent said:\n{self.tail()}")
            if self.process.poll() is not None and not predicate():
                self._reader.join(timeout=2)
                if predicate():
                    return
                raise AssertionError(
                    f"agent exited ({self.process.returncode}) before {what}:\n{self.tail()}"
                )
            with self._changed:
                self._changed.wait(min(remaining, 0.05))

    def matching(self, event: str, **fields: Any) -> list[Event]:
        with self._changed:
            return [
                e
                for e in self.events
                if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
            ]

    def wait_for_event(
        self, event: str, *, count: int = 1, timeout: float = WAIT_SECONDS, **fields: Any
    ) -> list[Event]:
        self.wait_for(
            lambda: len(self.matching(event, **fields)) >= count,
            f"{count} x {event!r} {fields or ''}",
            timeout,
        )
        return self.matching(event, **fields)

    # ------------------------------------------------------------------ metrics

    @property
    def metrics_url(self) -> str:
        if self._metrics_url is None:
            (up,) = self.wait_for_event("metrics and health endpoints up")[:1]
            self._metrics_url = f"http://127.0.0.1:{int(up['port'])}"
        return self._metrics_url

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """One sample of ``/metrics`` (e.g. ``gfd_cycle_errors_total``, kind=...)."""
        _, text = self.get("/metrics")
        wanted = frozenset(labels.items())
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and frozenset(sample.labels.items()) == wanted:
                    return float(sample.value)
        raise AssertionError(f"no sample {name}{labels or ''} in /metrics")

    # ------------------------------------------------------------------ stopping

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = STOP_SECONDS) -> int:
        """SIGTERM; the exit code, which must come within ``timeout`` seconds."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.process.send_signal(signal.SIGABRT)  # the stacks, through faulthandler
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
            self.kill()
            raise AssertionError(
                f"agent ignored SIGTERM for {timeout}s; its log and stacks:\n{self.tail(80)}"
            ) from exc
        self._reader.join(timeout=2)
        return code

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait(timeout=10)
        self._reader.join(timeout=2)
        if self.process.stderr is not None:
            self.process.stderr.close()


def file_state(path: Path) -> tuple[bytes, int, int]:
    """Bytes, inode and mtime of a file: equal states mean it was neither rewritten nor replaced."""
    stat = path.stat()
    return path.read_bytes(), stat.st_ino, stat.st_mtime_ns


def write_previous_file(path: Path, labels: Mapping[str, str]) -> tuple[bytes, int, int]:
    """The feature file a previous run left, written at once, and its :func:`file_state`.

    No NFD worker watches a test's directory, so this write need not wait out NFD's event
    window; and the directory's mtime is set a minute back, so the run under test does not
    wait for it either (gfd spaces its renames from the directory's last change).
    """
    from gfd.sinks import Publication
    from gfd.sinks.featurefile import FeatureFileSink

    FeatureFileSink(path, event_spacing=0).publish(Publication(dict(labels)))
    long_ago = time.time() - 60
    os.utime(path.parent, (long_ago, long_ago))
    return file_state(path)


@contextlib.contextmanager
def running_gfd(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A ``gfd`` process with piped output, killed at the end if it is still running;
    ``env``: its environment (this process's by default)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gfd", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        if process.stdout is not None and not process.stdout.closed:
            process.communicate(timeout=10)
