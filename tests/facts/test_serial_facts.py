"""A GPU's board ``serial`` in the facts' YAML/JSON form: written beside the UUID only when
NVML gave one, read back as written, absent or null as none, and a value NVML could not
have returned (nvml.h: alphanumeric, at most ``NVML_DEVICE_SERIAL_BUFFER_SIZE`` 30 bytes
with the NUL) refused by file and field path."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.facts import FactsError, dump_facts, facts_from_dict, facts_to_dict, parse_document
from tests.factories import make_facts, make_gpu

#: The real H200's answer had 13 digits (``../shared/reference/real-gpu-h200-*``,
#: ``unprivileged-nvml.json``, replaced there by zeros).
SERIAL = "0123456102000"


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_serial_round_trips(fmt: str) -> None:
    facts = make_facts([make_gpu(0, serial=SERIAL), make_gpu(1)])
    text = dump_facts(facts, fmt)  # type: ignore[arg-type]
    assert facts_from_dict(parse_document(text, "node.yaml"), "node.yaml") == facts


def test_written_right_after_the_uuid_and_only_when_reported() -> None:
    facts = make_facts([make_gpu(0, serial=SERIAL), make_gpu(1)])
    plain = parse_document(dump_facts(facts, "json"), "node.json")
    assert list(plain["gpus"][0])[:5] == ["index", "name", "uuid", "serial", "bus_id"]
    assert plain["gpus"][0]["serial"] == SERIAL
    # A GPU without one dumps as before the field existed.
    assert "serial" not in plain["gpus"][1]
    without = make_facts([make_gpu(0)])
    assert "serial" not in dump_facts(without, "yaml")


def test_absent_or_null_is_none() -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    del gpu["serial"]
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].serial is None
    gpu["serial"] = None
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].serial is None


@pytest.mark.parametrize(
    ("serial", "problem"),
    [
        ("", "is not a board serial"),
        ("1650 0000 01", "is not a board serial"),
        ("1" * 30, "is not a board serial"),
        ("séríal", "is not a board serial"),
        (1650000001, "expected a string"),
    ],
)
def test_a_serial_nvml_could_not_return_is_refused(serial: Any, problem: str) -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    gpu["serial"] = serial
    with pytest.raises(FactsError) as refused:
        facts_from_dict({"gpus": [gpu]}, "node.yaml")
    message = str(refused.value)
    assert message.startswith("node.yaml: gpus[0].serial")
    assert problem in message


def test_the_longest_serial_nvml_returns_is_accepted() -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    gpu["serial"] = "A" * 29
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].serial == "A" * 29
