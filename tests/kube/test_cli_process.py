"""Whole gfd processes publishing to the API server emulator (the node sink)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gfd.app.deadline import ONESHOT_GRACE_SECONDS
from gfd.sinks.node import OWNERSHIP_ANNOTATION
from tests.emulator import ApiServerEmulator, Fault
from tests.kube.conftest import NODE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def gfd_command(kubeconfig: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gfd",
        "--simulate",
        "dgx-h100",
        "--patch-node",
        "--no-output-file",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
        *extra,
    ]


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    return env


def test_oneshot_labels_the_node_with_one_node_read_and_one_write(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    done = subprocess.run(
        gfd_command(kubeconfig, "--oneshot"),
        env=environment(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    labels = emulator.node_labels(NODE)
    assert labels["nvidia.com/gpu.count"] == "8"
    owned = emulator.node_annotations(NODE)[OWNERSHIP_ANNOTATION].split(",")
    assert sorted(owned) == sorted(labels)
    # The node has no nvidia.com/gpu allocatable: the device-plugin check also reads its
    # ResourceSlices once (is NVIDIA's DRA driver there?), and finds none.
    assert [(r.method, r.path.rsplit("/", 1)[-1], r.status) for r in emulator.requests] == [
        ("GET", NODE, 200),
        ("GET", "resourceslices", 200),
        ("PATCH", NODE, 200),
    ]


def test_sigterm_during_backoff_exits_promptly(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    emulator.inject(Fault(status=503, times=None))
    agent = subprocess.Popen(
        gfd_command(kubeconfig),
        env=environment(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while emulator.count() < 2 and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.02)
        assert emulator.count() >= 2, "gfd never reached the API server"
        agent.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        agent.wait(timeout=10)
        assert time.monotonic() - sent < 1.5
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        assert agent.stderr is not None
        agent.stderr.close()


def refused_kubeconfig(tmp_path: Path) -> tuple[Path, str]:
    """A kubeconfig whose server is a port nothing listens on: connections are refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = f"http://127.0.0.1:{sock.getsockname()[1]}"
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path, server


def test_oneshot_against_a_refused_api_server_warns_then_gives_up_at_its_bound(
    tmp_path: Path,
) -> None:
    """The issue's run, with a 3 s bound instead of the default 30 s: warnings that name
    the server while it retries, then one line, exit 1, by the bound."""
    kubeconfig, server = refused_kubeconfig(tmp_path)
    started = time.monotonic()
    done = subprocess.run(
        gfd_command(kubeconfig, "--oneshot", "--oneshot-timeout", "3s", "--health-checks", "none"),
        env=environment(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-2000:]
    *logs, last = done.stderr.splitlines()
    assert re.fullmatch(
        rf"gfd: error: node: Kubernetes API GET /api/v1/nodes/{NODE}: no response: cannot "
        rf"connect to {re.escape(server)}: Connection refused \(gave up after \d+ attempts in "
        r"\d\.\d s: the one-shot run's bound, --oneshot-timeout 3s\)",
        last,
    ), last
    records = [json.loads(line) for line in logs]  # every other line is a JSON log record
    retries = [r for r in records if r["event"] == "Kubernetes API request failed; retrying"]
    assert retries and all(r["level"] == "warning" for r in retries)
    assert retries[0]["server"] == server
    assert retries[0]["request"] == f"GET /api/v1/nodes/{NODE}"
    assert retries[0]["problem"] == f"cannot connect to {server}: Connection refused"
    assert retries[0]["retry_in_seconds"] > 0
    # Said once: no error-level record repeats the failure the last line says.
    assert not [r for r in records if r["level"] == "error"]
    assert took < 3 + ONESHOT_GRACE_SECONDS + 10, "a bound of 3 s, and a process's start"
