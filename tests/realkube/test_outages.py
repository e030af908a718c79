"""A whole gfd process (the node sink, a one-second interval) through a control-plane
outage on the real server: kube-apiserver killed and started again, then etcd stopped
under it. gfd keeps running, retries, loses no label, and repairs what changed while it
could not write."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.controlplane import ControlPlane
from tests.realkube.cluster import GfdCluster, GfdPod
from tests.reliability.agent_process import AgentProcess, expected_labels

pytestmark = [pytest.mark.oracle("kube"), pytest.mark.slow]

WAIT = 30.0
#: What gfd logs for each retry of a request (a warning, or debug between two warnings).
RETRYING = "Kubernetes API request failed; retrying"


def wait_until(condition: Callable[[], bool], what: str, agent: AgentProcess) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            if condition():
                return
        except Exception:  # the server may be starting up; try again
            pass
        assert agent.process.poll() is None, f"gfd exited before {what}:\n{agent.tail()}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; gfd said:\n{agent.tail()}")
        time.sleep(0.1)


def test_apiserver_restart_and_etcd_pause(
    kube: GfdCluster, control_plane: ControlPlane, pod: GfdPod
) -> None:
    labels = expected_labels("dgx-h100")
    node = pod.node

    def labelled() -> bool:
        current = kube.labels(node)
        return all(current.get(k) == v for k, v in labels.items())

    def remove_count() -> None:
        kube.admin.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": {"nvidia.com/gpu.count": None}}},
            content_type="application/merge-patch+json",
        )

    with AgentProcess(
        "--simulate", "dgx-h100", "--patch-node", "--no-output-file", "--no-timestamp",
        "--node-name", node, "--kubeconfig", str(pod.kubeconfig), "--sleep-interval", "1s",
        metrics=False, log_level="debug",
    ) as agent:  # fmt: skip
        wait_until(labelled, "the first labels", agent)

        control_plane.kill_apiserver()
        try:
            retries_before = len(agent.matching(RETRYING))
            time.sleep(3)  # several cycles' worth of refused connections
            assert agent.process.poll() is None, agent.tail()
            assert len(agent.matching(RETRYING)) > retries_before, agent.tail()
        finally:
            control_plane.start_apiserver()  # the rest of the session needs it
        assert labelled(), "labels lost across the API server's restart"
        remove_count()
        wait_until(labelled, "gfd to restore a label after the restart", agent)

        remove_count()
        with control_plane.etcd_paused():
            time.sleep(4)
            assert agent.process.poll() is None, agent.tail()
        wait_until(labelled, "gfd to restore a label after etcd came back", agent)
        assert agent.process.poll() is None
    assert "Traceback" not in agent.tail(200)
