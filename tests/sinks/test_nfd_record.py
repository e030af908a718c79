"""The NFD model the feature-file tests use (``tests/nfd_rules.py``) held to NFD's record.

``tests/records/nfd/local-source.json`` holds, per features.d case, the labels NFD put on
the Node (``tests/records/nfd_cases.py`` has the cases and the runner that re-records them
from the real pipeline). gfd's own NFD constants are held to what was observed there too.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gfd.sinks.featurefile import EVENT_SPACING, NFD_MAX_FILE_BYTES
from tests.nfd_rules import read_features_dir
from tests.records.nfd_cases import CASES, RECORD, RERECORD, FeatureCase
from tests.records.store import load_record, recorded_case

NOW = dt.datetime.now(dt.UTC)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_the_model_reads_each_case_as_nfd_did(case: FeatureCase, tmp_path: Path) -> None:
    recorded = recorded_case(RECORD, case.case_id, case.inputs_hash, RERECORD)
    case.write(tmp_path)
    assert read_features_dir(tmp_path, NOW) == recorded["labels"], case.about


def test_every_recorded_case_is_still_a_case() -> None:
    assert set(load_record(RECORD).cases) == {c.case_id for c in CASES}


def test_gfd_s_file_limit_is_nfd_s() -> None:
    assert load_record(RECORD).notes["observed"]["max_file_bytes"] == NFD_MAX_FILE_BYTES


def test_gfd_spaces_its_renames_wider_than_nfd_s_event_window() -> None:
    """The worker drops file events that come within its window of the previous one: gfd's
    spacing must exceed the window that was observed, or a change waits a whole interval."""
    assert load_record(RECORD).notes["observed"]["file_event_window_s"] < EVENT_SPACING
