"""The doctor's links: one module and one registry line each, and a section of
docs/doctor.md each, under the same names."""

from __future__ import annotations

import re
from pathlib import Path

import gfd.doctor.checks
from gfd.doctor import DOCTOR_CHECKS

CHECKS_DIR = Path(gfd.doctor.checks.__file__).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "doctor.md"


def test_every_check_module_is_registered_once() -> None:
    modules = {path.stem for path in CHECKS_DIR.glob("*.py") if path.stem != "__init__"}
    registered = [check.examine.__module__.rsplit(".", 1)[1] for check in DOCTOR_CHECKS]
    assert sorted(registered) == sorted(modules)
    names = [check.name for check in DOCTOR_CHECKS]
    assert len(set(names)) == len(names)


def test_the_doc_has_a_section_per_check_in_chain_order() -> None:
    text = DOC.read_text(encoding="utf-8")
    links = text.split("## The links", 1)[1].split("\n## ", 1)[0]
    sections = re.findall(r"^### (\S+)$", links, flags=re.MULTILINE)
    assert sections == [check.name for check in DOCTOR_CHECKS]
