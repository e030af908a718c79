"""docs/config-file.md's example is complete, loads, and says the defaults it claims.

Each ``yaml`` block of the page is loaded through gfd's own reader
(:func:`gfd.config.load_config_file`, as ``--config-file`` loads it). Together the blocks
must hold exactly the keys the reader knows (:func:`gfd.config.file.config_keys`), so a
new key fails here until the page shows it; and the first block's flags, which the page
says are the defaults, must resolve to the settings of no config file at all.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gfd.config import Settings, load_config_file, resolve_settings
from gfd.config.file import config_keys
from tests.host import NOT_IN_A_POD

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config-file.md"
BLOCKS = re.findall(r"^```yaml\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.M | re.S)


def leaf_keys(node: Any, at: str, known: frozenset[str]) -> set[str]:
    """The dotted leaf keys of a config document, spelled as :func:`config_keys` spells them."""
    if not isinstance(node, Mapping):
        return {at}
    found: set[str] = set()
    for key, value in node.items():
        dotted = f"{at}.{key}" if at else str(key)
        if f"{dotted}.*" in known:
            found.add(f"{dotted}.*")
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for entry in value:
                found |= leaf_keys(entry, f"{dotted}[]", known)
        else:
            found |= leaf_keys(value, dotted, known)
    return found


def _written(tmp_path: Path, number: int) -> str:
    path = tmp_path / f"example-{number}.yaml"
    path.write_text(BLOCKS[number], encoding="utf-8")
    return str(path)


def test_every_example_loads_through_gfd_s_reader(tmp_path: Path) -> None:
    assert len(BLOCKS) == 2
    strategies = []
    for number in range(len(BLOCKS)):
        loaded = load_config_file(_written(tmp_path, number))
        assert loaded.sharing is not None
        strategies.append(loaded.sharing.strategy)
    assert strategies == ["time-slicing", "mps"]


def test_the_examples_hold_every_key_the_reader_knows_and_no_other() -> None:
    known = config_keys()
    shown: set[str] = set()
    for block in BLOCKS:
        shown |= leaf_keys(yaml.safe_load(block), "", known)
    assert sorted(known - shown) == [], "keys gfd reads that docs/config-file.md does not show"
    assert sorted(shown - known) == [], "keys docs/config-file.md shows that gfd does not read"


def test_the_complete_example_s_flags_are_the_defaults(tmp_path: Path) -> None:
    defaults = resolve_settings({}, {}, host=NOT_IN_A_POD)
    node = dataclasses.replace(defaults, host=Settings().host)
    assert node == Settings(), "defaults must not depend on this machine"
    path = _written(tmp_path, 0)
    configured = resolve_settings({"config_file": path}, {}, host=NOT_IN_A_POD)
    differ = {
        field.name
        for field in dataclasses.fields(Settings)
        if getattr(configured, field.name) != getattr(defaults, field.name)
    }
    assert differ == {"config_file", "sharing"}
