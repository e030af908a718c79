"""The agent as the DaemonSet runs it, with metrics on: scrape /metrics, /healthz and
/readyz over HTTP while it cycles on a simulated DGX H100, and watch the values move."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

STARTUP_SECONDS = 30.0


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


def read_lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gfd",
            "--simulate",
            "dgx-h100",
            "--sleep-interval",
            "1s",
            "--no-timestamp",
            "--output-file",
            str(tmp_path / "gfd"),
            "--metrics-address",
            "127.0.0.1:0",
            "--log-level",
            "info",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(process.stderr, lines), daemon=True).start()
    seen: list[str] = []
    port = None
    deadline = time.monotonic() + STARTUP_SECONDS
    try:
        while port is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if process.poll() is not None:
                    break
                continue
            seen.append(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "port" in event:
                port = int(event["port"])
        if port is None:
            pytest.fail("the agent never logged its metrics port:\n" + "".join(seen[-20:]))
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for(predicate: object, what: str, timeout: float = 20.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_metrics_and_probes_follow_the_loop(agent: tuple[subprocess.Popen[str], str]) -> None:
    process, url = agent
    wait_for(lambda: get(url + "/readyz")[0] == 200, "/readyz to turn 200")
    assert get(url + "/healthz")[0] == 200

    first = get(url + "/metrics")[1]
    cycles = value(first, "gfd_cycles_total", result="success")
    stamp = value(first, "gfd_last_success_timestamp_seconds")
    assert cycles >= 1
    assert value(first, "gfd_nvml_up") == 1
    assert value(first, "gfd_labels_published") > 10
    assert value(first, "gfd_cycles_total", result="failure") == 0
    assert stamp > time.time() - 60

    wait_for(
        lambda: value(get(url + "/metrics")[1], "gfd_cycles_total", result="success") >= cycles + 2,
        "two more cycles at a 1 s interval",
        timeout=15.0,
    )
    later = get(url + "/metrics")[1]
    assert value(later, "gfd_last_success_timestamp_seconds") > stamp
    assert value(later, "gfd_cycle_duration_seconds_count") >= cycles + 2
    assert get(url + "/healthz")[0] == 200

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
