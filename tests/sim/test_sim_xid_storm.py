"""The ``xid_storm`` fault: COUNT critical Xid events of one code on a GPU, one every
``every_calls`` calls from ``after_calls`` on, lowered to one ``fault_event`` record each;
read back from an event set through pynvml, with its YAML form and its refusals."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import ModuleType

import pynvml
import pytest
import yaml

from gfd.facts import FactsError, dump_facts
from gfd.sim import load_profile
from gfd.sim.faults import Faults, XidStorm, fault_records, faults_to_dict, parse_faults
from gfd.sim.faults.xid_storm import MAX_STORM_XIDS
from tests.sim import simulate_raw

XID = pynvml.nvmlEventTypeXidCriticalError


def test_a_storm_spreads_its_xids_over_the_gpus_calls(nvml: ModuleType) -> None:
    storm = Faults(xid_storm=(XidStorm(gpu=1, xid=13, after_calls=5, count=4, every_calls=3),))
    with simulate_raw(dataclasses.replace(load_profile("dgx-h100"), faults=storm)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(1)  # call 1
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)  # call 2
        received = []
        for call in range(3, 30):
            nvml.nvmlDeviceGetName(handle)
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, 0)
            except pynvml.NVMLError_Timeout:
                continue
            received.append((call, int(data.eventData)))
        # After 5 calls, then every 3rd: calls 6, 9, 12 and 15 bring one Xid 13 each.
        assert received == [(6, 13), (9, 13), (12, 13), (15, 13)]
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_storms_round_trip_through_the_profile_yaml(tmp_path: Path) -> None:
    facts = load_profile("t4-single").facts
    profile = tmp_path / "machine.yaml"
    profile.write_text(
        dump_facts(facts) + "faults:\n  xid_storm: [{gpu: 0, xid: 31, after_calls: 40, count: 3}]\n"
    )
    loaded = load_profile(str(profile))
    assert loaded.faults == Faults(xid_storm=(XidStorm(0, 31, 40, 3, 1),))
    again = tmp_path / "again.yaml"
    again.write_text(dump_facts(facts) + yaml.safe_dump({"faults": faults_to_dict(loaded.faults)}))
    assert load_profile(str(again)).faults == loaded.faults
    assert fault_records(loaded.faults) == [
        "fault_event 0 40 0x8 31 1 -",
        "fault_event 0 41 0x8 31 1 -",
        "fault_event 0 42 0x8 31 1 -",
    ]


@pytest.mark.parametrize(
    ("entry", "field", "problem"),
    [
        ({"gpu": 0, "after_calls": 0, "count": 3}, "xid", "required: the Xid number"),
        ({"gpu": 0, "after_calls": 0, "xid": 13}, "count", "required: how many Xids"),
        ({"gpu": 0, "after_calls": 0, "xid": 13, "count": 0}, "count", "is not 1 to"),
        (
            {"gpu": 0, "after_calls": 0, "xid": 13, "count": MAX_STORM_XIDS + 1},
            "count",
            f"is not 1 to {MAX_STORM_XIDS} Xids",
        ),
        ({"gpu": 0, "after_calls": 0, "xid": 0, "count": 3}, "xid", "is not an Xid"),
        (
            {"gpu": 0, "after_calls": 0, "xid": 13, "count": 3, "every_calls": 0},
            "every_calls",
            "must be at least 1",
        ),
        (
            {"gpu": 0, "after_calls": 2**32 - 2, "xid": 13, "count": 3},
            "count",
            "more calls than the machine file holds",
        ),
        ({"gpu": 1, "after_calls": 0, "xid": 13, "count": 3}, "gpu", "GPU 1 does not exist"),
    ],
)
def test_bad_storms_name_file_and_field(entry: dict[str, int], field: str, problem: str) -> None:
    gpus = load_profile("t4-single").facts.gpus
    with pytest.raises(FactsError, match=re.escape(f"<here>: faults.xid_storm[0].{field}: ")) as e:
        parse_faults({"xid_storm": [entry]}, "<here>", gpus)
    assert problem in str(e.value)
