"""gfd's alert rules as the tests render them, and where Prometheus and promtool are.

The rules are the kustomize component's (``deploy/components/prometheus-rule``, the one
source the chart's copy is written from). :func:`write_rules` writes them as a Prometheus
rule file, with every ``for:`` shortened when a live test cannot wait minutes.

Prometheus and promtool are the oracle ``prometheus`` (tests/oracles.py): the folder in
``PROMETHEUS_DIR``, else the programs on PATH (Debian's ``prometheus`` package puts both in
/usr/bin; ``.ci/run`` installs it). Without them the tests skip with one line, and fail in
CI (``GFD_REQUIRE_ORACLES=1``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.helm.chart_rules import rule_groups
from tests.oracles import ORACLES, oracle_path


def program(name: str) -> Path:
    """``promtool`` or ``prometheus``: skips (or in CI fails) the calling test without it."""
    if not os.environ.get(ORACLES["prometheus"].env):
        found = shutil.which(name)
        if found is not None and shutil.which("promtool") is not None:
            return Path(found)
    folder = oracle_path("prometheus")
    path = folder / name
    if not path.is_file():
        import pytest

        pytest.fail(f"{folder} has promtool but no {name}", pytrace=False)
    return path


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups()["groups"] for rule in group["rules"]]


def write_rules(path: Path, *, for_: str | None = None) -> Path:
    """The rule file, every ``for:`` set to ``for_`` when given."""
    groups = rule_groups()
    if for_ is not None:
        for group in groups["groups"]:
            for rule in group["rules"]:
                rule["for"] = for_
    path.write_text(yaml.safe_dump(groups, sort_keys=False), "utf-8")
    return path
