#!/usr/bin/env python3
"""gfd's Grafana dashboard, built with Grafana's own grafana-foundation-sdk (make dashboard).

Build tooling, not part of gfd: nothing under gfd/ imports it, and the image does not
carry it. It writes the one dashboard JSON to the two places that ship it:

- ``deploy/helm/gfd/dashboards/gfd.json``: the chart's ConfigMap
  (``metrics.grafanaDashboard.enabled``) reads it with ``.Files.Get``;
- ``deploy/components/grafana-dashboard/gfd.json``: the kustomize component's
  ConfigMap generator reads it (kustomize reads no file outside the component).

``--check`` writes nothing and exits 1 when either file differs from what this script
makes now; ``tests/deploy/test_dashboard.py`` holds the committed files to it the same way.

The queries: series that gfd labels itself carry ``node`` (``gfd_gpu_info``, the PCIe
link and fabric gauges); gfd's own series (its cycles, health checks, Xid counter,
``gfd_gpu_healthy``) carry only the scrape's labels, so they are given their node by a
join on ``instance`` with ``gfd_gpu_info``. An agent with no inventory (NVML down, no GPU
read yet) keeps its series, named ``node="(no inventory) <instance>"``, where an agent's
own health is shown: that agent is the one to look at.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import (
    bargauge,
    common,
    dashboard,
    prometheus,
    stat,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import prometheus as prometheus_models

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Where the dashboard is written, relative to the repository's root.
TARGETS = (
    Path("deploy/helm/gfd/dashboards/gfd.json"),
    Path("deploy/components/grafana-dashboard/gfd.json"),
)

UID = "gfd-fleet"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")

#: The GPUs of the selected nodes (gfd's inventory series, one per GPU).
GPUS = 'gfd_gpu_info{node=~"$node"}'
#: One series per agent (scrape instance) of a selected node, with its node.
NODE_OF_INSTANCE = f"max by (instance, node) ({GPUS})"
#: The window of every rate: at least four scrapes at the chart's 30 s interval.
RATE_WINDOW = "5m"
RATE_SECONDS = 300


def on_nodes(expr: str) -> str:
    """``expr`` (a series of gfd's own, without ``node``) on the selected nodes, each
    series given its node; an agent with no inventory keeps its series, its node named
    ``(no inventory) <instance>``."""
    return (
        f"({expr}) * on (instance) group_left (node) {NODE_OF_INSTANCE}"
        f" or label_replace(({expr}) unless on (instance) gfd_gpu_info,"
        f' "node", "(no inventory) $1", "instance", "(.*)")'
    )


def query(expr: str, legend: str = "", *, ref: str = "A", instant: bool = False) -> Any:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(prometheus_models.PromQueryFormat.TABLE)
    return q


def thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=value, color=color) for value, color in steps])
    )


def stat_panel(title: str, description: str, expr: str, *, bad_above: float | None) -> Any:
    steps: list[tuple[float | None, str]] = [(None, "green")]
    if bad_above is not None:
        steps.append((bad_above, "red"))
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(query(expr))
        .no_value("0")
        .thresholds(thresholds(*steps))
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
        .height(4)
        .span(6)
    )


def graph(
    title: str,
    description: str,
    targets: Sequence[tuple[str, str]],
    *,
    unit: str = "short",
    span: int = 12,
    stacked: bool = False,
) -> Any:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .fill_opacity(10)
        .legend(
            common.VizLegendOptions()
            .display_mode(common_models.LegendDisplayMode.TABLE)
            .placement(common_models.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .height(8)
        .span(span)
    )
    if stacked:
        panel = panel.stacking(
            common.StackingConfig().mode(common_models.StackingMode.NORMAL)
        ).fill_opacity(60)
    for index, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(expr, legend, ref=chr(ord("A") + index)))
    return panel


def table_panel(
    title: str,
    description: str,
    targets: Sequence[tuple[str, str]],
    *,
    span: int = 12,
    mappings: Sequence[Any] = (),
    hidden: Sequence[str] = (),
) -> Any:
    """A table of instant queries; several are merged on their common labels, each
    query's value a column named as ``targets`` says (ref id, column name)."""
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(span)
    )
    rename: dict[str, str] = {}
    for index, (expr, column) in enumerate(targets):
        ref = chr(ord("A") + index)
        panel = panel.with_target(query(expr, ref=ref, instant=True))
        rename["Value" if len(targets) == 1 else f"Value #{ref}"] = column
    exclude = {name: True for name in ("Time", "__name__", *SCRAPE_LABELS, *hidden)}
    if len(targets) > 1:
        panel = panel.with_transformation(models.DataTransformerConfig(id_val="merge", options={}))
    panel = panel.with_transformation(
        models.DataTransformerConfig(
            id_val="organize", options={"excludeByName": exclude, "renameByName": rename}
        )
    )
    if mappings:
        panel = panel.mappings(list(mappings))
    return panel


