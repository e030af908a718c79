"""The API server emulator held to kube-apiserver's recorded answers.

The request script of :mod:`tests.emulator.record_answers` runs against the emulator, and
every answer (status, reason, details, message with names substituted, resourceVersion
movement) must equal the record in ``tests/records/kube-apiserver/answers.json``. A step
whose inputs changed since the record was made fails, saying to re-record. The runner
itself is run here as a developer runs it, into a temporary file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulator import record_answers
from tests.records.store import RecordError, inputs_sha256, load_record, recorded_case

CASES = [step.case for step in record_answers.SCRIPT]


@pytest.fixture(scope="module")
def emulated() -> Iterator[dict[str, dict[str, Any]]]:
    emulator, target = record_answers.emulator_target()
    try:
        yield record_answers.run_script(target)
    finally:
        emulator.stop()


def recorded(case: str) -> dict[str, Any]:
    index = CASES.index(case)
    digest = inputs_sha256(record_answers.case_inputs(index))
    try:
        return recorded_case(record_answers.RECORD, case, digest, record_answers.RERECORD)
    except RecordError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.mark.parametrize("case", CASES)
def test_the_emulator_answers_as_kube_apiserver(
    emulated: dict[str, dict[str, Any]], case: str
) -> None:
    expected = recorded(case)
    assert emulated[case] == expected["answer"], (
        f"{case} ({expected['what']}): the emulator differs from kube-apiserver's recorded "
        f"answer (source: {expected.get('source', 'captured')})"
    )


def test_the_record_names_its_program_and_covers_the_whole_script() -> None:
    record = load_record(record_answers.RECORD)
    assert record.program == "kube-apiserver"
    assert record.version.startswith("v1.36")
    assert set(record.cases) == set(CASES)
    # A record derived from the source says so, and each case names its source.
    if "derived" in record.version:
        assert "NOT CAPTURED" in record.notes["how"]
        assert all(case.get("source") for case in record.cases.values())


def test_a_changed_request_script_asks_for_a_re_record(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = list(record_answers.SCRIPT)
    index = CASES.index("stale-precondition-merge-patch")
    changed[index] = record_answers.Step(
        "stale-precondition-merge-patch", "changed", "PATCH", record_answers.NODE, {}, "x"
    )
    monkeypatch.setattr(record_answers, "SCRIPT", tuple(changed))
    digest = inputs_sha256(record_answers.case_inputs(index))
    with pytest.raises(RecordError, match="inputs changed since the record.*Re-record"):
        recorded_case(
            record_answers.RECORD,
            "stale-precondition-merge-patch",
            digest,
            record_answers.RERECORD,
        )


def test_the_runner_records_the_emulator_as_a_developer_would(tmp_path: Path) -> None:
    out = tmp_path / "answers.json"
    assert record_answers.main(["--emulator", "--out", str(out)]) == 0
    written = load_record(out)
    committed = load_record(record_answers.RECORD)
    assert written.program == "kube-apiserver"
    assert set(written.cases) == set(committed.cases)
    for case, entry in written.cases.items():
        assert entry["inputs_sha256"] == committed.cases[case]["inputs_sha256"], case
        assert entry["answer"] == committed.cases[case]["answer"], case
