"""A kubeconfig with ``insecure-skip-tls-verify: true``, in whole gfd processes.

Against a real kube-apiserver (v1.36.2) such a kubeconfig made urllib3 print its
``InsecureRequestWarning``, with the ``warnings.warn(`` line of its source, at every
request: 20 times around ``gfd doctor``'s report, once a request in the agent. Here the
emulator serves TLS with a self-signed certificate the kubeconfig does not trust, and the
processes' stderr is read as a person would see it: gfd's own line, once, and no
library's warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.kube_api import TRUST_THE_CLUSTER_CA
from tests.emulator import ApiServerEmulator, seed_gfd_cluster
from tests.kube_fixtures import NAMESPACE, NODE, POD, TOKEN

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

EVENT = "kubeconfig skips TLS verification of the API server"
#: What urllib3 writes through the warnings module (the category, and the source line
#: Python prints under a warning).
LIBRARY_WARNING = ("InsecureRequestWarning", "warnings.warn(", "Unverified HTTPS request")


@pytest.fixture
def tls_emulator(tls_pair: tuple[Path, Path]) -> Iterator[ApiServerEmulator]:
    with ApiServerEmulator(tls_cert=tls_pair[0], tls_key=tls_pair[1]) as api:
        seed_gfd_cluster(api, node_name=NODE, namespace=NAMESPACE, token=TOKEN, pod_name=POD)
        yield api


@pytest.fixture
def insecure_kubeconfig(tls_emulator: ApiServerEmulator, tmp_path: Path) -> Path:
    return tls_emulator.write_kubeconfig(
        tmp_path / "kubeconfig", TOKEN, insecure_skip_tls_verify=True
    )


def gfd(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("KUBECONFIG", "PYTHONWARNINGS"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "gfd", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def agent_args(kubeconfig: Path) -> list[str]:
    return [
        "--simulate",
        "dgx-h100",
        "--patch-node",
        "--no-output-file",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
    ]


def gfd_lines(stderr: str) -> list[dict[str, str]]:
    """The JSON log lines on stderr (not a terminal: gfd logs JSON)."""
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def assert_no_library_warning(stderr: str) -> None:
    for text in LIBRARY_WARNING:
        assert text not in stderr, stderr[-2000:]


def test_the_agent_says_it_once_and_urllib3_not_at_all(
    tls_emulator: ApiServerEmulator, insecure_kubeconfig: Path
) -> None:
    done = gfd(*agent_args(insecure_kubeconfig), "--oneshot")
    assert done.returncode == 0, done.stderr[-2000:]
    # Several requests went over the unverified connection: urllib3 warned at each.
    assert len(tls_emulator.requests) >= 3
    assert_no_library_warning(done.stderr)
    said = [line for line in gfd_lines(done.stderr) if line["event"] == EVENT]
    assert len(said) == 1, done.stderr
    assert said[0]["level"] == "warning"
    assert said[0]["kubeconfig"] == str(insecure_kubeconfig)
    assert said[0]["fix"] == TRUST_THE_CLUSTER_CA
    assert "certificate-authority-data" in said[0]["fix"]


def test_a_trusted_ca_is_not_warned_about(
    tls_emulator: ApiServerEmulator, tls_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    kubeconfig = tls_emulator.write_kubeconfig(tmp_path / "kubeconfig", TOKEN, ca_file=tls_pair[0])
    done = gfd(*agent_args(kubeconfig), "--oneshot")
    assert done.returncode == 0, done.stderr[-2000:]
    assert EVENT not in done.stderr
    assert_no_library_warning(done.stderr)


def test_the_doctor_says_it_once_in_its_report_and_urllib3_not_at_all(
    tls_emulator: ApiServerEmulator, insecure_kubeconfig: Path
) -> None:
    done = gfd("doctor", *agent_args(insecure_kubeconfig), "--format", "json")
    assert len(tls_emulator.requests) >= 3
    assert_no_library_warning(done.stderr)
    # The doctor keeps its log quiet (its report says what it found): the report says it.
    assert EVENT not in done.stderr
    report = json.loads(done.stdout)
    cluster = next(line for line in report if line["check"] == "cluster")
    assert cluster["state"] == "ok", cluster
    assert "insecure-skip-tls-verify" in cluster["message"]
    assert TRUST_THE_CLUSTER_CA in cluster["message"]
    assert done.stdout.count("certificate-authority-data") == 1


def test_the_doctor_with_its_log_says_it_once_on_stderr(
    tls_emulator: ApiServerEmulator, insecure_kubeconfig: Path
) -> None:
    done = gfd(
        "doctor", *agent_args(insecure_kubeconfig), "--format", "json", "--log-level", "warning"
    )
    assert_no_library_warning(done.stderr)
    said = [line for line in gfd_lines(done.stderr) if line["event"] == EVENT]
    assert len(said) == 1, done.stderr