#: The scrape's own labels, left out of tables (the node names the agent).
SCRAPE_LABELS = ("container", "endpoint", "instance", "job", "namespace", "pod", "service")

HEALTH_MAPPING = models.ValueMap(
    options={
        "1": models.ValueMappingResult(text="healthy", color="green", index=0),
        "0": models.ValueMappingResult(text="unhealthy", color="red", index=1),
        "-1": models.ValueMappingResult(text="not known yet", color="text", index=2),
    }
)


def fleet_row() -> list[Any]:
    healthy = f"{GPUS} * on (instance) group_left () (gfd_gpu_healthy == 1)"
    unhealthy = f"{GPUS} * on (instance) group_left () (gfd_gpu_healthy == 0)"
    unknown = f"{GPUS} unless on (instance) gfd_gpu_healthy"
    return [
        stat_panel(
            "GPUs", "GPUs in gfd's inventory (gfd_gpu_info).", f"count({GPUS})", bad_above=None
        ),
        stat_panel(
            "GPU nodes",
            "Nodes whose gfd reported GPUs.",
            f"count(count by (node) ({GPUS}))",
            bad_above=None,
        ),
        stat_panel(
            "Unhealthy GPUs",
            "GPUs on nodes whose GPUHealthy state is False (gfd_gpu_healthy == 0).",
            f"count({unhealthy})",
            bad_above=1,
        ),
        stat_panel(
            "Agents with NVML down",
            "gfd agents whose last NVML read failed.",
            f"count({on_nodes('gfd_nvml_up')} == 0)",
            bad_above=1,
        ),
        table_panel(
            "GPUs by product and health",
            "GPUs by product: on healthy nodes, on unhealthy nodes, and on nodes whose "
            "health gfd has not judged yet.",
            [
                (f"count by (product) ({healthy})", "healthy"),
                (f"count by (product) ({unhealthy})", "unhealthy"),
                (f"count by (product) ({unknown})", "not known yet"),
            ],
            span=10,
        ),
        table_panel(
            "Every GPU",
            "Every GPU: its product, driver and CUDA version, and its node's health.",
            [
                (
                    f"({GPUS} * on (instance) group_left () gfd_gpu_healthy) or ({GPUS} * 0 - 1)",
                    "health",
                )
            ],
            span=14,
            mappings=[HEALTH_MAPPING],
        ),
    ]


def health_row() -> list[Any]:
    gpus_per_instance = f"count by (instance) ({GPUS})"
    return [
        graph(
            "Unhealthy GPUs by failing check",
            "GPUs on nodes where a health check fails, by check (gfd_health_check_failing; "
            "the GPUHealthy condition's reason names the problem, docs/health.md).",
            [
                (
                    f"sum by (check) ((gfd_health_check_failing == 1) * on (instance)"
                    f" group_left () {gpus_per_instance})",
                    "{{check}}",
                )
            ],
            stacked=True,
        ),
        table_panel(
            "Failing checks",
            "Each check failing on a node, with the problems it found in its last run.",
            [
                (
                    on_nodes(
                        "gfd_health_check_problems and on (instance, check)"
                        " (gfd_health_check_failing == 1)"
                    ),
                    "problems",
                )
            ],
        ),
        graph(
            "Checks that cannot decide",
            "Agents whose check cannot judge part of what it watches (a GPU without ECC, "
            "one not watched for Xids, a PCIe link NVML does not report).",
            [(f"sum by (check) ({on_nodes('gfd_health_check_cannot_decide')})", "{{check}}")],
            span=24,
        ),
    ]


