"""gfd as a drop-in for NVIDIA's gpu-feature-discovery under the GPU Operator, driven by
NVIDIA's config-manager (unmodified) against a real kube-apiserver.

The operator's pod is laid out as local processes in one PID namespace of their own
(``shareProcessNamespace: true``; see :mod:`tests.realkube.operator_pod`): config-manager
as the init container (``--oneshot``) writes the default sharing config before gfd starts;
gfd starts as the operator starts it (``command: ["gpu-feature-discovery"]``, the
operator's environment, ``GFD_SLEEP_INTERVAL=60s``); config-manager as the sidecar watches
the node label ``nvidia.com/device-plugin.config`` and, when it changes, writes the chosen
config and sends SIGHUP to the process whose argv[0] is ``gpu-feature-discovery``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.oracles import oracle_path, oracles_required
from tests.realkube.cluster import GfdCluster
from tests.reliability.agent_process import parse_label_lines

pytestmark = [pytest.mark.oracle("kube"), pytest.mark.oracle("config-manager"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CONFIG_LABEL = "nvidia.com/device-plugin.config"
NO_SHARING = "version: v1\nflags:\n  migStrategy: none\n"
TIME_SLICING_4 = (
    "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n"
    "      - name: nvidia.com/gpu\n        replicas: 4\n"
)
WAIT = 20.0


def gfd_command() -> str:
    """The ``gpu-feature-discovery`` command of this checkout's installation."""
    found = shutil.which("gpu-feature-discovery", path=str(Path(sys.executable).parent))
    assert found, f"gpu-feature-discovery is not installed beside {sys.executable}"
    return found


def private_pid_namespace() -> list[str]:
    """The prefix that runs a command as PID 1 of a new PID namespace, with its own /proc."""
    # --kill-child: when unshare is stopped, the pod's first process gets SIGTERM, and
    # with it the whole namespace ends; nothing outlives the test.
    prefix = ["unshare", "--pid", "--fork", "--kill-child=SIGTERM", "--mount-proc"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        message = f"cannot make a PID namespace (unshare, needs root): {probe.stderr.strip()}"
        if oracles_required():
            pytest.fail(message)
        pytest.skip(message)
    return prefix


def reloads(logs: Path) -> list[str]:
    """Why gfd reloaded its configuration, in order, from its JSON log."""
    reasons = []
    for line in (logs / "gpu-feature-discovery.log").read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "configuration reloaded":
            reasons.append(str(event.get("reason")))
    return reasons


def wait_for(condition: Callable[[], bool], what: str, logs: Path) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > WAIT:
            tails = "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in logs.glob("*.log")
            )
            raise AssertionError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.1)
    return time.monotonic() - start


