"""gfd's Grafana dashboard (scripts/dashboard.py, make dashboard): the committed JSON is what
the generator makes now, every panel's PromQL is well formed and names only metrics gfd
exposes, and gfd itself never depends on the generator."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.dashboard import (
    DASHBOARD_FILES,
    ISSUE_43_METRICS,
    SCRIPT,
    committed,
    concrete,
    exposed_metric_names,
    generator,
    panel_queries,
    promql_problems,
)
from tests.deploy.manifests import REPO_ROOT


def test_the_committed_dashboard_is_what_the_generator_makes() -> None:
    # The JSON is never edited by hand: a change to scripts/dashboard.py (or a new SDK)
    # is committed with its output, so the two cannot drift.
    try:
        made = generator().render()
    except ImportError as exc:
        pytest.fail(
            f"grafana-foundation-sdk is missing ({exc}): pip install -r requirements/ci.lock"
        )
    for path in DASHBOARD_FILES:
        assert path.read_text(encoding="utf-8") == made, (
            f"{path.relative_to(REPO_ROOT)} is not what scripts/dashboard.py makes: make dashboard"
        )


def test_check_mode_says_when_a_file_is_stale(tmp_path: Path) -> None:
    # make dashboard's --check, on a copy of the tree whose chart copy is stale.
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, copy / "scripts" / "dashboard.py")
    for path in DASHBOARD_FILES:
        target = copy / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)
    script = [sys.executable, str(copy / "scripts" / "dashboard.py")]
    assert subprocess.run([*script, "--check"], capture_output=True, check=False).returncode == 0
    stale = copy / DASHBOARD_FILES[0].relative_to(REPO_ROOT)
    stale.write_text("{}\n", encoding="utf-8")
    checked = subprocess.run([*script, "--check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 1
    assert "deploy/helm/gfd/dashboards/gfd.json" in checked.stderr
    assert stale.read_text(encoding="utf-8") == "{}\n"  # --check writes nothing


def test_the_component_ships_the_committed_file() -> None:
    kustomization = yaml.safe_load(
        (DASHBOARD_FILES[1].parent / "kustomization.yaml").read_text(encoding="utf-8")
    )
    (generated,) = kustomization["configMapGenerator"]
    assert generated["files"] == [DASHBOARD_FILES[1].name]
    assert generated["options"]["labels"]["grafana_dashboard"] == "1"


def test_variables_datasource_and_node() -> None:
    board = committed()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["node"]
    assert node["type"] == "query"
    assert node["query"] == "label_values(gfd_gpu_info, node)"
    assert node["multi"] and node["includeAll"] and node["allValue"] == ".*"
    # Every query reads the data source the variable picks.
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_the_panels_issue_43_asks_for() -> None:
    exprs = {q.panel: q.expr for q in panel_queries()}
    wanted = {
        "GPUs by product and health": ("gfd_gpu_info", "gfd_gpu_healthy"),
        "Unhealthy GPUs by failing check": ("gfd_health_check_failing",),
        "Xid rate by GPU and Xid": ("gfd_gpu_xid_errors_total offset 5m",),
        "PCIe links": ("gfd_gpu_pcie_link_width_max",),
        "Fabric state": ("gfd_gpu_fabric_state",),
        "Nodes by driver version": ("driver_version",),
        "Nodes by CUDA version": ("cuda_version",),
        "gfd agents by version": ("gfd_build_info",),
        "Cycles by result": ("gfd_cycles_total",),
        "Failed cycles by kind": ("gfd_cycle_errors_total",),
        "Cycle duration": ("gfd_cycle_duration_seconds_bucket",),
        "NVML up": ("gfd_nvml_up",),
        "Seconds since the last successful cycle": ("gfd_last_success_timestamp_seconds",),
    }
    for title, parts in wanted.items():
        assert title in exprs, title
        for part in parts:
            assert part in exprs[title], (title, part)


def test_every_query_is_well_formed_and_names_only_gfds_metrics() -> None:
    known = exposed_metric_names()
    queries = panel_queries()
    assert len(queries) > 20
    for query in queries:
        problems = promql_problems(concrete(query.expr), known)
        assert not problems, f"{query.panel} ({query.ref}): {problems}\n{query.expr}"


def test_the_known_names_come_from_gfds_source() -> None:
    # As prometheus_client exposes them: counters with _total, histograms by bucket.
    known = exposed_metric_names()
    assert {"gfd_cycles_total", "gfd_gpu_xid_errors_total", "gfd_nvml_up"} <= known
    assert "gfd_cycle_duration_seconds_bucket" in known and "gfd_cycles" not in known
    assert known >= ISSUE_43_METRICS


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum by (result) (rate(gfd_cycle_total[5m]))", "metric gfd_cycle_total"),
        ('count(gfd_gpu_info{node=~".*"}', "unclosed"),
        ("rate(gfd_cycles_total[5m)", "closes"),
        ("rat(gfd_cycles_total[5m])", "unknown function rat"),
        ('gfd_gpu_info{node="a}', "unexpected"),
    ],
)
def test_the_check_sees_a_broken_query(expr: str, problem: str) -> None:
    # The negative control: a renamed metric or a typo is a failure, not a pass.
    problems = promql_problems(expr, exposed_metric_names())
    assert any(problem in p for p in problems), problems


def test_prometheus_parses_every_query(tmp_path: Path) -> None:
    # Prometheus' own parser, where promtool is installed (Debian's prometheus package):
    # each query as a recording rule, which promtool check rules parses.
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (Debian's prometheus package); the syntax check above ran")
    rules = [
        {"record": f"gfd_dashboard:query_{index}", "expr": concrete(q.expr)}
        for index, q in enumerate(panel_queries())
    ]
    path = tmp_path / "queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), "utf-8")
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_gfd_never_imports_the_generator() -> None:
    # Build tooling: the image has no grafana-foundation-sdk, and gfd must not need it.
    for source in (REPO_ROOT / "gfd").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        assert "grafana_foundation_sdk" not in text, source
        assert "scripts.dashboard" not in text, source
