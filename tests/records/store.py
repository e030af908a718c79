"""Record files: what a third-party program showed, per case, with a hash of each case's inputs.

A record is one JSON file::

    {"program": ..., "version": ..., "recorded": "YYYY-MM-DD", "notes": {...},
     "cases": {case_id: {"inputs_sha256": ..., <what the program did>}}}

The header names the program and its exact version; ``notes`` says how the cases ran (plain
data, free-form). Each case carries the sha256 of everything that determined the program's
answer (:func:`inputs_sha256`); a replaying test recomputes it from the inputs it has now and
asks :func:`recorded_case`, which refuses a case whose inputs changed since it was recorded,
or that was never recorded, naming the command that re-records it. Any recorder (the
reference GFD, config-manager, kube-apiserver answers, NFD) writes with :func:`write_record`
and replays with :func:`load_record`.

Files are sorted JSON, one value per line, so a re-record reviews as a plain diff.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Where the records live, one folder per program.
RECORDS_DIR = Path(__file__).resolve().parent


class RecordError(Exception):
    """A case cannot be replayed: not recorded, or its inputs changed since."""


@dataclass(frozen=True)
class Record:
    program: str
    version: str
    #: The day it was recorded (ISO 8601).
    recorded: str
    cases: dict[str, dict[str, Any]]
    #: How the cases ran, and what a reader needs to judge them.
    notes: dict[str, Any] = field(default_factory=dict)


def inputs_sha256(inputs: Any) -> str:
    """The sha256 of plain data, over its canonical JSON (sorted keys, no spacing)."""
    canonical = json.dumps(inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted(v) for v in value]
    return value


def write_record(path: Path, record: Record, *, case_per_line: bool = False) -> None:
    """Write ``record`` to ``path``: header first, then the cases, every mapping sorted.

    ``case_per_line``: each case on one line of its own (compact JSON), for records of many
    cases with nested inputs, where one value per line would make a diff of thousands of
    lines; the file is the same JSON document either way."""
    document = {
        "program": record.program,
        "version": record.version,
        "recorded": record.recorded,
        "notes": _sorted(record.notes),
        "cases": _sorted(record.cases),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    if case_per_line:
        header = json.dumps(
            {k: v for k, v in document.items() if k != "cases"}, indent=1, ensure_ascii=False
        )
        lines = [
            f" {json.dumps(case_id, ensure_ascii=False)}: "
            + json.dumps(case, ensure_ascii=False, separators=(",", ":"))
            for case_id, case in document["cases"].items()
        ]
        text = header.removesuffix("\n}") + ',\n "cases": {\n' + ",\n".join(lines) + "\n }\n}\n"
        json.loads(text)  # the same document
    else:
        text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    load_record.cache_clear()


@functools.cache
def load_record(path: Path) -> Record:
    """The record in ``path`` (read once per process); RecordError if there is none."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"no record file {path}") from None
    return Record(
        program=document["program"],
        version=document["version"],
        recorded=document["recorded"],
        cases=document["cases"],
        notes=document.get("notes", {}),
    )


def _shown(path: Path) -> str:
    """``path`` relative to the project's root where it is inside it."""
    root = RECORDS_DIR.parents[1]
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def recorded_case(path: Path, case_id: str, inputs_hash: str, rerecord: str) -> dict[str, Any]:
    """What the record in ``path`` holds for ``case_id``, if its inputs are still ``inputs_hash``.

    ``rerecord`` is the command that re-records; every refusal names it.
    """
    try:
        record = load_record(path)
    except RecordError as error:
        raise RecordError(f"{error}; record it with: {rerecord}") from None
    case = record.cases.get(case_id)
    where = _shown(path)
    if case is None:
        raise RecordError(
            f"{case_id}: not in the record {where} ({record.program} {record.version}); "
            f"a new case needs a new record: {rerecord}"
        )
    if case.get("inputs_sha256") != inputs_hash:
        raise RecordError(
            f"{case_id}: the inputs changed since the record {where} was made "
            f"({record.program} {record.version}, {record.recorded}): recorded inputs "
            f"{case.get('inputs_sha256')}, now {inputs_hash}. Re-record with the program "
            f"built: {rerecord}"
        )
    return case
