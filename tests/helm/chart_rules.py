"""The chart's alert rules, written from deploy/'s: ``python -m tests.helm.chart_rules``.

The one source of gfd's alerts is the kustomize component's PrometheusRule,
``deploy/components/prometheus-rule/prometheus-rule.yaml``. The chart reads its rule groups
from ``deploy/helm/gfd/files/prometheus-rules.yaml`` (with ``.Files.Get``, so the alerts'
own ``{{ $labels.node }}`` templates never meet Helm's), which this module writes from the
component's ``spec``. After a change to the rules in deploy/, run it and commit both; a test
fails while the chart's copy differs from what it would write, and tests/helm/test_chart.py
renders both and compares them field for field.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from tests.deploy.manifests import DEPLOY_DIR
from tests.helm.chart import CHART_DIR

SOURCE = DEPLOY_DIR / "components" / "prometheus-rule" / "prometheus-rule.yaml"
TARGET = CHART_DIR / "files" / "prometheus-rules.yaml"


def rule_groups() -> dict[str, Any]:
    """The component's ``spec``: ``{"groups": [...]}``, a Prometheus rule file."""
    document = yaml.safe_load(SOURCE.read_text("utf-8"))
    return {"groups": document["spec"]["groups"]}


def render() -> str:
    relative = SOURCE.relative_to(DEPLOY_DIR.parent)
    return (
        f"# Written from {relative}\n"
        "# by `python -m tests.helm.chart_rules`: edit that file, then run it.\n"
        + yaml.safe_dump(rule_groups(), sort_keys=False, width=100, allow_unicode=True)
    )


def stale() -> bool:
    return not TARGET.exists() or TARGET.read_text("utf-8") != render()


def main() -> int:
    TARGET.write_text(render(), "utf-8")
    print(f"wrote {TARGET.relative_to(DEPLOY_DIR.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