@pytest.mark.parametrize("started_as", ["gpu-feature-discovery", "python -m gfd"])
def test_config_manager_drives_gfd_by_node_label(
    kube: GfdCluster, tmp_path: Path, started_as: str
) -> None:
    """As the operator starts it, gfd gets config-manager's SIGHUP. Started any other way
    (argv[0] the interpreter: the control case), config-manager finds no process to
    signal, and only gfd's own watch of its config file brings the new labels."""
    gfd_argv = (
        [gfd_command()] if started_as == "gpu-feature-discovery" else [sys.executable, "-m", "gfd"]
    )
    config_manager = str(oracle_path("config-manager"))
    prefix = private_pid_namespace()
    node = kube.node()
    available = tmp_path / "available-configs"
    available.mkdir()
    (available / "default").write_text(NO_SHARING, encoding="utf-8")
    (available / "ts4").write_text(TIME_SLICING_4, encoding="utf-8")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    config_file = config_dir / "config.yaml"
    features = tmp_path / "features.d" / "gfd"
    features.parent.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    manager_env = {
        **base,
        "NODE_NAME": node,
        "NODE_LABEL": CONFIG_LABEL,
        "CONFIG_FILE_SRCDIR": str(available),
        "CONFIG_FILE_DST": str(config_file),
        "DEFAULT_CONFIG": "default",
        "FALLBACK_STRATEGIES": "empty",
        "SEND_SIGNAL": "true",
        "SIGNAL": "1",
        "PROCESS_TO_SIGNAL": "gpu-feature-discovery",
        "KUBECONFIG": str(kube.plane.admin_kubeconfig),
    }
    gfd_env = {
        **base,
        "PYTHONPATH": str(ROOT),
        # The operator's environment for the gpu-feature-discovery container:
        "GFD_SLEEP_INTERVAL": "60s",
        "GFD_FAIL_ON_INIT_ERROR": "true",
        "NAMESPACE": "gpu-operator",
        "NODE_NAME": node,
        "POD_NAME": "gpu-feature-discovery-abcde",
        "MIG_STRATEGY": "none",
        "USE_NODE_FEATURE_API": "false",
        "CONFIG_FILE": str(config_file),
        # Where this test reads the labels, and the machine it simulates:
        "GFD_OUTPUT_FILE": str(features),
        "GFD_SIMULATE": "dgx-h100",
        "GFD_NO_TIMESTAMP": "true",
    }
    spec = {
        "logs": str(logs),
        "initContainers": [
            {
                "name": "config-manager-init",
                "argv": [config_manager],
                # Nothing to signal yet: the operator's init container does not.
                "env": {**manager_env, "ONESHOT": "true", "SEND_SIGNAL": "false"},
            }
        ],
        "containers": [
            {"name": "gpu-feature-discovery", "argv": gfd_argv, "env": gfd_env},
            {
                "name": "config-manager",
                "argv": [config_manager],
                "env": {**manager_env, "ONESHOT": "false"},
                "restart": True,
            },
        ],
    }
    spec_path = tmp_path / "pod.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    pod = subprocess.Popen(
        [*prefix, sys.executable, "-m", "tests.realkube.operator_pod", str(spec_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    def labels() -> dict[str, str]:
        try:
            return parse_label_lines(features.read_text(encoding="utf-8"))
        except OSError:
            return {}

    def sharing(replicas: str, strategy: str) -> Callable[[], bool]:
        return lambda: (
            labels().get("nvidia.com/gpu.replicas") == replicas
            and labels().get("nvidia.com/gpu.sharing-strategy") == strategy
        )

    try:
        # The init container's oneshot write is honoured at start.
        wait_for(sharing("1", "none"), "gfd's first labels from the default config", logs)
        assert config_file.read_text(encoding="utf-8") == NO_SHARING

        kube.admin.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": {CONFIG_LABEL: "ts4"}}},
            content_type="application/merge-patch+json",
        )
        took = wait_for(sharing("4", "time-slicing"), "the time-slicing labels after SIGHUP", logs)
        # Far less than one cycle (60 s): gfd was woken, it did not wait for its interval.
        assert took < 10, f"labels changed {took:.1f} s after the label, not within one cycle"
        manager_log = (logs / "config-manager.log").read_text(errors="replace")
        if started_as != "gpu-feature-discovery":
            assert reloads(logs) == ["config file changed"], reloads(logs)
            wait_for(
                lambda: (
                    "no process found" in (logs / "config-manager.log").read_text(errors="replace")
                ),
                "config-manager to report no process",
                logs,
            )
            return
        assert reloads(logs) == ["signal"], reloads(logs)
        assert "no process found" not in manager_log, manager_log[-2000:]

        # config-manager never retries a signal; gfd notices a changed file on its own.
        config_file.write_text(NO_SHARING, encoding="utf-8")
        wait_for(sharing("1", "none"), "gfd to notice the rewritten config file", logs)
        assert reloads(logs) == ["signal", "config file changed"], reloads(logs)
        assert pod.poll() is None
    finally:
        stop_pod(pod)


def stop_pod(pod: subprocess.Popen[bytes]) -> None:
    """Stop the pod as the kubelet would: SIGTERM to its first process (unshare itself
    ignores SIGTERM), which stops the containers; then unshare ends with it."""
    children = Path(f"/proc/{pod.pid}/task/{pod.pid}/children")
    for pid in children.read_text().split() if children.exists() else ():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
    try:
        pod.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pod.kill()  # --kill-child passes it on as SIGTERM
        pod.wait()
