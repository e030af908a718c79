"""Bounds on absurd input: more GPUs, MIG devices, NVLinks or pairs than any node can have.

A facts document beyond a limit is refused before it is parsed into objects (one pass of the
parser's events), a machine whose NVML reports such counts before anything that grows with
them is asked; either way with one line naming the field, the count and the limit. How fast
is measured by ``bench/absurd_input.py``, not asserted here.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gfd.base.errors import ConfigError
from gfd.facts import FactsError, facts_from_dict, facts_to_dict
from gfd.facts.limits import (
    MACHINE_LIMITS,
    MAX_GPU_PAIRS,
    MAX_GPUS,
    MAX_MIG_DEVICES,
    MAX_NVLINKS,
    FactsLimitError,
    MachineLimits,
    check_document_bounds,
)
from gfd.nvml.reader import NvmlBeyondLimits, NvmlReader
from gfd.sim import load_profile, simulate
from tests.facts_readback import load_facts_text
from tests.host import gfd_main


def gpu_line(i: int) -> str:
    return f"- {{index: {i}, name: X, uuid: GPU-{i}, bus_id: '{i >> 8:08X}:{i & 0xFF:02X}:00.0'}}"


def gpus_document(count: int) -> str:
    return "\n".join(["driver_version: 550.54.15", "gpus:", *(gpu_line(i) for i in range(count))])


def refusal(text: str) -> FactsLimitError:
    with pytest.raises(FactsLimitError) as raised:
        load_facts_text(text, "node.yaml")
    return raised.value


def test_a_node_of_the_most_gpus_loads() -> None:
    assert len(load_facts_text(gpus_document(MAX_GPUS), "node.yaml").gpus) == MAX_GPUS


def test_more_gpus_than_any_node_is_refused_in_one_line_naming_count_and_limit() -> None:
    error = refusal(gpus_document(10_000))
    assert str(error) == (
        "node.yaml: gpus: 10000 GPUs, more than the limit of 128 "
        "(the largest nodes have 16 to 20; a GB200 NVL72 tray has 4)"
    )
    # A usage error on the command line (exit 2), and a facts error everywhere else.
    assert isinstance(error, ConfigError) and isinstance(error, FactsError)


def test_json_is_bounded_too() -> None:
    document = {"gpus": [{"index": i} for i in range(MAX_GPUS + 1)]}
    error = refusal(json.dumps(document))
    assert error.path == "gpus" and error.problem.startswith("129 GPUs")


def _with_items(key: str, count: int, item: str) -> str:
    return f"{key}: [" + ", ".join([item] * count) + "]\n"


@pytest.mark.parametrize(
    ("text", "path", "problem"),
    [
        (
            "gpus:\n- nvlinks: [" + ", ".join(["{index: 0, active: false}"] * 37) + "]\n",
            "gpus[0].nvlinks",
            f"37 NVLinks, more than the limit of {MAX_NVLINKS}",
        ),
        (
            "gpus:\n- {}\n- mig_devices:\n" + "  - {index: 0}\n" * 17,
            "gpus[1].mig_devices",
            f"17 MIG devices, more than the limit of {MAX_MIG_DEVICES}",
        ),
        (
            _with_items("pci_pairs", MAX_GPU_PAIRS + 1, "{a: 0, b: 1, level: node}"),
            "pci_pairs",
            f"{MAX_GPU_PAIRS + 1} GPU pairs, more than the limit of {MAX_GPU_PAIRS}",
        ),
        (
            _with_items("nvlink_p2p", MAX_GPU_PAIRS + 1, "{a: 0, b: 1, status: ok}"),
            "nvlink_p2p",
            f"{MAX_GPU_PAIRS + 1} GPU pairs, more than the limit of {MAX_GPU_PAIRS}",
        ),
    ],
)
def test_every_bounded_list_is_refused_past_its_limit(text: str, path: str, problem: str) -> None:
    error = refusal(text)
    assert (error.path, error.problem.split(" (")[0]) == (path, problem)


def test_an_alias_counts_what_its_anchor_holds() -> None:
    text = "x: &many [" + ", ".join(["{}"] * 200) + "]\ngpus: *many\n"
    error = refusal(text)
    assert error.path == "gpus" and error.problem.startswith("200 GPUs")


def test_a_list_too_long_to_count_is_refused_with_what_was_counted() -> None:
    error = refusal("gpus: [" + "0, " * 400_000 + "0]\n")
    assert error.path == "gpus" and error.problem.startswith("at least ")
    assert int(error.problem.split()[2]) > MAX_GPUS


def test_only_the_bounded_places_count() -> None:
    # The same lists elsewhere (an unknown key, a deeper level) are left to the model.
    check_document_bounds("other: [" + "1, " * 500 + "1]\n", "node.yaml")
    check_document_bounds("gpus:\n- mig_devices:\n  - {x: [" + "1, " * 500 + "1]}\n", "node.yaml")


def test_a_document_the_parser_rejects_is_left_to_the_loader() -> None:
    check_document_bounds("gpus: [\n", "node.yaml")
    with pytest.raises(FactsError, match="not valid YAML"):
        load_facts_text("gpus: [\n", "node.yaml")


def test_data_built_in_code_is_bounded_before_it_is_built() -> None:
    data = {"gpus": [{"index": 0, "nvlinks": [{}] * (MAX_NVLINKS + 1)}]}
    with pytest.raises(FactsLimitError, match=r"gpus\[0\]\.nvlinks: 37 NVLinks"):
        facts_from_dict(data, "<facts>")


def test_the_simulator_refuses_a_machine_built_in_code_past_a_limit() -> None:
    facts = load_profile("t4-single").facts
    gpus = tuple(
        replace(facts.gpus[0], index=i, uuid=f"GPU-{i}", bus_id=f"00000000:{i:02X}:00.0")
        for i in range(MAX_GPUS + 1)
    )
    with pytest.raises(FactsLimitError, match="129 GPUs"), simulate(replace(facts, gpus=gpus)):
        pass


def test_a_mig_slot_past_the_limit_is_not_servable() -> None:
    facts = load_profile("dgx-a100-mig-single").facts
    gpu = facts.gpus[0]
    migs = (replace(gpu.mig_devices[0], index=MAX_MIG_DEVICES), *gpu.mig_devices[1:])
    facts = replace(facts, gpus=(replace(gpu, mig_devices=migs), *facts.gpus[1:]))
    # The facts model takes it; the simulator could not serve it (nor a reader read it).
    assert facts_from_dict(facts_to_dict(facts), "<facts>") == facts
    with (
        pytest.raises(FactsError, match=r"mig_devices\[0\]\.index: 16 is not a MIG slot"),
        simulate(facts),
    ):
        pass


def _refused_by_cli(*args: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = gfd_main(list(args), env={}, stdout=io.StringIO())
    return code, err.getvalue().splitlines()


@pytest.mark.parametrize("command", [["labels"], ["facts"], ["--oneshot", "-o", "-"], ["topo"]])
def test_ten_thousand_gpus_exit_2_with_one_line(command: list[str], tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(gpus_document(10_000))
    code, lines = _refused_by_cli("--simulate", str(path), *command)
    assert code == 2
    assert lines == [
        f"gfd: error: {path}: gpus: 10000 GPUs, more than the limit of 128 "
        "(the largest nodes have 16 to 20; a GB200 NVL72 tray has 4)"
    ]


def test_ten_thousand_gpus_as_a_process(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"gpus": [{"index": i} for i in range(10_000)]}))
    done = subprocess.run(
        [sys.executable, "-m", "gfd", "--simulate", str(path), "labels"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gfd: error: {path}: gpus: 10000 GPUs, more than the limit of 128")


# --------------------------------------------------------------------------- #
# A machine (NVML itself) reporting more than the limits. The simulator cannot be a machine
# past the real limits (it refuses such machine files, tests/sim/test_sim_limits.py), so a
# simulated machine is held to lower limits, through the reader's own parameter.


def _refused(profile: str, limits: MachineLimits) -> tuple[NvmlBeyondLimits, int]:
    """The reader's refusal of ``profile`` under ``limits``, and the NVML calls it made."""
    with simulate(profile) as machine:
        reader = NvmlReader(
            library_path=machine.library_path, sysfs_root=machine.sysfs_root, limits=limits
        )
        with pytest.raises(NvmlBeyondLimits) as raised:
            reader.read()
    return raised.value, reader.last_calls


