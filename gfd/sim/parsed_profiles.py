"""The bundled profiles, parsed ahead of time: one JSON twin per YAML profile.

A ``gfd --simulate`` run spent about 20 ms of its start-up on YAML (``docs/benchmarks.md``):
importing PyYAML (most of it compiling PyYAML's regular expressions, whether or not
libyaml parses) and building the document. The profiles are YAML because people write
them, with comments that say where each value comes from; the twins under
``profiles/parsed/`` are what :func:`json.loads` reads instead, in a fraction of that.

The YAML stays the source. Each twin records the length and CRC-32 of the YAML text it
was parsed from, and :func:`parsed_twin` answers only while the text is still that one:
an edited profile whose twin was not regenerated is parsed as YAML, as before, never
served stale; ``tests/sim/test_parsed_profiles.py`` fails until the twin is regenerated
(``make profiles``, which runs :func:`main`). A twin holds exactly what the YAML parses
to; a profile whose values JSON cannot carry (a YAML date, say) gets no twin and says so.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path
from typing import Any


class TwinRefused(ValueError):
    """A profile whose parsed document JSON cannot carry unchanged."""


def twin_path(profile: Path) -> Path:
    """Where the twin of the profile file ``profile`` lies."""
    return profile.parent / "parsed" / f"{profile.stem}.json"


def _fingerprint(text: str) -> dict[str, int]:
    encoded = text.encode("utf-8")
    return {"yaml_bytes": len(encoded), "yaml_crc32": zlib.crc32(encoded)}


def parsed_twin(profile: Path, text: str) -> Any | None:
    """The parsed document of ``profile`` (whose text is ``text``) from its twin; None
    when there is no twin, or it was parsed from another text, or it is unreadable."""
    try:
        twin = json.loads(twin_path(profile).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(twin, dict) or twin.get("source") != _fingerprint(text):
        return None
    return twin.get("document")


def render_twin(text: str, document: Any, source: str) -> str:
    """The twin of a profile whose text ``text`` parses to ``document``.

    Raises :class:`TwinRefused` when JSON would not give ``document`` back unchanged."""
    refusal = TwinRefused(
        f"{source}: parses to values JSON cannot carry unchanged (a date, a non-string "
        "key); write them as strings or plain numbers to give it a parsed twin"
    )
    try:
        rendered = json.dumps(
            {"source": _fingerprint(text), "document": document},
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise refusal from exc
    if json.loads(rendered)["document"] != document:
        raise refusal
    return rendered + "\n"


def write_twins(profiles_dir: Path) -> list[Path]:
    """Parse every ``*.yaml`` profile of ``profiles_dir`` and write its twin; the twins
    written. A twin whose profile is gone is removed."""
    from gfd.facts import parse_document, read_facts_text

    parsed_dir = profiles_dir / "parsed"
    parsed_dir.mkdir(exist_ok=True)
    written = []
    profiles = sorted(profiles_dir.glob("*.yaml"))
    for profile in profiles:
        text = read_facts_text(profile)
        rendered = render_twin(text, parse_document(text, str(profile)), str(profile))
        target = twin_path(profile)
        if not target.exists() or target.read_text(encoding="utf-8") != rendered:
            target.write_text(rendered, encoding="utf-8")
        written.append(target)
    for orphan in set(parsed_dir.glob("*.json")) - set(written):
        orphan.unlink()
    return written


def main() -> int:
    """``make profiles``: regenerate the bundled profiles' twins."""
    from gfd.base.errors import GfdError
    from gfd.sim import PROFILES_DIR

    try:
        written = write_twins(PROFILES_DIR)
    except (GfdError, TwinRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(written)} parsed twins in {PROFILES_DIR / 'parsed'}")
    return 0
