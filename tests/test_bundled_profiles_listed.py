"""Every list of the simulator's bundled profiles says what ``gfd/sim/profiles/`` holds.

The folder is the one source: a profile is bundled by adding its file there. ``gfd --help``
lists it from the folder; the README's list, docs/simulator.md's table and the count in
docs/compatibility.md are text, held to the folder here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gfd.cli import bundled_profiles
from gfd.sim import BUNDLED_PROFILES
from tests.conformance.test_differential import MIG_STRATEGIES, SHARING_CONFIGS

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILE_FILES = tuple(sorted(p.stem for p in (REPO_ROOT / "gfd/sim/profiles").glob("*.yaml")))


def _text(name: str) -> str:
    return (REPO_ROOT / name).read_text(encoding="utf-8")


def test_the_folder_holds_profiles_and_both_code_lists_are_it() -> None:
    assert len(PROFILE_FILES) >= 10
    assert bundled_profiles() == PROFILE_FILES
    assert BUNDLED_PROFILES == PROFILE_FILES


def test_gfd_help_lists_every_bundled_profile() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gfd", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    epilog = done.stdout.split("bundled profiles for --simulate PROFILE:", 1)[1]
    assert tuple(" ".join(epilog.split()).split(", ")) == PROFILE_FILES


def test_the_readme_lists_every_bundled_profile() -> None:
    (listed,) = re.findall(
        r"<!-- bundled-profiles:start -->(.*?)<!-- bundled-profiles:end -->",
        _text("README.md"),
        re.DOTALL,
    )
    assert tuple(re.findall(r"`([^`]+)`", listed)) == PROFILE_FILES


def test_the_simulator_doc_describes_every_bundled_profile() -> None:
    section = _text("docs/simulator.md").split("## Bundled profiles", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)
    assert sorted(rows) == list(PROFILE_FILES)


def test_the_compatibility_doc_counts_the_profiles_and_their_cases() -> None:
    text = " ".join(_text("docs/compatibility.md").split())
    (profiles,) = re.findall(r"every bundled simulator profile \((\d+)\)", text)
    assert int(profiles) == len(PROFILE_FILES)
    cases = len(PROFILE_FILES) * len(MIG_STRATEGIES) * len(SHARING_CONFIGS)
    assert f"That makes {cases} cases." in text
    assert f"Run on v0.20.0 of the reference: {cases} differential cases" in text
    assert re.search(rf"In the differential suite, \d+ of {cases} cases are identical", text)