def test_a_machine_with_more_gpus_than_the_limit_is_refused_before_reading_any() -> None:
    error, calls = _refused("dgx-h100", MachineLimits(gpus=4))
    assert str(error).startswith(
        "NVML nvmlDeviceGetCount reported 8 GPUs, more than the limit of 4"
    )
    # Nothing is asked per GPU: fewer calls than the machine has GPUs.
    assert calls < 8, calls


def test_a_gpu_with_more_mig_slots_than_the_limit_is_refused() -> None:
    error, _ = _refused("dgx-a100-mig-single", MachineLimits(mig_devices=3))
    assert str(error).startswith(
        "NVML nvmlDeviceGetMaxMigDeviceCount of GPU 0 reported 7 MIG devices, "
        "more than the limit of 3"
    )


def test_a_gpu_with_more_nvlinks_than_the_limit_is_refused() -> None:
    error, _ = _refused("dgx-h100", MachineLimits(nvlinks=4))
    assert "reported 18 NVLinks, more than the limit of 4" in str(error)


def test_the_reader_s_default_limits_are_the_documented_ones() -> None:
    assert (MACHINE_LIMITS.gpus, MACHINE_LIMITS.mig_devices, MACHINE_LIMITS.nvlinks) == (
        MAX_GPUS,
        MAX_MIG_DEVICES,
        MAX_NVLINKS,
    )
