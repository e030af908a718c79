"""Whole gfd processes publishing to the API server emulator (the node sink)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