def counted_since(counter: str, window: str) -> str:
    """How much ``counter`` grew over ``window``, a series that appeared in it counted from
    0. gfd's Xid counter has a series per GPU and Xid, made at that Xid's first report
    with the value 1: ``increase()`` and ``rate()`` see it begin at 1 and count nothing, so
    a GPU's first Xid never showed (the live Prometheus test caught it). A restart of the
    agent (a counter reset) within the window counts less, never below 0."""
    return f"clamp_min({counter} - ({counter} offset {window} or {counter} * 0), 0)"


#: Failed cycles a second: a kind's series appears at its first failure (counted_since).
CYCLE_ERRORS_RATE = f"{counted_since('gfd_cycle_errors_total', RATE_WINDOW)} / {RATE_SECONDS}"


def xid_row() -> list[Any]:
    rate = on_nodes(f"{counted_since('gfd_gpu_xid_errors_total', RATE_WINDOW)} / {RATE_SECONDS}")
    increase = on_nodes(counted_since("gfd_gpu_xid_errors_total", "$__range"))
    return [
        graph(
            "Xid rate by GPU and Xid",
            "Critical Xids a second, by node, GPU (its index, or its bus id where NVML "
            "does not list it) and Xid, fatal or ignored by the xid check "
            "(gfd_gpu_xid_errors_total).",
            [(f"sum by (node, gpu, xid) ({rate}) > 0", "{{node}} GPU {{gpu}} Xid {{xid}}")],
            unit="cps",
            span=14,
        ),
        table_panel(
            "Xids in the range",
            "Critical Xids counted over the dashboard's time range, by node, GPU and Xid.",
            [(f"sum by (node, gpu, xid) ({increase}) > 0", "Xids")],
            span=10,
        ),
    ]


def pcie_row() -> list[Any]:
    width = 'gfd_gpu_pcie_link_width{node=~"$node"}'
    generation = 'gfd_gpu_pcie_link_generation{node=~"$node"}'
    return [
        graph(
            "GPUs with a PCIe link below its maximum",
            "A width below the maximum is a link trained down (reseat, replace a riser or "
            "retimer). A generation below it is that too under load, but many GPUs lower "
            "their generation when idle to save power: the pcie health check judges it "
            "only while the GPU is busy.",
            [
                (f"count({width} < gfd_gpu_pcie_link_width_max)", "width below its maximum"),
                (
                    f"count({generation} < gfd_gpu_pcie_link_generation_max)",
                    "generation below its maximum",
                ),
            ],
            span=10,
        ),
        table_panel(
            "PCIe links",
            "Each GPU's PCIe link: the generation and width it runs at, and the most the "
            "GPU and its slot allow.",
            [
                (generation, "generation"),
                ('gfd_gpu_pcie_link_generation_max{node=~"$node"}', "max generation"),
                (width, "width"),
                ('gfd_gpu_pcie_link_width_max{node=~"$node"}', "max width"),
            ],
            span=14,
        ),
    ]


def fabric_row() -> list[Any]:
    state = 'gfd_gpu_fabric_state{node=~"$node"} == 1'
    return [
        graph(
            "GPUs by fabric state",
            "NVLink fabric (NVSwitch, IMEX) registration state of each GPU that has one.",
            [(f"count by (state) ({state})", "{{state}}")],
            span=12,
            stacked=True,
        ),
        table_panel(
            "Fabric state",
            "Each GPU's fabric state now.",
            [(state, "")],
            span=12,
            hidden=("Value",),
        ),
    ]


def drift_row() -> list[Any]:
    def nodes_by(label: str) -> str:
        return f"count by ({label}) (count by (node, {label}) ({GPUS}))"

    def bars(title: str, description: str, expr: str, legend: str) -> Any:
        return (
            bargauge.Panel()
            .title(title)
            .description(description)
            .datasource(DATASOURCE)
            .with_target(query(expr, legend))
            .orientation(common_models.VizOrientation.HORIZONTAL)
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
            .min(0)
            .height(6)
            .span(6)
        )

    return [
        bars(
            "Nodes by driver version",
            "More than one bar is drift.",
            nodes_by("driver_version"),
            "{{driver_version}}",
        ),
        bars(
            "Nodes by CUDA version",
            "The CUDA version the driver supports.",
            nodes_by("cuda_version"),
            "{{cuda_version}}",
        ),
        bars(
            "gfd agents by version",
            "gfd's own version on each agent (gfd_build_info).",
            f"count by (version) ({on_nodes('gfd_build_info')})",
            "{{version}}",
        ),
        table_panel(
            "Driver and CUDA by node",
            "Each node's driver and CUDA version, with its GPUs: sort a column to find "
            "the minority.",
            [(f"count by (node, driver_version, cuda_version) ({GPUS})", "GPUs")],
            span=6,
        ),
    ]


