"""gfd's alert rules judged by promtool (Debian's prometheus package): ``check rules``, and
``test rules`` with input series written for every alert, each with a case where it fires
and one where it must not.

The unit tests are built here, not kept as a YAML file: the expected annotations are the
rules' own templates expanded for the case's labels, so a reworded description needs no
second edit, while a changed label, expression or ``for:`` fails.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd.health.registry import CHECKS
from tests.alerts.prometheus import alerts, program, write_rules
from tests.deploy.manifests import REPO_ROOT

TARGET = {
    "job": "gfd",
    "namespace": "gpu-feature-discovery",
    "pod": "gfd-x7k2p",
    "instance": "10.0.0.7:8079",
}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def rule(name: str) -> dict[str, Any]:
    (found,) = [a for a in alerts() if a["alert"] == name]
    return found


def expected(name: str, labels: dict[str, str], value: str = "") -> dict[str, Any]:
    """The alert as promtool must report it: ``labels`` plus the rule's, annotations
    expanded (``$labels.x``, and ``$value | humanizeDuration`` as ``value``)."""
    alert = rule(name)

    def expand(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)
        return text.replace("{{ $value | humanizeDuration }}", value)

    return {
        "exp_labels": {**labels, **alert["labels"]},
        "exp_annotations": {k: expand(v) for k, v in alert["annotations"].items()},
    }


def problem(gpu: str, check: str, reason: str, node: str = "gpu-node-1") -> dict[str, str]:
    return {**TARGET, "node": node, "gpu": gpu, "check": check, "reason": reason}


#: One problem of every reason the checks report, each on its own GPU.
PROBLEMS = {
    "GPULost": [problem("0", "gpu-lost", "GPULost")],
    "GPUXidError": [problem("1", "xid", "XidError")],
    "GPUXidStorm": [problem("2", "xid", "XidStorm")],
    "GPUMemoryFailure": [
        problem("3", "memory", "GPUMemoryFailure"),
        problem("4", "memory", "GPUResetRequired"),
        problem("5", "memory", "UncorrectableECC"),
    ],
    "GPUNVLinkDegraded": [problem("6", "nvlink", "NVLinkDegraded")],
    "GPUFabricNotReady": [
        problem("7", "fabric", "FabricNotReady"),
        problem("7", "fabric", "FabricDegraded", node="gpu-node-2"),
    ],
    "GPUPCIeDegraded": [
        problem("0", "pcie", "PCIeLinkDegraded", node="gpu-node-2"),
        problem("1", "pcie", "PCIeReplaysRising", node="gpu-node-2"),
    ],
    "GPUDevicePluginProblem": [
        problem("", "device-plugin", "DevicePluginMissing", node="gpu-node-3"),
        problem("", "device-plugin", "AllocatableMismatch", node="gpu-node-4"),
    ],
}


def per_gpu_tests() -> list[dict[str, Any]]:
    # Every family's problems at once for 10 minutes: each alert fires for its own
    # problems only, and only once they held for 5 minutes.
    inputs = [
        series("gfd_gpu_health_problem", labels, "1x10")
        for problems in PROBLEMS.values()
        for labels in problems
    ]
    checks: list[dict[str, Any]] = []
    for name, problems in PROBLEMS.items():
        checks.append({"eval_time": "4m", "alertname": name, "exp_alerts": []})
        checks.append(
            {
                "eval_time": "6m",
                "alertname": name,
                "exp_alerts": [
                    expected(name, {k: v for k, v in p.items() if v != ""}) for p in problems
                ],
            }
        )
    fires = {"interval": "1m", "input_series": inputs, "alert_rule_test": checks}
    # A node whose problems are gone fires nothing.
    cleared = {
        "interval": "1m",
        "input_series": [
            series("gfd_gpu_health_problem", labels, "1x3 _x7")
            for problems in PROBLEMS.values()
            for labels in problems
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": name, "exp_alerts": []} for name in PROBLEMS
        ],
    }
    return [fires, cleared]


def agent_tests() -> list[dict[str, Any]]:
    other = {**TARGET, "pod": "gfd-healthy", "instance": "10.0.0.8:8079"}
    up = [
        series("up", TARGET, "0x10"),
        series("up", other, "1x10"),
        series("up", {**TARGET, "job": "node-exporter"}, "0x10"),
    ]
    down = {
        "interval": "1m",
        "input_series": [*up, series("gfd_build_info", {**other, "version": "0.1.0"}, "1x20")],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "GfdDown", "exp_alerts": []},
            {
                "eval_time": "6m",
                "alertname": "GfdDown",
                "exp_alerts": [expected("GfdDown", TARGET)],
            },
            {"eval_time": "20m", "alertname": "GfdAbsent", "exp_alerts": []},
        ],
    }
    absent = {
        "interval": "1m",
        "input_series": [series("up", other, "1x20")],
        "alert_rule_test": [
            {"eval_time": "14m", "alertname": "GfdAbsent", "exp_alerts": []},
            {
                "eval_time": "16m",
                "alertname": "GfdAbsent",
                "exp_alerts": [expected("GfdAbsent", {})],
            },
        ],
    }
    failing = {**TARGET}
    cycles = {
        "interval": "1m",
        "input_series": [
            series("gfd_cycles_total", {**failing, "result": "failure"}, "0+1x40"),
            series("gfd_cycles_total", {**failing, "result": "success"}, "5x40"),
            series("gfd_cycles_total", {**other, "result": "failure"}, "0+1x40"),
            series("gfd_cycles_total", {**other, "result": "success"}, "0+1x40"),
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "GfdCyclesFailing", "exp_alerts": []},
            {
                "eval_time": "20m",
                "alertname": "GfdCyclesFailing",
                "exp_alerts": [expected("GfdCyclesFailing", failing)],
            },
        ],
    }
    # Stuck at 60 s with a 60 s interval: stale past 4 minutes, alerting 5 minutes later.
    stale = {
        "interval": "1m",
        "input_series": [
            series("gfd_last_success_timestamp_seconds", TARGET, "60x20"),
            series("gfd_sleep_interval_seconds", TARGET, "60x20"),
            series("gfd_last_success_timestamp_seconds", other, "0+60x20"),
            series("gfd_sleep_interval_seconds", other, "60x20"),
            series("gfd_last_success_timestamp_seconds", {**TARGET, "pod": "p3"}, "60x20"),
            series("gfd_sleep_interval_seconds", {**TARGET, "pod": "p3"}, " ".join(["Inf"] * 21)),
        ],
        "alert_rule_test": [
            {"eval_time": "8m", "alertname": "GfdLabelsNotRefreshed", "exp_alerts": []},
            {
                "eval_time": "12m",
                "alertname": "GfdLabelsNotRefreshed",
                "exp_alerts": [expected("GfdLabelsNotRefreshed", TARGET, value="11m 0s")],
            },
        ],
    }
    nvml = {
        "interval": "1m",
        "input_series": [
            series("gfd_nvml_up", TARGET, "0x10"),
            series("gfd_nvml_up", other, "1x10"),
        ],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "GfdNVMLDown", "exp_alerts": []},
            {
                "eval_time": "6m",
                "alertname": "GfdNVMLDown",
                "exp_alerts": [expected("GfdNVMLDown", TARGET)],
            },
        ],
    }
    return [down, absent, cycles, stale, nvml]


def info(node: str, gpu: str, driver: str, cuda: str) -> dict[str, str]:
    return {
        **TARGET,
        "node": node,
        "gpu": gpu,
        "uuid": f"GPU-{node}-{gpu}",
        "product": "NVIDIA-H100-80GB-HBM3",
        "driver_version": driver,
        "cuda_version": cuda,
    }


def drift_tests() -> list[dict[str, Any]]:
    # Three nodes: two drivers, one CUDA; then a fleet that agrees.
    drifting = [
        info("gpu-node-1", "0", "570.148.08", "12.8"),
        info("gpu-node-1", "1", "570.148.08", "12.8"),
        info("gpu-node-2", "0", "570.172.08", "12.8"),
    ]
    fleet = {
        "interval": "5m",
        "input_series": [series("gfd_gpu_info", labels, "1x20") for labels in drifting],
        "alert_rule_test": [
            {"eval_time": "50m", "alertname": "GPUDriverVersionDrift", "exp_alerts": []},
            {
                "eval_time": "65m",
                "alertname": "GPUDriverVersionDrift",
                "exp_alerts": [
                    expected("GPUDriverVersionDrift", {"node": n, "driver_version": d})
                    for n, d in (("gpu-node-1", "570.148.08"), ("gpu-node-2", "570.172.08"))
                ],
            },
            {"eval_time": "65m", "alertname": "GPUCUDAVersionDrift", "exp_alerts": []},
        ],
    }
    cuda = {
        "interval": "5m",
        "input_series": [
            series("gfd_gpu_info", info("gpu-node-1", "0", "570.148.08", "12.8"), "1x20"),
            series("gfd_gpu_info", info("gpu-node-3", "0", "550.163.01", "12.4"), "1x20"),
        ],
        "alert_rule_test": [
            {
                "eval_time": "65m",
                "alertname": "GPUCUDAVersionDrift",
                "exp_alerts": [
                    expected("GPUCUDAVersionDrift", {"node": n, "cuda_version": c})
                    for n, c in (("gpu-node-1", "12.8"), ("gpu-node-3", "12.4"))
                ],
            },
        ],
    }
    agreeing = {
        "interval": "5m",
        "input_series": [series("gfd_gpu_info", labels, "1x20") for labels in drifting[:2]],
        "alert_rule_test": [
            {"eval_time": "65m", "alertname": name, "exp_alerts": []}
            for name in ("GPUDriverVersionDrift", "GPUCUDAVersionDrift")
        ],
    }
    return [fleet, cuda, agreeing]


def unit_tests() -> list[dict[str, Any]]:
    return [*per_gpu_tests(), *agent_tests(), *drift_tests()]


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # promtool test keeps its TSDB under TMPDIR: here, the test's own folder.
    return subprocess.run(
        [str(program("promtool")), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(cwd)},
    )


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    done = run("check", "rules", write_rules(tmp_path / "gfd-alerts.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    write_rules(tmp_path / "gfd-alerts.yaml")
    tests = tmp_path / "gfd-alerts.test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": ["gfd-alerts.yaml"], "evaluation_interval": "1m", "tests": unit_tests()},
            sort_keys=False,
        ),
        "utf-8",
    )
    done = run("test", "rules", tests, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_sees_a_wrong_expectation(tmp_path: Path) -> None:
    # The negative control: the same unit tests, one expectation wrong, fail.
    write_rules(tmp_path / "gfd-alerts.yaml")
    tests = unit_tests()
    tests[0]["alert_rule_test"][1]["exp_alerts"] = []
    path = tmp_path / "wrong.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": ["gfd-alerts.yaml"], "tests": tests}), "utf-8")
    done = run("test", "rules", path, cwd=tmp_path)
    assert done.returncode != 0 and "GPULost" in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for test in unit_tests():
        for check in test["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert firing == names and silent == names


def test_every_reason_a_check_reports_has_an_alert() -> None:
    import importlib

    reasons = set()
    for entry in CHECKS:
        module = importlib.import_module(f"gfd.health.checks.{entry.module}")
        reasons |= set(getattr(module, entry.class_name).reasons)
    covered = {p["reason"] for problems in PROBLEMS.values() for p in problems}
    assert covered == reasons


def test_each_alert_follows_the_conventions() -> None:
    health = (REPO_ROOT / "docs" / "health.md").read_text("utf-8")
    anchors = {line[4:].strip().lower() for line in health.splitlines() if line.startswith("### ")}
    for alert in alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), name
        assert alert.get("for"), name
        annotations = alert["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert path == "docs/health.md" and anchor in anchors, name
        assert "node" in annotations["description"].lower(), name
        assert "GPU" in annotations["description"], name


@pytest.mark.parametrize("component", ["prometheus-rule"])
def test_the_component_says_what_it_needs(component: str) -> None:
    text = (REPO_ROOT / "deploy" / "components" / component / "kustomization.yaml").read_text()
    assert "PrometheusRule" in text and "chart_rules" in text
