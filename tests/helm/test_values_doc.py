"""docs/deploy.md against the chart: the values table is values.yaml's, every value is
documented and known to the schema, and the migration table's "same" names exist."""

from __future__ import annotations

import json
import re

import yaml

from tests.deploy.manifests import REPO_ROOT
from tests.helm.chart import CHART_DIR
from tests.helm.values_doc import VALUES_FILE, docs_table, documented, leaves, table

DOCS = REPO_ROOT / "docs" / "deploy.md"


def values_text() -> str:
    return VALUES_FILE.read_text(encoding="utf-8")


def test_docs_values_table_is_values_yaml() -> None:
    assert docs_table(DOCS) == table(values_text()), (
        "docs/deploy.md's values table is stale: paste `python -m tests.helm.values_doc`"
    )


def test_the_table_follows_a_changed_default() -> None:
    # The negative control of the test above: the table shows the defaults it is made from.
    changed = values_text().replace("sleepInterval: 60s", "sleepInterval: 90s")
    assert changed != values_text()
    assert table(changed) != table(values_text())
    assert '| `gfd.sleepInterval` | `"90s"` |' in table(changed)


def test_every_value_is_documented() -> None:
    rows = documented(values_text())
    for leaf in leaves(yaml.safe_load(values_text())):
        parts = leaf.split(".")
        assert any(".".join(parts[:n]) in rows for n in range(1, len(parts) + 1)), (
            f"{leaf} has no '# --' comment in values.yaml"
        )


def _schema_paths(schema: dict[str, object], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            paths.add(prefix + name)
            if isinstance(sub, dict):
                paths |= _schema_paths(sub, f"{prefix}{name}.")
    return paths


def test_schema_and_values_name_the_same_values() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    declared = _schema_paths(schema)
    values = yaml.safe_load(values_text())
    for leaf in leaves(values):
        parts = leaf.split(".")
        # A leaf is declared itself, or lies inside a free-form object the schema declares.
        assert any(".".join(parts[:n]) in declared for n in range(len(parts), 0, -1)), leaf
    for path in declared - {"global"}:  # Helm's own: a parent chart's shared values
        node = values
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f"schema value {path} not in values"
            node = node[part]


def _migration_rows() -> list[tuple[str, str]]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### Migrating from the nvidia-device-plugin chart", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows.append((cells[0], cells[1]))
    return rows


def test_migration_table_same_names_exist_in_values() -> None:
    values = yaml.safe_load(values_text())
    same = [names for names, where in _migration_rows() if where.startswith("same")]
    assert len(same) >= 10
    for names in same:
        for name in re.findall(r"`([A-Za-z.]+)`", names):
            node = values
            for part in name.split("."):
                assert part in node, f"migration table: {name} is 'same' but not a value"
                node = node[part]


def test_install_one_liner_is_first() -> None:
    text = DOCS.read_text(encoding="utf-8")
    first_block = text.split("```", 2)[1]
    assert first_block.strip().startswith("helm install gfd deploy/helm/gfd ")
