"""The facts as text: YAML or JSON out, a bounded file and a parsed document in.

This module owns the writing of facts (:func:`dump_facts`: deterministic, keys in
declaration order, what ``gfd facts`` derives appended under :data:`DERIVED_KEY`; and
:func:`save_facts_text`, a capture file written whole or not at all) and the
first steps of reading them: a facts or profile file's text, bounded
(:func:`read_facts_text`), and its YAML or JSON parsed with parser errors as
:class:`~gfd.base.errors.FactsError` with a line (:func:`parse_document`). Building facts from
the parsed document is :func:`gfd.facts.validate.facts_from_dict`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from gfd.base.errors import FactsError
from gfd.facts.model import NodeFacts

#: Top-level key under which ``gfd facts`` adds what it derives from the facts; never read back.
DERIVED_KEY = "derived"
#: GPU fields written only when NVML reported them: the facts of a machine that reports
#: none stay byte for byte what they were before the field existed (captures, and the
#: records keyed by a hash of them, stay valid); absent reads back as None.
WRITTEN_WHEN_REPORTED = ("serial", "pcie", "memory_health", "virtualization_mode")


def facts_to_dict(facts: NodeFacts) -> dict[str, Any]:
    """Plain-data form of facts (tuples become lists), keys in declaration order."""
    return _to_plain(facts)  # type: ignore[no-any-return]


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_plain(v) for v in value]
    return value


def dump_facts(
    facts: NodeFacts,
    fmt: Literal["yaml", "json"] = "yaml",
    *,
    derived: Mapping[str, Any] | None = None,
) -> str:
    """Serialise facts deterministically: equal facts give equal text. A GPU's
    :data:`WRITTEN_WHEN_REPORTED` fields are left out where None.

    ``derived`` (plain data computed from the facts) is appended under ``derived:``
    for readers; loading ignores it.
    """
    plain = facts_to_dict(facts)
    for gpu in plain["gpus"]:
        for name in WRITTEN_WHEN_REPORTED:
            if gpu.get(name) is None:
                gpu.pop(name, None)
    if derived is not None:
        plain[DERIVED_KEY] = dict(derived)
    if fmt == "json":
        return json.dumps(plain, indent=2) + "\n"
    import yaml

    return str(yaml.safe_dump(plain, sort_keys=False, default_flow_style=None, width=100))


def save_facts_text(text: str, path: str | Path) -> None:
    """Write a capture to ``path`` whole or not at all (``gfd facts -o FILE``).

    The text goes to a temporary file beside ``path`` (a dot-name), synced, then renamed
    over it: a reader never sees half a capture, a failed write leaves ``path`` as it
    was, and a symbolic link at ``path`` is replaced, never written through.
    """
    import os
    import tempfile

    from gfd.base.errors import GfdError

    target = Path(path)
    try:
        fd, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
        )
    except OSError as exc:
        raise GfdError(
            f"facts file {target}: cannot create a file in {target.parent}: {exc.strerror or exc}"
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise GfdError(f"facts file {target}: cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_facts_text(path: str | Path) -> str:
    """The text of a facts (or profile) file, bounded to ``FACTS_FILE_LIMIT``; FactsError else."""
    from gfd.base.inputs import FACTS_FILE_LIMIT, InputRejected, read_bounded_text

    source = str(path)
    try:
        return read_bounded_text(path, FACTS_FILE_LIMIT)
    except OSError as exc:
        raise FactsError(source, "", f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise FactsError(source, "", f"not UTF-8 text: {exc.reason}") from exc
    except InputRejected as exc:
        raise FactsError(source, "", str(exc)) from exc


#: What an empty facts file is, and how to make a real one: ``gfd facts > FILE`` leaves
#: one behind when the read fails (the shell creates FILE before gfd runs).
EMPTY_FILE = (
    "empty file: not a facts capture; capture one with 'gfd facts -o FILE' on a GPU node "
    "(a 'gfd facts > FILE' that failed leaves such a file)"
)


def parse_document(text: str, source: str) -> Any:
    """Parse YAML (a superset of JSON), turning parser errors into FactsError with a line.

    A file with nothing but white space and comments is refused as :data:`EMPTY_FILE`."""
    import yaml

    if all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
        raise FactsError(source, "", EMPTY_FILE)

    try:
        # libyaml's safe loader when PyYAML was built with it: 8x faster on a profile.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise FactsError(source, line, f"not valid YAML/JSON: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise FactsError(source, "", f"not valid YAML/JSON: {exc}") from exc
