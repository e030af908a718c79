"""A GPU's ``pcie`` link in the facts' YAML/JSON form: written only when NVML reported
some of it, read back as written, absent or null as none, every mistake named by file
and field path; and what the link could reach, as NVML's documentation defines it."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.facts import (
    FactsError,
    PcieLink,
    dump_facts,
    facts_from_dict,
    facts_to_dict,
    parse_document,
)
from tests.factories import make_facts, make_gpu

#: The real H200's answers (../shared/reference/real-gpu-h200-580.159.04-2026-12-04/pcie.json).
H200 = PcieLink(
    current_generation=5,
    current_width=16,
    max_generation=5,
    max_width=16,
    gpu_max_generation=5,
    replay_counter=0,
)
#: A branch-470 GPU (no nvmlDeviceGetGpuMaxPcieLinkGeneration), trained down and busy.
TRAINED_DOWN = PcieLink(
    current_generation=1,
    current_width=8,
    max_generation=3,
    max_width=16,
    replay_counter=41,
    gpu_utilization=97,
)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_pcie_round_trips(fmt: str) -> None:
    facts = make_facts([make_gpu(0, pcie=H200), make_gpu(1, pcie=TRAINED_DOWN)])
    text = dump_facts(facts, fmt)  # type: ignore[arg-type]
    assert facts_from_dict(parse_document(text, "node.yaml"), "node.yaml") == facts


def test_a_gpu_that_reported_none_is_written_as_before_the_field_existed() -> None:
    facts = make_facts([make_gpu(0), make_gpu(1, pcie=H200)])
    plain = parse_document(dump_facts(facts, "json"), "node.json")
    assert "pcie" not in plain["gpus"][0]
    assert plain["gpus"][1]["pcie"]["max_width"] == 16
    # Right after the PCI class, where the bundled profiles write it too.
    keys = list(plain["gpus"][1])
    assert keys[keys.index("pci_class") + 1] == "pcie"
    assert facts_to_dict(facts)["gpus"][0]["pcie"] is None


def test_absent_or_null_is_none_and_each_part_may_be_absent() -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    del gpu["pcie"]
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].pcie is None
    gpu["pcie"] = None
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].pcie is None
    gpu["pcie"] = {"current_width": 8, "max_width": 16}
    assert facts_from_dict({"gpus": [gpu]}).gpus[0].pcie == PcieLink(current_width=8, max_width=16)


@pytest.mark.parametrize(
    ("link", "generation", "width"),
    [
        # nvml.h: the maximum "possible with this device and system" is already the lower
        # of the GPU's and the slot's: a Gen5 GPU in a Gen4 x8 slot reaches Gen4 x8.
        (PcieLink(max_generation=4, max_width=8, gpu_max_generation=5), 4, 8),
        (H200, 5, 16),
        # Branch 470 has no GPU maximum: the system's is the answer.
        (PcieLink(max_generation=3, max_width=16), 3, 16),
        # Never above the GPU's own maximum.
        (PcieLink(max_generation=5, gpu_max_generation=4), 4, None),
        # The GPU's maximum alone says nothing of the slot.
        (PcieLink(gpu_max_generation=5, current_generation=5), None, None),
    ],
)
def test_what_the_link_could_reach(
    link: PcieLink, generation: int | None, width: int | None
) -> None:
    assert (link.reachable_generation, link.reachable_width) == (generation, width)


@pytest.mark.parametrize(
    ("link", "path", "problem"),
    [
        ({"current_width": "x16"}, "pcie.current_width", "expected an integer"),
        ({"max_generation": -1}, "pcie.max_generation", "is not between 0 and 4294967295"),
        ({"replay_counter": 2**32}, "pcie.replay_counter", "is not between 0 and 4294967295"),
        ({"gpu_utilization": 101}, "pcie.gpu_utilization", "is not between 0 and 100"),
        ({"generation": 5}, "pcie.generation", "unknown field"),
        ([5, 16], "pcie", "expected a mapping"),
    ],
)
def test_mistakes_name_the_file_and_field(link: Any, path: str, problem: str) -> None:
    gpu = facts_to_dict(make_facts([make_gpu(0)]))["gpus"][0]
    gpu["pcie"] = link
    with pytest.raises(FactsError) as refused:
        facts_from_dict({"gpus": [gpu]}, "node.yaml")
    message = str(refused.value)
    assert message.startswith("node.yaml: gpus[0].pcie")
    assert path in message and problem in message
