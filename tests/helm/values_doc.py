"""The values table of docs/deploy.md, made from deploy/helm/gfd/values.yaml.

Each value in values.yaml carries a ``# -- meaning`` comment on the line above it; a
value whose comment sits on a mapping stands for the whole mapping. ``python -m
tests.helm.values_doc`` prints the table to paste between the markers in the docs; a test
keeps the two equal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.helm.chart import CHART_DIR

VALUES_FILE = CHART_DIR / "values.yaml"
BEGIN = "<!-- helm-values:begin (generated: python -m tests.helm.values_doc) -->"
END = "<!-- helm-values:end -->"
_KEY = re.compile(r"^( *)([A-Za-z][A-Za-z0-9]*):")
_MEANING = re.compile(r"^ *# -- (.+)$")
#: A default longer than this is left to values.yaml itself.
_LONGEST_DEFAULT = 60


def documented(text: str) -> dict[str, str]:
    """Dotted value path -> meaning, in file order."""
    rows: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: str | None = None
    for line in text.splitlines():
        meaning = _MEANING.match(line)
        if meaning:
            pending = meaning.group(1).strip()
            continue
        key = _KEY.match(line)
        if not key:
            continue
        indent = len(key.group(1))
        stack = [(i, k) for i, k in stack if i < indent] + [(indent, key.group(2))]
        if pending is not None:
            rows[".".join(k for _, k in stack)] = pending
            pending = None
    return rows


def value_at(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node[part]
    return node


def leaves(values: Any, prefix: str = "") -> list[str]:
    """Paths of every scalar, list and empty mapping."""
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def _default(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return f"`{text}`" if len(text) <= _LONGEST_DEFAULT else "see `values.yaml`"


def table(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    lines = ["| value | default | meaning |", "|---|---|---|"]
    for path, meaning in documented(values_text).items():
        cell = meaning.replace("|", "\\|")
        lines.append(f"| `{path}` | {_default(value_at(values, path))} | {cell} |")
    return "\n".join(lines)


def docs_table(docs: Path) -> str:
    text = docs.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip()


if __name__ == "__main__":
    print(table(VALUES_FILE.read_text(encoding="utf-8")))
