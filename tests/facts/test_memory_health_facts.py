"""A GPU's ``memory_health`` in the facts' YAML/JSON form: written only when NVML reported
some, read back as written, absent or null as none, and every mistake named by file and
field path."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.facts import (
    FactsError,
    MemoryHealth,
    RemappedRows,
    RetiredPages,
    dump_facts,
    facts_from_dict,
    facts_to_dict,
    parse_document,
)
from tests.factories import make_facts, make_gpu

HOPPER = MemoryHealth(
    ecc_enabled=True,
    remapped_rows=RemappedRows(correctable=2, uncorrectable=1, pending=True, failure=False),
    retired_pages=None,
    volatile_uncorrected_ecc=3,
)
VOLTA = MemoryHealth(
    ecc_enabled=True,
    retired_pages=RetiredPages(single_bit=4, double_bit=0, pending=True),
    volatile_uncorrected_ecc=0,
)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_memory_health_round_trips(fmt: str) -> None:
    facts = make_facts([make_gpu(0, memory_health=HOPPER), make_gpu(1, memory_health=VOLTA)])
    text = dump_facts(facts, fmt)  # type: ignore[arg-type]
    assert facts_from_dict(parse_document(text, "node.yaml"), "node.yaml") == facts


def test_a_gpu_that_reported_none_is_written_as_before_the_field_existed() -> None:
    facts = make_facts([make_gpu(0), make_gpu(1, memory_health=HOPPER)])
    plain = parse_document(dump_facts(facts, "json"), "node.json")
    assert "memory_health" not in plain["gpus"][0]
    assert plain["gpus"][1]["memory_health"]["remapped_rows"]["pending"] is True
    # The plain-data form keeps every field.
    assert facts_to_dict(facts)["gpus"][0]["memory_health"] is None


def test_absent_or_null_is_none() -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    del gpu["memory_health"]
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].memory_health is None
    gpu["memory_health"] = None
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].memory_health is None
    # Each part may be absent on its own: NVML did not report it.
    gpu["memory_health"] = {"ecc_enabled": False}
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].memory_health == MemoryHealth(False)


@pytest.mark.parametrize(
    ("health", "path", "problem"),
    [
        ({"ecc_enabled": "yes"}, "memory_health.ecc_enabled", "expected a boolean"),
        ({"remapped_rows": {"correctable": 0}}, "remapped_rows.uncorrectable", "required"),
        (
            {
                "remapped_rows": {
                    "correctable": -1,
                    "uncorrectable": 0,
                    "pending": False,
                    "failure": False,
                }
            },
            "remapped_rows.correctable",
            "is not a 32-bit count",
        ),
        (
            {"retired_pages": {"single_bit": 2**32, "double_bit": 0, "pending": False}},
            "retired_pages.single_bit",
            "is not a 32-bit count",
        ),
        ({"volatile_uncorrected_ecc": 2**64}, "volatile_uncorrected_ecc", "is not a 64-bit count"),
        ({"volatile_uncorrected_ecc": 1.5}, "volatile_uncorrected_ecc", "expected an integer"),
        ({"ecc": True}, "memory_health.ecc", "unknown field"),
        ([], "memory_health", "expected a mapping"),
    ],
)
def test_mistakes_name_the_file_and_field(health: Any, path: str, problem: str) -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    gpu["memory_health"] = health
    with pytest.raises(FactsError) as refused:
        facts_from_dict({"gpus": [gpu]}, "node.yaml")
    message = str(refused.value)
    assert message.startswith("node.yaml: gpus[0].memory_health")
    assert path in message and problem in message
