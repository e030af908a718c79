"""The API server emulator held to kube-apiserver's recorded answers.

The request script of :mod:`tests.emulator.record_answers` runs against the emulator, and
every answer (status, reason, details, message with names substituted, resourceVersion
movement) must equal the record in ``tests/records/kube-apiserver/answers.json``, captured
from a running kube-apiserver v1.36.2. A step whose inputs changed since the record was made
fails, saying to re-record. The runner itself is run here as a developer runs it: against
the emulator it compares with the record, and into a temporary file it records.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulator import record_answers
from tests.records.store import (
    Record,
    RecordError,
    inputs_sha256,
    load_record,
    recorded_case,
    write_record,
)

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
        f"{case} ({expected['what']}): the emulator differs from kube-apiserver's captured "
        f"answer (note: {expected.get('note', 'none')})"
    )


def test_the_record_is_a_capture_of_a_named_server_covering_the_whole_script() -> None:
    record = load_record(record_answers.RECORD)
    assert record.program == "kube-apiserver"
    # An exact release, as the server reported it: not a range or a derivation.
    assert record.version == "v1.36.2"
    assert record.notes["how"].startswith("CAPTURED")
    assert set(record.cases) == set(CASES)
    # Explanations are notes beside the captured answer, never a case's source.
    assert all("source" not in case for case in record.cases.values())
    assert all(
        set(case) <= {"answer", "inputs_sha256", "what", "note"} for case in record.cases.values()
    )


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
    # The emulator's run is no capture: it carries no notes of the record.
    assert all("note" not in entry for entry in written.cases.values())


def test_the_runner_compares_the_emulator_with_the_record_in_every_case(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = record_answers.RECORD.read_bytes()
    assert record_answers.main(["--emulator"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{len(CASES)} of {len(CASES)} answers equal the record")
    assert "kube-apiserver v1.36.2" in out
    assert record_answers.RECORD.read_bytes() == before, "--emulator wrote over the record"


def test_the_comparison_names_each_case_that_differs() -> None:
    committed = load_record(record_answers.RECORD)
    answers = {case: entry["answer"] for case, entry in committed.cases.items()}
    answers["unauthenticated"] = {"status": 403}
    found = record_answers.differences(answers, committed)
    assert list(found) == ["unauthenticated"]
    assert '"status": 403' in found["unauthenticated"]


def capture_of(answers: dict[str, dict[str, Any]], notes: dict[str, str]) -> Record:
    return record_answers.record_of(answers, version="v1.36.2", how="test", notes=notes)


def test_a_re_record_keeps_a_note_only_while_its_answer_is_unchanged(tmp_path: Path) -> None:
    committed = load_record(record_answers.RECORD)
    answers = {case: entry["answer"] for case, entry in committed.cases.items()}
    notes = {"unauthenticated": "why 401", "get-missing-node": "why 404"}
    previous = capture_of(answers, notes)
    changed = {**answers, "get-missing-node": {"status": 404}}
    assert record_answers.kept_notes(previous, changed) == {"unauthenticated": "why 401"}
    # Written and read back as a file, the notes are per case, beside the answer.
    path = tmp_path / "answers.json"
    write_record(path, capture_of(changed, record_answers.kept_notes(previous, changed)))
    cases = json.loads(path.read_text())["cases"]
    assert cases["unauthenticated"]["note"] == "why 401"
    assert "note" not in cases["get-missing-node"]
