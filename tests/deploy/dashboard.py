"""gfd's Grafana dashboard as the tests read it: its files, its queries, and the metric names
they may use.

``scripts/dashboard.py`` makes the dashboard (Grafana's grafana-foundation-sdk); this module
reads what it made. :func:`panel_queries` lists every panel's PromQL and :func:`concrete`
turns one into a query Prometheus answers as it is (the dashboard's variables replaced by
what Grafana sends with every node selected): a live test against a real Prometheus asks
each of them for series. :func:`promql_problems` is the syntax check that needs no
Prometheus: balanced brackets, closed strings, known functions, and only metric names gfd
exposes, so a renamed metric fails.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tests.deploy.manifests import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "dashboard.py"
#: The committed copies the chart and the kustomize component ship.
DASHBOARD_FILES = (
    REPO_ROOT / "deploy" / "helm" / "gfd" / "dashboards" / "gfd.json",
    REPO_ROOT / "deploy" / "components" / "grafana-dashboard" / "gfd.json",
)

#: Series of issue 43's metrics work that the dashboard reads by these names and labels
#: (node, gpu, and the ones named): the inventory, the PCIe link and the fabric state.
#: Once gfd/metrics declares them, they are found there as well; until then they are the
#: names the dashboard was written against.
ISSUE_43_METRICS = frozenset(
    {
        "gfd_gpu_info",  # node, gpu, uuid, product, driver_version, cuda_version
        "gfd_gpu_pcie_link_generation",  # node, gpu
        "gfd_gpu_pcie_link_generation_max",
        "gfd_gpu_pcie_link_width",
        "gfd_gpu_pcie_link_width_max",
        "gfd_gpu_fabric_state",  # node, gpu, state
    }
)

#: The suffixes prometheus_client exposes for each kind of metric it declares.
_EXPOSED = {
    "Counter": ("_total",),
    "Gauge": ("",),
    "Histogram": ("_bucket", "_sum", "_count"),
    "Summary": ("_sum", "_count"),
    "Info": ("_info",),
}
_DECLARED = re.compile(r"prometheus_client\.(Counter|Gauge|Histogram|Summary|Info)\(\s*\"(\w+)\"")


def exposed_metric_names() -> frozenset[str]:
    """Every series name gfd's metrics endpoint declares (read from the source of
    gfd/metrics, as prometheus_client exposes them: a counter with ``_total``, a
    histogram's buckets, sum and count), plus :data:`ISSUE_43_METRICS`."""
    names: set[str] = set(ISSUE_43_METRICS)
    for source in sorted((REPO_ROOT / "gfd" / "metrics").glob("*.py")):
        for kind, name in _DECLARED.findall(source.read_text(encoding="utf-8")):
            base = name.removesuffix("_total") if kind == "Counter" else name
            names.update(base + suffix for suffix in _EXPOSED[kind])
    return frozenset(names)


def generator() -> ModuleType:
    """scripts/dashboard.py as a module (it is a script, not a package of gfd's)."""
    spec = importlib.util.spec_from_file_location("gfd_dashboard_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(DASHBOARD_FILES[0].read_text(encoding="utf-8"))
    return board


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref: str
    expr: str


def panel_queries(board: dict[str, Any] | None = None) -> list[PanelQuery]:
    """Every query of every panel (rows hold none), in the dashboard's order."""
    board = committed() if board is None else board
    return [
        PanelQuery(panel["title"], target["refId"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def concrete(expr: str, *, node: str = ".*", range_: str = "1h") -> str:
    """``expr`` as Grafana sends it to Prometheus: ``$node`` with every node selected (the
    variable's all value) and ``$__range`` the dashboard's time range."""
    return expr.replace("$node", node).replace("$__range", range_)


#: PromQL's functions and aggregations that a dashboard query may call.
FUNCTIONS = frozenset(
    {
        "abs", "absent", "avg", "avg_over_time", "ceil", "changes", "clamp_max", "clamp_min",
        "count", "count_values", "delta", "deriv", "floor", "group", "histogram_quantile",
        "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time",
        "max", "max_over_time", "min", "min_over_time", "quantile", "rate", "resets",
        "round", "scalar", "sort", "sort_desc", "sum", "sum_over_time", "time", "timestamp",
        "topk", "bottomk", "vector",
    }
)  # fmt: skip
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without"})
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')'
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<number>[0-9]+(?:\.[0-9]*)?(?:[smhdwy]|ms)?)"
    r"|(?P<open>[({\[])|(?P<close>[)}\]])"
    r"|(?P<op>==|!=|=~|!~|<=|>=|[-+*/%^<>=,])"
    r"|(?P<space>\s+)"
)
_PAIRS = {")": "(", "}": "{", "]": "["}


def promql_problems(expr: str, known_metrics: frozenset[str]) -> list[str]:
    """What is wrong with ``expr`` (after :func:`concrete`), syntactically: an unbalanced
    bracket, an unclosed string, a character PromQL has no use for, a function PromQL does
    not have, a metric gfd does not expose. An empty list: nothing found."""
    problems: list[str] = []
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            problems.append(f"unexpected {expr[position : position + 10]!r} at {position}")
            return problems
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group()))
        position = match.end()
    stack: list[str] = []
    label_list_next = False
    for index, (kind, text) in enumerate(tokens):
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "open":
            # Inside {...} and [...], and in the list after by/on/..., names are labels.
            stack.append("labels" if label_list_next else text)
            label_list_next = False
        elif kind == "close":
            opened = stack.pop() if stack else None
            wanted = _PAIRS[text]
            if opened not in (wanted, "labels" if wanted == "(" else None):
                problems.append(f"{text!r} closes {opened!r}")
        elif kind == "ident":
            if stack and stack[-1] in ("{", "[", "labels"):
                continue
            if text in _LABEL_LISTS:
                label_list_next = following == "("
            elif text in _KEYWORDS:
                continue
            elif following == "(" or following in ("by", "without"):
                if text not in FUNCTIONS:
                    problems.append(f"unknown function {text}")
            elif text not in known_metrics:
                problems.append(f"metric {text} is not one gfd exposes")
    if stack:
        problems.append(f"unclosed {stack}")
    return problems
