"""What a write to a Node's metadata sets and removes, whatever its patch type.

The node sink writes JSON merge patches and, once a write has lost a race, JSON Patches
guarded by ``test`` operations (docs/sinks.md). Tests that judge every write the server
saw ("gfd only set its own keys, only removed keys it owned") read both through
:func:`write_effects`, so they hold whichever form a write took.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass
class WriteEffects:
    """Keys a write sets (to the value) and removes, per metadata map."""

    set: dict[str, dict[str, str]] = field(
        default_factory=lambda: {"labels": {}, "annotations": {}}
    )
    removed: dict[str, set[str]] = field(
        default_factory=lambda: {"labels": set(), "annotations": set()}
    )
    #: The JSON Patch ``test`` operations, as (pointer, value).
    tests: list[tuple[str, Any]] = field(default_factory=list)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def write_effects(body: Any, content_type: str | None) -> WriteEffects:
    """Read a PATCH body of the node (``metadata.labels``/``annotations`` only)."""
    effects = WriteEffects()
    if content_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        metadata = (body or {}).get("metadata") or {}
        for name in ("labels", "annotations"):
            entries: Mapping[str, Any] = metadata.get(name) or {}
            for key, value in entries.items():
                if value is None:
                    effects.removed[name].add(key)
                else:
                    effects.set[name][key] = value
        return effects
    assert content_type == JSON_PATCH, f"unexpected patch type {content_type!r}"
    assert isinstance(body, list), body
    for operation in body:
        path: str = operation["path"]
        if operation["op"] == "test":
            effects.tests.append((path, operation.get("value")))
            continue
        parts = [_unescape(part) for part in path.split("/")[1:]]
        assert parts[0] == "metadata" and parts[1] in ("labels", "annotations"), operation
        name = parts[1]
        if operation["op"] in ("add", "replace"):
            if len(parts) == 2:
                effects.set[name].update(operation["value"])
            else:
                effects.set[name][parts[2]] = operation["value"]
        elif operation["op"] == "remove":
            assert len(parts) == 3, f"a whole map removed: {operation}"
            effects.removed[name].add(parts[2])
        else:
            raise AssertionError(f"unexpected JSON Patch operation {operation}")
    return effects
