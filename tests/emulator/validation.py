"""Object metadata validation as the API server does it (apimachinery's rules).

Owns the label and annotation checks that make the emulator answer 422: label keys
(optional DNS-1123 subdomain prefix, 1 to 63 character name), label values (0 to 63
characters), annotation keys (same rules as label keys) and the 256 KiB limit on all
annotations of one object. Each problem is a :class:`Cause` like the ``causes`` of a
Kubernetes ``Status``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ANNOTATIONS_TOTAL_LIMIT = 256 * 1024

NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
    "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
PREFIX_MESSAGE = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character"
)
VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)


def go_quote(value: object) -> str:
    """A value as the API server's messages print it (Go's %q: double-quoted, escaped)."""
    return json.dumps(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Cause:
    """One validation failure: the field path, the bad value and why."""

    field: str
    value: str
    message: str
    reason: str = "FieldValueInvalid"

    def to_status_cause(self) -> dict[str, str]:
        return {
            "reason": self.reason,
            "message": f"Invalid value: {go_quote(self.value)}: {self.message}",
            "field": self.field,
        }


def qualified_name_problems(key: str) -> list[str]:
    """Problems of a label or annotation key; empty when it is valid."""
    problems: list[str] = []
    parts = key.split("/")
    if len(parts) > 2:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with "
            "an optional DNS subdomain prefix and '/'"
        ]
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            problems.append("prefix part must be no more than 253 characters")
        elif not DNS1123_SUBDOMAIN.match(prefix):
            problems.append(PREFIX_MESSAGE)
    else:
        name = parts[0]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if name and not QUALIFIED_NAME.match(name):
        problems.append(NAME_MESSAGE)
    return problems


def label_value_problems(value: str) -> list[str]:
    problems: list[str] = []
    if len(value) > 63:
        problems.append("must be no more than 63 characters")
    if not LABEL_VALUE.match(value):
        problems.append(VALUE_MESSAGE)
    return problems


def validate_metadata(metadata: Mapping[str, Any]) -> list[Cause]:
    """Every label/annotation problem of an object's metadata."""
    causes: list[Cause] = []
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    for field_name, entries in (("labels", labels), ("annotations", annotations)):
        if not isinstance(entries, Mapping):
            causes.append(Cause(f"metadata.{field_name}", str(entries), "must be a map"))
            continue
        for key, value in entries.items():
            if not isinstance(value, str):
                causes.append(Cause(f"metadata.{field_name}", str(key), "value must be a string"))
                continue
            for problem in qualified_name_problems(key):
                causes.append(Cause(f"metadata.{field_name}", key, problem))
            if field_name == "labels":
                for problem in label_value_problems(value):
                    causes.append(Cause(f"metadata.{field_name}", value, problem))
    if isinstance(annotations, Mapping):
        total = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
        if total > ANNOTATIONS_TOTAL_LIMIT:
            causes.append(
                Cause(
                    "metadata.annotations",
                    f"{total} bytes",
                    f"Too long: must have at most {ANNOTATIONS_TOTAL_LIMIT} bytes",
                    reason="FieldValueTooLong",
                )
            )
    return causes
