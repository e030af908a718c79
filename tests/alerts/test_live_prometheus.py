"""The real Prometheus (Debian's) scrapes three simulated gfd agents on loopback and
evaluates gfd's alert rules: the Xid 79 and the PCIe link trained down reach ``firing`` in
its ``/api/v1/alerts``, naming their node and GPU, and the healthy node fires nothing. A
fourth agent, a GB200 NVL4 on another driver, adds the fabric and the drift; then every
query of every panel of gfd's Grafana dashboard must return series from that Prometheus.

Bounded: scrapes and evaluations every second, every ``for:`` shortened to 2 s in the
test's rendering of the rules (tests/alerts/prometheus.py), the agents' grace period 1 s;
the whole case waits at most :data:`DEADLINE` seconds.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.alerts.prometheus import program, write_rules
from tests.deploy.dashboard import concrete, panel_queries
from tests.reliability.agent_process import AgentProcess, write_profile

DEADLINE = 75.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read().decode())


@contextlib.contextmanager
def prometheus(folder: Path, targets: dict[str, str]) -> Iterator[str]:
    """Prometheus scraping ``targets`` (pod name → host:port) as job gfd; its base URL."""
    rules = write_rules(folder / "gfd-alerts.yaml", for_="2s")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "gfd",
                "static_configs": [
                    {"targets": [address], "labels": {"pod": pod, "namespace": "gfd-test"}}
                    for pod, address in targets.items()
                ],
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config), "utf-8")
    port = free_port()
    log = (folder / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            str(program("prometheus")),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "prometheus did not become ready:\n"
                        + (folder / "prometheus.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


def agent(profile: str | Path, node: str, output: Path) -> AgentProcess:
    return AgentProcess(
        "--simulate", str(profile), "--sleep-interval", "1s", "--no-timestamp",
        "--health-grace-period", "1s", "--node-name", node, "-o", str(output),
    )  # fmt: skip


@pytest.mark.slow
def test_prometheus_fires_the_expected_alerts(tmp_path: Path) -> None:
    program("promtool")  # both, or one skip line
    started = time.monotonic()
    xid_dir, pcie_dir = tmp_path / "xid", tmp_path / "pcie"
    xid_dir.mkdir()
    pcie_dir.mkdir()
    xid = write_profile(xid_dir, {"xid": [{"gpu": 5, "xid": 79, "after_calls": 20}]})
    pcie = write_profile(
        pcie_dir,
        {
            "pcie_link_down": [{"gpu": 2, "after_calls": 0, "width": 8}],
            # Two cycles fail on NVML: the dashboard's failed-cycles panel has a series.
            "errors": [
                {"call": "nvmlDeviceGetCount_v2", "error": "NVML_ERROR_UNKNOWN", "times": 2}
            ],
        },
    )
    with (
        agent("dgx-h100", "node-healthy", tmp_path / "healthy.labels") as healthy,
        agent(xid, "node-xid", tmp_path / "xid.labels") as xid_agent,
        agent(pcie, "node-pcie", tmp_path / "pcie.labels") as pcie_agent,
        # An NVLink fabric (fabric state series), on another driver (drift).
        agent("gb200-nvl4", "node-fabric", tmp_path / "fabric.labels") as fabric_agent,
    ):
        targets = {
            "gfd-healthy": healthy.metrics_url.removeprefix("http://"),
            "gfd-xid": xid_agent.metrics_url.removeprefix("http://"),
            "gfd-pcie": pcie_agent.metrics_url.removeprefix("http://"),
            "gfd-fabric": fabric_agent.metrics_url.removeprefix("http://"),
        }
        (tmp_path / "prom").mkdir()
        with prometheus(tmp_path / "prom", targets) as url:
            want = {
                ("GPUXidError", "node-xid", "5"),
                ("GPUPCIeDegraded", "node-pcie", "2"),
            }
            firing: set[tuple[str, str, str]] = set()
            alerts: list[dict[str, Any]] = []
            while time.monotonic() - started < DEADLINE:
                alerts = get(f"{url}/api/v1/alerts")["data"]["alerts"]
                firing = {
                    (
                        a["labels"]["alertname"],
                        a["labels"].get("node", ""),
                        a["labels"].get("gpu", ""),
                    )
                    for a in alerts
                    if a["state"] == "firing"
                }
                if want <= firing:
                    break
                time.sleep(0.5)
            assert want <= firing, f"after {DEADLINE}s, alerts: {json.dumps(alerts, indent=1)}"
            # Every target is up and scraped (one scrape may time out on a busy machine:
            # polled, within the deadline), and nothing fires for the healthy node's pod.
            # Only firing counts: every rule must hold for its ``for:`` (2 s here), so an
            # expression true for one evaluation (a 1 s-interval cycle starved for 3 s) is
            # pending, not an alert.
            up_by_pod: dict[str, str] = {}
            while time.monotonic() - started < DEADLINE:
                up = get(f"{url}/api/v1/query?query=up")["data"]["result"]
                up_by_pod = {r["metric"]["pod"]: r["value"][1] for r in up}
                if up_by_pod == {pod: "1" for pod in targets}:
                    break
                time.sleep(0.5)
            assert up_by_pod == {pod: "1" for pod in targets}
            healthy_alerts = [
                a
                for a in alerts
                if a["state"] == "firing"
                and (
                    a["labels"].get("node") == "node-healthy"
                    or a["labels"].get("pod") == "gfd-healthy"
                )
            ]
            assert healthy_alerts == []
            # The firing alerts say what the runbook is and which node and GPU.
            for alert in alerts:
                if alert["labels"]["alertname"] == "GPUXidError":
                    assert "GPU 5 of node node-xid" in alert["annotations"]["description"]
                    assert alert["labels"]["severity"] == "critical"
            # Every panel of the dashboard (deploy/helm/gfd/dashboards/gfd.json) finds
            # series in this Prometheus, as Grafana asks with every node selected.
            empty = _empty_panels(url, started)
            assert not empty, f"dashboard queries without a series: {json.dumps(empty, indent=1)}"
    assert time.monotonic() - started < 120


def _empty_panels(url: str, started: float) -> list[dict[str, str]]:
    """The dashboard's panels none of whose queries returns a series (a panel's other
    queries show states this fleet does not have: GPUs without health checks, say), and
    any query Prometheus refuses; retried until :data:`DEADLINE` (a rate needs two
    scrapes in its window)."""
    while True:
        found: dict[str, list[dict[str, str]]] = {}
        refused = []
        for query in panel_queries():
            expr = concrete(query.expr)
            answer = get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            seen = found.setdefault(query.panel, [])
            if answer["status"] != "success":
                refused.append({"panel": query.panel, "ref": query.ref, "expr": expr})
            elif not answer["data"]["result"]:
                seen.append({"panel": query.panel, "ref": query.ref, "expr": expr})
            else:
                seen.append({})
        empty = refused + [
            query
            for answers in found.values()
            if not any(a == {} for a in answers)
            for query in answers
        ]
        if not empty or time.monotonic() - started > DEADLINE + 30:
            return empty
        time.sleep(1)
