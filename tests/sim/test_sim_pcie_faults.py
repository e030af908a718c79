"""PCIe faults: a link trained down (narrower, slower, from the start or after N calls) and
replays that keep coming.

Each is a kind under ``gfd/sim/faults/`` lowered to the machine file's generic records
(``fault_set``, ``fault_rise``); the tests read the effect back through pynvml and through
gfd's reader, and hold the YAML form, the records and the refusals (file and field named).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from gfd.facts import FactsError, PcieLink, dump_facts
from gfd.nvml.reader import NvmlReader
from gfd.sim import SimulationProfile, load_profile, simulate
from gfd.sim.faults import (
    Faults,
    PcieLinkDown,
    PcieReplays,
    fault_records,
    faults_to_dict,
    parse_faults,
)
from tests.sim import simulate_raw


def with_faults(profile: str, faults: Faults) -> SimulationProfile:
    return SimulationProfile(facts=load_profile(profile).facts, faults=faults)


def test_a_link_trained_down_from_the_start(nvml: ModuleType) -> None:
    faults = Faults(pcie_link_down=(PcieLinkDown(gpu=1, after_calls=0, width=8),))
    with simulate_raw(with_faults("dgx-h100", faults)):
        nvml.nvmlInit()
        down = nvml.nvmlDeviceGetHandleByIndex(1)
        assert nvml.nvmlDeviceGetCurrPcieLinkWidth(down) == 8
        # What the GPU and its slot allow stays: that is what tells a trained-down link.
        assert nvml.nvmlDeviceGetMaxPcieLinkWidth(down) == 16
        assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(down) == 5
        other = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetCurrPcieLinkWidth(other) == 16
        nvml.nvmlShutdown()


def test_a_link_slower_after_n_calls_while_busy(nvml: ModuleType) -> None:
    faults = Faults(
        pcie_link_down=(PcieLinkDown(gpu=0, after_calls=3, generation=3, gpu_utilization=95),)
    )
    with simulate_raw(with_faults("pcie-l4x4", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)  # call 1
        assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 4  # call 2
        assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 4  # call 3
        assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 3
        assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu == 95
        assert nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle) == 4
        nvml.nvmlShutdown()


def test_a_later_entry_at_the_reach_is_the_link_retrained(nvml: ModuleType) -> None:
    faults = Faults(
        pcie_link_down=(
            PcieLinkDown(gpu=0, after_calls=0, width=8),
            PcieLinkDown(gpu=0, after_calls=2, width=16),
        )
    )
    with simulate_raw(with_faults("t4-single", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)  # call 1
        assert nvml.nvmlDeviceGetCurrPcieLinkWidth(handle) == 8  # call 2
        assert nvml.nvmlDeviceGetCurrPcieLinkWidth(handle) == 16
        nvml.nvmlShutdown()


def test_replays_rise_with_every_call(nvml: ModuleType) -> None:
    faults = Faults(pcie_replays=(PcieReplays(gpu=2, after_calls=2, per_call=5),))
    with simulate_raw(with_faults("dgx-a100", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(2)  # call 1
        assert [nvml.nvmlDeviceGetPcieReplayCounter(handle) for _ in range(4)] == [0, 5, 10, 15]
        nvml.nvmlShutdown()


def test_the_reader_sees_the_link_trained_down_and_asks_the_utilisation_then() -> None:
    faults = Faults(
        pcie_link_down=(
            PcieLinkDown(gpu=3, after_calls=0, width=4, generation=1, gpu_utilization=100),
        ),
        pcie_replays=(PcieReplays(gpu=3, after_calls=0, per_call=1),),
    )
    with simulate(with_faults("hgx-h200", faults)) as machine:
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        try:
            first, second = reader.read(), reader.read()
        finally:
            reader.close()
    link = first.gpus[3].pcie
    assert link is not None
    assert (link.current_width, link.current_generation, link.gpu_utilization) == (4, 1, 100)
    assert (link.reachable_width, link.reachable_generation) == (16, 5)
    later = second.gpus[3].pcie
    assert later is not None and later.replay_counter is not None
    assert link.replay_counter is not None and later.replay_counter > link.replay_counter
    # A healthy GPU's link is not asked its utilisation.
    assert first.gpus[0].pcie == PcieLink(5, 16, 5, 16, 5, 0)


def test_pcie_faults_round_trip_through_the_profile_yaml(tmp_path: Path) -> None:
    facts = load_profile("mixed-a100-h100").facts
    profile = tmp_path / "machine.yaml"
    profile.write_text(
        dump_facts(facts) + "faults:\n"
        "  pcie_link_down: [{gpu: 2, after_calls: 0, width: 8},"
        " {gpu: 0, after_calls: 30, generation: 2, gpu_utilization: 80}]\n"
        "  pcie_replays: [{gpu: 5, after_calls: 10, per_call: 3}]\n"
    )
    loaded = load_profile(str(profile))
    assert loaded.faults == Faults(
        pcie_link_down=(
            PcieLinkDown(2, 0, width=8),
            PcieLinkDown(0, 30, generation=2, gpu_utilization=80),
        ),
        pcie_replays=(PcieReplays(5, 10, 3),),
    )
    document = faults_to_dict(loaded.faults)
    assert parse_faults(document, "<dict>", loaded.facts.gpus) == loaded.faults
    again = tmp_path / "again.yaml"
    again.write_text(dump_facts(facts) + yaml.safe_dump({"faults": document}))
    assert load_profile(str(again)).faults == loaded.faults
    assert fault_records(loaded.faults) == [
        "fault_set 2 0 pcie_current_width 8",
        "fault_set 0 30 pcie_current_generation 2",
        "fault_set 0 30 gpu_utilization 80",
        "fault_rise 5 10 pcie_replay_counter 3",
    ]


@pytest.mark.parametrize(
    ("profile", "faults", "field", "problem"),
    [
        (
            "dgx-h100",
            {"pcie_link_down": [{"gpu": 0, "after_calls": 1}]},
            "pcie_link_down[0]",
            "names no change (give width, generation or both)",
        ),
        (
            "dgx-h100",
            {"pcie_link_down": [{"gpu": 0, "after_calls": 1, "width": 32}]},
            "pcie_link_down[0].width",
            "32 is not a width this link can train at: give 1 to 16 (what it could reach)",
        ),
        (
            # The H100 PCIe in a Gen4 slot reaches Gen4, not its own Gen5.
            "mixed-a100-h100",
            {"pcie_link_down": [{"gpu": 2, "after_calls": 1, "generation": 5}]},
            "pcie_link_down[0].generation",
            "5 is not a generation this link can train at: give 1 to 4 (what it could reach)",
        ),
        (
            "dgx-h100",
            {"pcie_link_down": [{"gpu": 0, "after_calls": 1, "width": 0}]},
            "pcie_link_down[0].width",
            "0 is not a width this link can train at",
        ),
        (
            "gb200-nvl4",
            {"pcie_link_down": [{"gpu": 0, "after_calls": 1, "width": 8}]},
            "pcie_link_down[0].gpu",
            "GPU 0 reports no PCIe link width",
        ),
        (
            "dgx-h100",
            {"pcie_link_down": [{"gpu": 0, "after_calls": 1, "width": 8, "gpu_utilization": 90}]},
            "pcie_link_down[0].gpu_utilization",
            "give a generation too",
        ),
        (
            "dgx-h100",
            {
                "pcie_link_down": [
                    {"gpu": 0, "after_calls": 1, "generation": 4, "gpu_utilization": 101}
                ]
            },
            "pcie_link_down[0].gpu_utilization",
            "101 is not a percentage",
        ),
        (
            "dgx-a100-mig-single",
            {
                "pcie_link_down": [
                    {"gpu": 0, "after_calls": 1, "generation": 3, "gpu_utilization": 90}
                ]
            },
            "pcie_link_down[0].gpu_utilization",
            "GPU 0 is MIG-enabled",
        ),
        (
            "dgx-h100",
            {"pcie_link_down": [{"gpu": 0, "after_calls": 1, "lanes": 8}]},
            "pcie_link_down[0].lanes",
            "unknown field",
        ),
        (
            "dgx-h100",
            {"pcie_replays": [{"gpu": 0, "after_calls": 1}]},
            "pcie_replays[0].per_call",
            "required",
        ),
        (
            "dgx-h100",
            {"pcie_replays": [{"gpu": 0, "after_calls": 1, "per_call": 0}]},
            "pcie_replays[0].per_call",
            "is not 1 to 4294967295",
        ),
        (
            "gb200-nvl4",
            {"pcie_replays": [{"gpu": 1, "after_calls": 1, "per_call": 1}]},
            "pcie_replays[0].gpu",
            "GPU 1 reports no PCIe replay counter",
        ),
    ],
)
def test_bad_pcie_faults_name_file_and_field(
    profile: str, faults: dict[str, object], field: str, problem: str
) -> None:
    facts = load_profile(profile).facts
    with pytest.raises(FactsError, match=re.escape(f"<here>: faults.{field}: ")) as raised:
        parse_faults(faults, "<here>", facts.gpus)
    assert problem in str(raised.value)


def test_a_gpu_whose_link_reports_no_generation_cannot_be_slowed() -> None:
    facts = load_profile("t4-single").facts
    width_only = dataclasses.replace(facts.gpus[0], pcie=PcieLink(current_width=16, max_width=16))
    faults = {"pcie_link_down": [{"gpu": 0, "after_calls": 0, "generation": 1}]}
    with pytest.raises(FactsError) as raised:
        parse_faults(faults, "<here>", (width_only,))
    assert "faults.pcie_link_down[0].gpu: GPU 0 reports no PCIe link generation" in str(
        raised.value
    )