def agent_row() -> list[Any]:
    since = on_nodes("time() - (gfd_last_success_timestamp_seconds > 0)")
    return [
        graph(
            "Cycles by result",
            "gfd's discovery cycles a second, by result (gfd_cycles_total).",
            [
                (
                    f"sum by (result) ({on_nodes(f'rate(gfd_cycles_total[{RATE_WINDOW}])')})",
                    "{{result}}",
                )
            ],
            unit="cps",
            span=8,
        ),
        graph(
            "Failed cycles by kind",
            "Failed cycles a second by kind of error (gfd_cycle_errors_total): "
            "sink-permanent is RBAC or the admission policy refusing a write.",
            [
                (
                    f"sum by (kind) ({on_nodes(CYCLE_ERRORS_RATE)}) > 0",
                    "{{kind}}",
                )
            ],
            unit="cps",
            span=8,
        ),
        graph(
            "Cycle duration",
            "Wall time of one cycle (gfd_cycle_duration_seconds), over the selected agents.",
            [
                (
                    f"histogram_quantile({q}, sum by (le) ("
                    f"{on_nodes(f'rate(gfd_cycle_duration_seconds_bucket[{RATE_WINDOW}])')}))",
                    f"p{round(q * 100)}",
                )
                for q in (0.5, 0.99)
            ],
            unit="s",
            span=8,
        ),
        graph(
            "Seconds since the last successful cycle",
            "Past three sleep intervals, the node's labels are not being refreshed.",
            [(since, "{{node}}")],
            unit="s",
            span=12,
        ),
        graph(
            "NVML up",
            "1 while the agent's last NVML read worked (gfd_nvml_up).",
            [(on_nodes("gfd_nvml_up"), "{{node}}")],
            span=12,
        ),
    ]


def build() -> dict[str, Any]:
    """The dashboard, as Grafana's JSON model."""
    rows = [
        ("Fleet", fleet_row()),
        ("Health", health_row()),
        ("Xid errors", xid_row()),
        ("PCIe links", pcie_row()),
        ("Fabric", fabric_row()),
        ("Drift", drift_row()),
        ("gfd agents", agent_row()),
    ]
    board = (
        dashboard.Dashboard("gfd: GPU fleet")
        .uid(UID)
        .description(
            "The GPU fleet as gfd (GPU feature discovery) sees it: inventory, health, "
            "Xids, PCIe links, fabric, driver and CUDA drift, and gfd's own cycles."
        )
        .tags(["gfd", "gpu", "nvidia"])
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            dashboard.QueryVariable("node")
            .label("Node")
            .datasource(DATASOURCE)
            .query("label_values(gfd_gpu_info, node)")
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(models.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )
    # Ids fixed here rather than left to Grafana: a panel's link (viewPanel=N) stays valid
    # across regenerations that do not reorder the panels.
    next_id = 1
    for title, panels in rows:
        board = board.with_row(dashboard.Row(title).id(next_id))
        next_id += 1
        for panel in panels:
            board = board.with_panel(panel.id(next_id))
            next_id += 1
    model: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return model


def render() -> str:
    """The dashboard's JSON text, as committed: sorted keys, two-space indent, a final
    newline, so that a regeneration changes only what changed."""
    return json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is out of date"
    )
    args = parser.parse_args(argv)
    text = render()
    stale = []
    for target in TARGETS:
        path = REPO_ROOT / target
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        if args.check:
            stale.append(str(target))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"dashboard: wrote {target}")
    if stale:
        print(f"dashboard: out of date: {', '.join(stale)}; run make dashboard", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
