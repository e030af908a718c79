"""The bundled profiles' parsed twins (:mod:`gfd.sim.parsed_profiles`).

A twin must give exactly what its YAML parses to, and only while the YAML is the text it
was parsed from: an edited profile is parsed as YAML until ``make profiles`` is run, and
this module fails meanwhile, saying so.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from gfd.facts import parse_document, read_facts_text
from gfd.sim import BUNDLED_PROFILES, PROFILES_DIR, load_profile
from gfd.sim.parsed_profiles import TwinRefused, parsed_twin, render_twin, twin_path, write_twins

REGENERATE = "its parsed twin is missing or stale: run 'make profiles'"


@pytest.mark.parametrize("name", BUNDLED_PROFILES)
def test_every_bundled_profile_has_a_current_twin_equal_to_its_yaml(name: str) -> None:
    profile = PROFILES_DIR / f"{name}.yaml"
    text = read_facts_text(profile)
    twin = parsed_twin(profile, text)
    assert twin is not None, f"{profile}: {REGENERATE}"
    assert twin == parse_document(text, str(profile)), f"{profile}: {REGENERATE}"


def test_no_twin_without_its_profile() -> None:
    twins = {path.stem for path in (PROFILES_DIR / "parsed").glob("*.json")}
    assert twins == set(BUNDLED_PROFILES), REGENERATE


def _profile_dir(tmp_path: Path) -> Path:
    """A copy of one bundled profile, with its twin written as ``make profiles`` would."""
    directory = tmp_path / "profiles"
    directory.mkdir()
    (directory / "t4-single.yaml").write_text(
        (PROFILES_DIR / "t4-single.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    assert write_twins(directory) == [directory / "parsed" / "t4-single.json"]
    return directory


def test_an_edited_profile_is_never_served_from_its_stale_twin(tmp_path: Path) -> None:
    profile = _profile_dir(tmp_path) / "t4-single.yaml"
    text = profile.read_text(encoding="utf-8")
    assert parsed_twin(profile, text) == parse_document(text, str(profile))
    edited = text.replace("machine_type:", "# a comment\nmachine_type:", 1)
    assert edited != text
    assert parsed_twin(profile, edited) is None
    # Same length, other bytes: the CRC tells them apart.
    swapped = text.replace("Tesla T4", "Tesla T5", 1)
    assert len(swapped) == len(text) and swapped != text
    assert parsed_twin(profile, swapped) is None


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"source": 1, "document": {}}'])
def test_an_unreadable_or_foreign_twin_is_ignored(tmp_path: Path, content: str) -> None:
    profile = _profile_dir(tmp_path) / "t4-single.yaml"
    twin_path(profile).write_text(content, encoding="utf-8")
    assert parsed_twin(profile, profile.read_text(encoding="utf-8")) is None


def test_a_profile_without_a_twin_is_parsed_as_yaml(tmp_path: Path) -> None:
    profile = _profile_dir(tmp_path) / "t4-single.yaml"
    twin_path(profile).unlink()
    assert parsed_twin(profile, profile.read_text(encoding="utf-8")) is None


def test_regenerating_removes_the_twin_of_a_removed_profile(tmp_path: Path) -> None:
    directory = _profile_dir(tmp_path)
    orphan = directory / "parsed" / "gone.json"
    orphan.write_text("{}", encoding="utf-8")
    write_twins(directory)
    assert not orphan.exists()


def test_a_document_json_cannot_carry_gets_no_twin() -> None:
    """YAML parses an unquoted date to a date: JSON would give back a string or fail."""
    with pytest.raises(TwinRefused, match="values JSON cannot carry"):
        render_twin("captured: 2026-12-04\n", {"captured": datetime.date(2026, 12, 4)}, "p.yaml")
    with pytest.raises(TwinRefused, match="values JSON cannot carry"):
        render_twin("1: one\n", {1: "one"}, "p.yaml")


def test_a_twin_is_deterministic_and_records_its_source() -> None:
    text = "machine_type: X\ngpus: []\n"
    rendered = render_twin(text, {"machine_type": "X", "gpus": []}, "p.yaml")
    assert rendered == render_twin(text, {"machine_type": "X", "gpus": []}, "p.yaml")
    twin = json.loads(rendered)
    assert twin["document"] == {"machine_type": "X", "gpus": []}
    assert twin["source"]["yaml_bytes"] == len(text.encode())


def test_a_bundled_profile_loads_the_same_from_its_twin_or_its_yaml() -> None:
    profile = PROFILES_DIR / "dgx-h100.yaml"
    from_twin = load_profile("dgx-h100")
    from_yaml = load_profile(str(profile.resolve()))  # a path, not a name: YAML always
    assert from_twin.facts == from_yaml.facts
