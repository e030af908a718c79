"""Whole agents under faults of their own running: bad cycles and bad reloads never end them.

Real processes, real signals: a Node object the API server garbles fails cycles that
are counted and retried while the agent goes on; a SIGHUP whose configuration cannot
be turned into sinks, or whose metrics address cannot be bound, leaves the running
configuration in place (logged, counted in ``gfd_config_reload_failures_total``,
shown by ``/readyz``); a reload that changes the sleep interval moves the ``/healthz``
window, and one that changes the metrics address moves the server.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from tests.emulator import ApiServerEmulator, Fault
from tests.reliability.agent_process import AgentProcess, file_state
from tests.reliability.conftest import NODE


def _write_config(path: Path, output: Path, **gfd: str) -> None:
    lines = [f"    {key}: {value}\n" for key, value in gfd.items()]
    path.write_text(
        f"version: v1\nflags:\n  gfd:\n    outputFile: {output}\n    noTimestamp: true\n"
        + "".join(lines)
    )


def _logged(agent: AgentProcess, prefix: str) -> int:
    return len([e for e in agent.events if e.get("event", "").startswith(prefix)])


def _reload(agent: AgentProcess, *, expect: str, count: int) -> None:
    agent.process.send_signal(signal.SIGHUP)
    agent.wait_for(lambda: _logged(agent, expect) >= count, f"{count} x {expect!r}")


def _counted_as_logged(agent: AgentProcess, metric: str, prefix: str) -> None:
    """``metric`` counts every reload that logged ``prefix``: at least one.

    One edit may be reloaded twice: the agent checks its config file once a second while it
    sleeps, and the SIGHUP sent after the write can arrive after that check took the change
    (the second reload reads the same file). Counters are raised before the line is logged,
    so the two agree once the last reload has logged.
    """
    agent.wait_for(
        lambda: agent.metric(metric) == _logged(agent, prefix) >= 1,
        f"{metric} to count the {prefix!r} lines",
    )


@pytest.mark.slow
def test_a_garbled_node_object_fails_cycles_but_never_the_agent(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    emulator.inject(
        Fault(raw=b'{"metadata": "not an object"}', method="GET", times=2),
        Fault(raw=b'{"metadata": {"labels": ["a", "list"]}}', method="GET", times=1),
        Fault(raw=b"\xff garbage, not JSON", method="GET", times=1),
    )
    with AgentProcess(
        "--simulate", "t4-single", "--sleep-interval", "1s", "--no-timestamp", "--no-output-file",
        "--patch-node", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
    ) as agent:  # fmt: skip
        failed = agent.wait_for_event("cycle failed", count=4, timeout=30)
        assert agent.alive()
        agent.wait_for(
            lambda: emulator.node_labels(NODE).get("nvidia.com/gpu.product") == "Tesla-T4",
            "the node to be labelled once the server behaves",
        )
        assert agent.metric("gfd_cycle_errors_total", kind="sink") >= 4
        assert agent.metric("gfd_cycle_errors_total", kind="internal") == 0
        reasons = [event["reason"] for event in failed[:4]]
        assert reasons[0] == (
            f"node: node {NODE}: API server sent a malformed object: "
            "metadata is a string, not an object"
        )
        assert "metadata.labels is a list, not a map of strings" in reasons[2]
        assert "API server sent invalid JSON" in reasons[3]
        assert agent.stop() == 0


@pytest.mark.slow
def test_a_reload_that_cannot_build_its_sinks_keeps_the_agent_running(tmp_path: Path) -> None:
    output, config = tmp_path / "gfd", tmp_path / "gfd.yaml"
    _write_config(config, output, sleepInterval="60s")
    with AgentProcess(
        "--simulate", "t4-single", "--config-file", str(config),
        "--kubeconfig", str(tmp_path / "no-such-kubeconfig"), "--node-name", NODE,
    ) as agent:  # fmt: skip
        agent.wait_for(lambda: agent.get("/readyz")[0] == 200, "a first good cycle")
        agent.wait_for(
            lambda: "(150s window)" in agent.get("/healthz")[1], "the first cycle's end in /healthz"
        )
        before = file_state(output)

        _write_config(config, output, sleepInterval="60s", patchNode="true")
        _reload(agent, expect="config reload failed", count=1)
        assert agent.alive()
        _counted_as_logged(agent, "gfd_config_reload_failures_total", "config reload failed")
        assert agent.metric("gfd_config_last_reload_successful") == 0
        status, body = agent.get("/readyz")
        assert status == 503 and "config reload failed" in body
        assert "no-such-kubeconfig" in body
        assert file_state(output) == before, "the old configuration keeps its file"

        _write_config(config, output, sleepInterval="5m")
        _reload(agent, expect="configuration reloaded", count=1)
        _counted_as_logged(agent, "gfd_config_reloads_total", "configuration reloaded")
        assert agent.get("/readyz")[0] == 200
        # The reload starts a cycle at once; while it runs /healthz reports the cycle, not
        # the window, so wait for the cycle to end instead of hoping it already has.
        agent.wait_for(
            lambda: "(630s window)" in agent.get("/healthz")[1], "the new window in /healthz"
        )
        assert agent.get("/healthz")[0] == 200
        assert agent.stop() == 0


@pytest.mark.slow
def test_a_changed_metrics_address_is_applied_or_refused_with_a_log_line(tmp_path: Path) -> None:
    output, config = tmp_path / "gfd", tmp_path / "gfd.yaml"
    _write_config(config, output, sleepInterval="60s", metricsAddress="127.0.0.1:0")
    with (
        socket.socket() as taken,
        AgentProcess(
            "--simulate", "t4-single", "--config-file", str(config), metrics=False
        ) as agent,
    ):  # fmt: skip
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        first = agent.metrics_url
        assert agent.get("/healthz")[0] == 200

        _write_config(config, output, sleepInterval="60s", metricsAddress=f"127.0.0.1:{busy}")
        _reload(agent, expect="config reload failed: metrics address change refused", count=1)
        refused = agent.matching(
            "config reload failed: metrics address change refused; keeping the running configuration"
        )[0]
        assert refused["address"] == f"127.0.0.1:{busy}" and str(busy) in refused["reason"]
        assert agent.get("/readyz")[0] == 503, "the old server still answers, and says so"

        _write_config(config, output, sleepInterval="60s", metricsAddress="localhost:0")
        _reload(agent, expect="configuration reloaded", count=1)
        ups = agent.wait_for_event("metrics and health endpoints up", count=2)
        moved = f"http://127.0.0.1:{int(ups[1]['port'])}"
        assert moved != first
        agent._metrics_url = moved
        assert agent.get("/healthz")[0] == 200
        _counted_as_logged(agent, "gfd_config_reload_failures_total", "config reload failed")
        _counted_as_logged(agent, "gfd_config_reloads_total", "configuration reloaded")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", int(first.rsplit(":", 1)[1])), timeout=2)
        assert agent.stop() == 0
