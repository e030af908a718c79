"""Bundled profiles, profile loading errors, the sysfs tree and the machine file."""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from gfd.base.errors import GfdError
from gfd.facts import FactsError, Gpu, NodeFacts
from gfd.sim import (
    BUNDLED_PROFILES,
    CONFIG_ENV,
    library_path,
    load_profile,
    profile_path,
    simulate,
)
from gfd.sim.faults import (
    EXPORTED_CALLS,
    NVML_ERROR_CODES,
    CallError,
    Faults,
    GpuLost,
    GpuVanished,
    NvLinkDown,
    faults_to_dict,
    parse_faults,
)
from gfd.sim.machine_file import render_machine_file
from tests.facts_readback import cpulist_to_ids, pci_level

from .test_sim_nvml import MIG_PROFILE

MIB = 2**20
REQUIRED_PROFILES = {
    "dgx-a100",
    "dgx-h100",
    "hgx-h200",
    "dgx1-v100",
    "pcie-l4x4",
    "rtx4090x8",
    "k80-pcie-tree",
    "t4-single",
    "mixed-a100-h100",
    "dgx-a100-mig-single",
    "dgx-a100-mig-mixed",
    "hgx-h200-mig",
    "gb200-nvl4",
    "gb200-nvl4-fabric-broken",
}
#: Name → (memory MiB, compute capability) as NVML reports them on real hardware.
REAL_GPUS = {
    "NVIDIA A100-SXM4-40GB": (40960, (8, 0)),
    "NVIDIA A100 80GB PCIe": (81920, (8, 0)),
    "NVIDIA H100 80GB HBM3": (81559, (9, 0)),
    "NVIDIA H100 PCIe": (81559, (9, 0)),
    "NVIDIA H200": (143771, (9, 0)),
    "Tesla V100-SXM2-16GB": (16384, (7, 0)),
    "Tesla V100-SXM3-32GB": (32768, (7, 0)),
    "NVIDIA L4": (23034, (8, 9)),
    "NVIDIA GeForce RTX 4090": (24564, (8, 9)),
    "Tesla T4": (15360, (7, 5)),
    "Tesla K80": (11441, (3, 7)),
    "NVIDIA GB200": (189471, (10, 0)),
}


def test_bundled_profiles_are_sorted_and_complete() -> None:
    assert list(BUNDLED_PROFILES) == sorted(BUNDLED_PROFILES)
    assert set(BUNDLED_PROFILES) >= REQUIRED_PROFILES


@pytest.mark.parametrize("name", BUNDLED_PROFILES)
def test_bundled_profile_is_a_complete_real_machine(name: str) -> None:
    facts = load_profile(name).facts
    assert facts.driver_version and facts.cuda_driver_version and facts.machine_type
    n = len(facts.gpus)
    assert {(p.a, p.b) for p in facts.pci_pairs} == {
        (a, b) for a in range(n) for b in range(a + 1, n)
    }
    assert [g.bus_id for g in facts.gpus] == sorted(g.bus_id for g in facts.gpus)
    uuids = [g.uuid for g in facts.gpus]
    assert len(set(uuids)) == n and all(u.startswith("GPU-") and len(u) == 40 for u in uuids)
    for gpu in facts.gpus:
        memory_mib, compute = REAL_GPUS[gpu.name]
        assert gpu.memory_total_bytes == memory_mib * MIB
        assert (gpu.compute_major, gpu.compute_minor) == compute
        assert gpu.pci_device_id is not None and gpu.pci_device_id & 0xFFFF == 0x10DE
        assert gpu.architecture is not None and gpu.brand is not None
        assert gpu.pci_class in (0x030200, 0x030000)
        assert gpu.cpu_affinity is not None
        mig_capable = (
            gpu.compute_major in (8, 9, 10) and "GeForce" not in gpu.name and "L4" not in gpu.name
        )
        assert (gpu.mig_mode_current is not None) == mig_capable, gpu.name
        # Hopper and Blackwell report fabric info where an NVLink fabric exists (not on PCIe
        # cards).
        assert (gpu.fabric is not None) == (gpu.compute_major in (9, 10) and bool(gpu.nvlinks))
        assert (gpu.nvlink_version is not None) == bool(gpu.nvlinks)


def test_dgx2_is_two_boards_of_six_switches_joined_by_one_p2p_fact() -> None:
    facts = load_profile("dgx2-v100").facts
    assert len(facts.gpus) == 16 and facts.driver_version is not None
    assert facts.driver_version.startswith("470.")
    boards = [
        {link.remote_bus_id for gpu in facts.gpus[start : start + 8] for link in gpu.nvlinks}
        for start in (0, 8)
    ]
    assert [len(board) for board in boards] == [6, 6] and not boards[0] & boards[1]
    for gpu in facts.gpus:
        assert len({link.remote_bus_id for link in gpu.nvlinks}) == len(gpu.nvlinks) == 6
        assert all(link.remote_type == "switch" for link in gpu.nvlinks)
    # The one pair the reader asks: the lowest GPU of each board.
    assert [(e.a, e.b, e.status) for e in facts.nvlink_p2p] == [(0, 8, "ok")]


def test_dgx_a100_is_nv12_through_six_switches() -> None:
    facts = load_profile("dgx-a100").facts
    switches = {link.remote_bus_id for gpu in facts.gpus for link in gpu.nvlinks}
    assert len(switches) == 6
    for gpu in facts.gpus:
        assert len(gpu.nvlinks) == 12 and all(link.remote_type == "switch" for link in gpu.nvlinks)
        assert gpu.nvlink_version == 4  # NVLink 3.0
    affinity = [(g.numa_node, g.cpu_affinity) for g in facts.gpus]
    assert affinity[0] == (3, "48-63,176-191") and affinity[2] == (1, "16-31,144-159")
    assert affinity[4] == (7, "112-127,240-255") and affinity[6] == (5, "80-95,208-223")
    assert pci_level(facts, 0, 1) == "multiple" and pci_level(facts, 1, 2) == "system"


def test_dgx_h100_bus_ids_links_and_numa() -> None:
    facts = load_profile("dgx-h100").facts
    assert [g.bus_id[9:11] for g in facts.gpus] == ["1B", "43", "52", "61", "9D", "C3", "D1", "DF"]
    for gpu in facts.gpus:
        per_switch: dict[str | None, int] = {}
        for link in gpu.nvlinks:
            per_switch[link.remote_bus_id] = per_switch.get(link.remote_bus_id, 0) + 1
        assert sorted(per_switch.values()) == [4, 4, 5, 5]
        expected = (0, "0-47,96-143") if gpu.index < 4 else (1, "48-95,144-191")
        assert (gpu.numa_node, gpu.cpu_affinity) == expected


def test_k80_levels_are_the_published_matrix() -> None:
    facts = load_profile("k80-pcie-tree").facts
    short = {"single": "PIX", "multiple": "PXB", "hostbridge": "PHB", "system": "SYS"}
    rows = [
        " ".join("X" if a == b else short[str(pci_level(facts, a, b))] for b in range(8))
        for a in range(8)
    ]
    assert rows == [
        "X PIX SYS SYS SYS SYS SYS SYS",
        "PIX X SYS SYS SYS SYS SYS SYS",
        "SYS SYS X PIX PHB PHB PHB PHB",
        "SYS SYS PIX X PHB PHB PHB PHB",
        "SYS SYS PHB PHB X PIX PXB PXB",
        "SYS SYS PHB PHB PIX X PXB PXB",
        "SYS SYS PHB PHB PXB PXB X PIX",
        "SYS SYS PHB PHB PXB PXB PIX X",
    ]


def test_rtx4090_box_is_all_system_and_vga() -> None:
    facts = load_profile("rtx4090x8").facts
    assert {p.level for p in facts.pci_pairs} == {"system"}
    assert {g.pci_class for g in facts.gpus} == {0x030000}
    cpus = [set(cpulist_to_ids(g.cpu_affinity or "")) for g in facts.gpus]
    assert all(a.isdisjoint(b) for i, a in enumerate(cpus) for b in cpus[i + 1 :])


def test_mixed_profile_has_two_models_in_unequal_counts() -> None:
    names = [g.name for g in load_profile("mixed-a100-h100").facts.gpus]
    assert sorted({n: names.count(n) for n in names}.values()) == [2, 4]


# --------------------------------------------------------------------------- loading


def test_profile_path_resolution(tmp_path: Path) -> None:
    assert profile_path("t4-single").name == "t4-single.yaml"
    own = tmp_path / "mine.yaml"
    own.write_text("gpus: []\n")
    assert profile_path(str(own)) == own
    with pytest.raises(GfdError) as info:
        profile_path("dgx-b300")
    assert "dgx-b300" in str(info.value)
    for name in BUNDLED_PROFILES:
        assert name in str(info.value)


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus:\n  - index: 0\n    name: [unclosed\n")
    with pytest.raises(FactsError) as info:
        load_profile(str(bad))
    assert str(bad) in str(info.value) and "line" in str(info.value)


FACTS_HEAD = """\
driver_version: 550.54.15
gpus:
- {index: 0, name: Tesla T4, uuid: GPU-1, bus_id: '00000000:00:1E.0'}
- {index: 1, name: Tesla T4, uuid: GPU-2, bus_id: '00000000:00:1F.0'}
"""


@pytest.mark.parametrize(
    ("faults", "field", "problem"),
    [
        ("faults: 3", "faults", "expected a mapping"),
        ("faults: {typo: 1}", "faults.typo", "unknown field"),
        ("faults: {errors: {}}", "faults.errors", "expected a list"),
        ("faults: {errors: [{error: UNKNOWN}]}", "faults.errors[0].call", "required"),
        (
            "faults: {errors: [{call: nvmlDeviceGetNmae, error: 1}]}",
            "faults.errors[0].call",
            "did you mean nvmlDeviceGetName",
        ),
        (
            "faults: {errors: [{call: nvmlErrorString, error: 1}]}",
            "faults.errors[0].call",
            "not an NVML",
        ),
        ("faults: {errors: [{call: nvmlDeviceGetName}]}", "faults.errors[0].error", "required"),
        (
            "faults: {errors: [{call: nvmlDeviceGetName, error: OOPS}]}",
            "faults.errors[0].error",
            "OOPS",
        ),
        (
            "faults: {errors: [{call: nvmlDeviceGetName, error: 0}]}",
            "faults.errors[0].error",
            "not an NVML",
        ),
        (
            "faults: {errors: [{call: nvmlDeviceGetName, error: 3, gpu: 2}]}",
            "faults.errors[0].gpu",
            "has 2",
        ),
        (
            "faults: {errors: [{call: nvmlDeviceGetName, error: 3, times: x}]}",
            "faults.errors[0].times",
            "count",
        ),
        ("faults: {gpu_lost: [{gpu: 0}]}", "faults.gpu_lost[0].after_calls", "required"),
        (
            "faults: {gpu_lost: [{gpu: 0, after_calls: 1}, {gpu: 0, after_calls: 2}]}",
            "faults.gpu_lost[1].gpu",
            "twice",
        ),
        ("faults: {driver_not_loaded_inits: true}", "faults.driver_not_loaded_inits", "count"),
        ("faults: {gpu_vanished: 1}", "faults.gpu_vanished", "expected a list"),
        ("faults: {gpu_vanished: [{after_calls: 1}]}", "faults.gpu_vanished[0].gpu", "required"),
        ("faults: {gpu_vanished: [{gpu: 0}]}", "faults.gpu_vanished[0].after_calls", "required"),
        (
            "faults: {gpu_vanished: [{gpu: 0, after_calls: 4294967296}]}",
            "faults.gpu_vanished[0].after_calls",
            "more than the machine file holds",
        ),
        (
            "faults: {gpu_vanished: [{gpu: 2, after_calls: 1}]}",
            "faults.gpu_vanished[0].gpu",
            "GPU 2 does not exist (the machine has 2)",
        ),
        (
            "faults: {gpu_vanished: [{gpu: 0, after_calls: -1}]}",
            "faults.gpu_vanished[0].after_calls",
            "must not be negative",
        ),
        (
            "faults: {gpu_vanished: [{gpu: 0, after_calls: 1, links: [0]}]}",
            "faults.gpu_vanished[0].links",
            "unknown field",
        ),
        (
            "faults: {gpu_vanished: [{gpu: 1, after_calls: 1}, {gpu: 1, after_calls: 2}]}",
            "faults.gpu_vanished[1].gpu",
            "GPU 1 is listed twice",
        ),
        (
            "faults: {gpu_lost: [{gpu: 1, after_calls: 1}], gpu_vanished: [{gpu: 1, after_calls: 2}]}",
            "faults.gpu_vanished[0].gpu",
            "GPU 1 is already lost by faults.gpu_lost[0]",
        ),
        (
            "faults: {nvlink_down: [{gpu: 0, after_calls: 1}]}",
            "faults.nvlink_down[0].gpu",
            "GPU 0 has no NVLinks",
        ),
    ],
)
def test_bad_faults_name_file_and_field(
    tmp_path: Path, faults: str, field: str, problem: str
) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(FACTS_HEAD + faults + "\n")
    with pytest.raises(FactsError) as info:
        load_profile(str(path))
    assert info.value.source == str(path)
    assert info.value.path == field
    assert problem in info.value.problem


#: Two GPUs with NVLinks 0-2 and 5 on the first, none on the second.
NVLINK_FACTS_HEAD = """\
gpus:
- index: 0
  name: NVIDIA H100 80GB HBM3
  uuid: GPU-1
  bus_id: '00000000:18:00.0'
  nvlinks:
  - {index: 0, active: true}
  - {index: 1, active: true}
  - {index: 2, active: true}
  - {index: 5, active: false}
- {index: 1, name: NVIDIA H100 80GB HBM3, uuid: GPU-2, bus_id: '00000000:2A:00.0'}
"""


@pytest.mark.parametrize(
    ("faults", "field", "problem"),
    [
        ("[{gpu: 0}]", "faults.nvlink_down[0].after_calls", "required"),
        ("[{after_calls: 0}]", "faults.nvlink_down[0].gpu", "required"),
        ("[{gpu: 0, after_calls: 0, link: [1]}]", "faults.nvlink_down[0].link", "unknown field"),
        ("[{gpu: 0, after_calls: 0, links: 1}]", "faults.nvlink_down[0].links", "expected a list"),
        ("[{gpu: 0, after_calls: 0, links: []}]", "faults.nvlink_down[0].links", "names no link"),
        (
            "[{gpu: 0, after_calls: 0, links: [0, x]}]",
            "faults.nvlink_down[0].links[1]",
            "expected a link index, got a string",
        ),
        (
            "[{gpu: 0, after_calls: 0, links: [0, 3]}]",
            "faults.nvlink_down[0].links[1]",
            "GPU 0 has no link 3 (its links: 0-2,5)",
        ),
        (
            "[{gpu: 0, after_calls: 0, links: [0, 5, 0]}]",
            "faults.nvlink_down[0].links[2]",
            "link 0 is listed twice",
        ),
        (
            "[{gpu: 0, after_calls: 0, links: [0]}, {gpu: 0, after_calls: 9, links: [1]}]",
            "faults.nvlink_down[1].gpu",
            "GPU 0 is listed twice",
        ),
        ("[{gpu: 1, after_calls: 0}]", "faults.nvlink_down[0].gpu", "GPU 1 has no NVLinks"),
        ("[{gpu: 2, after_calls: 0}]", "faults.nvlink_down[0].gpu", "GPU 2 does not exist"),
    ],
)
def test_bad_nvlink_down_faults_name_file_and_field(
    tmp_path: Path, faults: str, field: str, problem: str
) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(NVLINK_FACTS_HEAD + f"faults:\n  nvlink_down: {faults}\n")
    with pytest.raises(FactsError) as info:
        load_profile(str(path))
    assert info.value.source == str(path)
    assert info.value.path == field
    assert problem in info.value.problem


def test_new_faults_round_trip_through_the_profile_yaml(tmp_path: Path) -> None:
    section = textwrap.dedent(
        """\
        faults:
          gpu_lost: [{gpu: 0, after_calls: 12}]
          gpu_vanished: [{gpu: 1, after_calls: 40}]
          nvlink_down:
          - {gpu: 0, after_calls: 7, links: [5, 1]}
        """
    )
    path = tmp_path / "machine.yaml"
    path.write_text(NVLINK_FACTS_HEAD + section)
    profile = load_profile(str(path))
    assert profile.faults == Faults(
        gpu_lost=(GpuLost(gpu=0, after_calls=12),),
        gpu_vanished=(GpuVanished(gpu=1, after_calls=40),),
        nvlink_down=(NvLinkDown(gpu=0, after_calls=7, links=(5, 1)),),
    )
    every_link = Faults(nvlink_down=(NvLinkDown(gpu=0, after_calls=0),))
    for faults in (profile.faults, every_link):
        document = faults_to_dict(faults)
        assert parse_faults(document, "<dict>", profile.facts.gpus) == faults
        # And through YAML text again, as a profile carries it.
        again = tmp_path / "again.yaml"
        again.write_text(NVLINK_FACTS_HEAD + yaml.safe_dump({"faults": document}))
        assert load_profile(str(again)).faults == faults
    assert "links" not in faults_to_dict(every_link)["nvlink_down"][0]
    text = render_machine_file(profile.facts, profile.faults)
    assert "fault_gpu_vanished 1 40\n" in text and "fault_nvlink_down 0 7 5,1\n" in text
    assert "fault_nvlink_down 0 0 -\n" in render_machine_file(profile.facts, every_link)


def test_faults_section_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(
        FACTS_HEAD
        + textwrap.dedent(
            """\
            faults:
              errors:
              - {call: nvmlDeviceGetName, error: NVML_ERROR_GPU_IS_LOST, gpu: 1, times: 3}
              - {call: nvmlInitWithFlags, error: LIB_RM_VERSION_MISMATCH}
              - {call: nvmlDeviceGetUUID, error: 999}
              gpu_lost: [{gpu: 0, after_calls: 12}]
              driver_not_loaded_inits: 2
            """
        )
    )
    faults = load_profile(str(path)).faults
    assert faults.errors == (
        CallError(call="nvmlDeviceGetName", code=15, gpu=1, times=3),
        CallError(call="nvmlInitWithFlags", code=18),
        CallError(call="nvmlDeviceGetUUID", code=999),
    )
    assert (faults.gpu_lost[0].gpu, faults.gpu_lost[0].after_calls) == (0, 12)
    assert faults.driver_not_loaded_inits == 2


def test_unservable_facts_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "machine.yaml"
    path.write_text(
        "gpus:\n- {index: 0, name: Tesla T4, uuid: GPU-1, bus_id: '00000000:00:1E.0',\n"
        "   nvlinks: [{index: 40, active: true}]}\n"
    )
    with pytest.raises(FactsError, match=r"gpus\[0\]\.nvlinks\[0\]\.index: 40"):
        load_profile(str(path))
    with pytest.raises(FactsError, match=r"<facts>: gpus\[0\]\.name: .*95-byte limit"):
        load_profile_from_facts(NodeFacts(gpus=(Gpu(0, "x" * 100, "GPU-1", "00000000:01:00.0"),)))


def load_profile_from_facts(facts: NodeFacts) -> None:
    with simulate(facts):
        pass


# --------------------------------------------------------------------------- simulate


def test_library_path_points_at_the_built_library() -> None:
    path = library_path()
    assert path.is_file() and path.name.startswith("_nvmlsim")


def test_library_exports_every_listed_call() -> None:
    library = ctypes.CDLL(str(library_path()))
    for call in (*EXPORTED_CALLS, "gfdsim_configure", "gfdsim_last_error"):
        assert hasattr(library, call), call
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed; the exported set was checked by name only")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(library_path())],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-2:-1] == ["T"]}
    assert {s for s in exported if s.startswith("nvml")} == set(EXPORTED_CALLS)


def test_sysfs_tree_and_cleanup(tmp_path: Path) -> None:
    with simulate("dgx-a100", workdir=tmp_path) as machine:
        root = machine.sysfs_root
        assert root.is_relative_to(tmp_path)
        device = root / "bus/pci/devices/0000:bd:00.0"
        assert (device / "class").read_text() == "0x030200\n"
        assert (device / "numa_node").read_text() == "5\n"
        assert (device / "local_cpulist").read_text() == "80-95,208-223\n"
        assert (device / "vendor").read_text() == "0x10de\n"
        assert (device / "device").read_text() == "0x20b0\n"
        assert (device / "config").read_bytes()[:4] == bytes([0xDE, 0x10, 0xB0, 0x20])
        assert machine.machine_type_file == root / "class/dmi/id/product_name"
        assert machine.machine_type_file.read_text() == "DGXA100 920-23687-2530-000\n"
        assert len(list((root / "bus/pci/devices").iterdir())) == 8
        assert machine.config_path.read_text().startswith("gfdsim-config 1\n")
        assert (machine.nvml_dir / "libnvidia-ml.so.1").resolve() == machine.library_path.resolve()
        workdir = machine.config_path.parent
    assert not workdir.exists()


def test_absent_facts_leave_sysfs_files_out(tmp_path: Path) -> None:
    facts = NodeFacts(gpus=(Gpu(0, "Tesla T4", "GPU-1", "00000001:0A:00.0"),))
    with simulate(facts, workdir=tmp_path) as machine:
        device = machine.sysfs_root / "bus/pci/devices/0001:0a:00.0"
        assert sorted(p.name for p in device.iterdir()) == [
            "config",
            "numa_node",
            "resource",
            "vendor",
        ]
        assert (device / "numa_node").read_text() == "-1\n"
        # Without vGPU facts: what the kernel gives an unprivileged reader.
        assert len((device / "config").read_bytes()) == 64
        assert not machine.machine_type_file.exists()


def test_one_simulation_at_a_time() -> None:
    with (
        simulate("t4-single"),
        pytest.raises(GfdError, match="already active"),
        simulate("t4-single"),
    ):
        pass
    with simulate("t4-single"):  # the failed attempt released nothing it did not hold
        pass


# --------------------------------------------------------------------------- machine file


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty file"),
        ("gpu 0\n", "line 1: expected 'gfdsim-config 1'"),
        ("gfdsim-config 1\nname x\n", "line 2: 'name' comes before any 'gpu' line"),
        ("gfdsim-config 1\ngpu 1\n", "line 2: gpu: expected GPU 0 next, got 1"),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\ncolour red\n", "line 4: unknown key 'colour'"),
        ("gfdsim-config 1\ngpu 0\n", "GPU 0 has no bus_id"),
        ("gfdsim-config 1\ngpu 0\nbus_id zz\n", "line 3: bus_id: 'zz' is not a PCI bus id"),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nbrand x\n", "line 4: brand: 'x' is not"),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\ncompute_capability 8\n",
            "expected 2 numbers, got 1",
        ),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\ncpu_affinity 3-1\n", "not a cpulist"),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nnvlink 36 1 - -\n", "not below 36"),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nmig_name x\n", "comes before any 'mig' line"),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\npair 0 1 10\n", "line 4: pair: 0 1 must be"),
        ("gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nfault_gpu_lost 3 1\n", "GPU 3 does not exist"),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nnvlink_p2p 0 1 0\n",
            "line 4: nvlink_p2p: 0 1 must be two GPU indices a < b below 1",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\ngpu 1\nbus_id 0:2:0.0\nnvlink_p2p 0 1 7\n",
            "line 6: nvlink_p2p: 7 is not an nvmlGpuP2PStatus_t",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\ngpu 1\nbus_id 0:2:0.0\n"
            "nvlink_p2p 0 1 0\nnvlink_p2p 0 1 5\n",
            "line 7: nvlink_p2p: pair 0 1 is listed twice",
        ),
        ("gfdsim-config 1\nfault_error nvmlInit 0 - -\n", "'0' is not an NVML error code"),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nfault_gpu_vanished 3 1\n",
            "line 4: fault_gpu_vanished: GPU 3 does not exist",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nfault_gpu_lost 0 1\nfault_gpu_vanished 0 2\n",
            "line 5: fault_gpu_vanished: GPU 0 is lost or vanishes already",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nfault_nvlink_down 0 1\n",
            "fault_nvlink_down: expected GPU AFTER_CALLS LINKS|-",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nfault_nvlink_down 0 1 -\n",
            "fault_nvlink_down: GPU 0 has no links",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nnvlink 0 1 - -\nfault_nvlink_down 0 1 0,4\n",
            "line 5: fault_nvlink_down: GPU 0 has no link 4",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nnvlink 0 1 - -\nfault_nvlink_down 0 1 x\n",
            "fault_nvlink_down: 'x' is not a link index",
        ),
        (
            "gfdsim-config 1\ngpu 0\nbus_id 0:1:0.0\nnvlink 0 1 - -\nfault_nvlink_down 0 1 0,0\n",
            "fault_nvlink_down: link 0 of GPU 0 is listed twice",
        ),
    ],
)
def test_library_rejects_malformed_machine_files(tmp_path: Path, text: str, problem: str) -> None:
    from gfd.sim import configure_library

    path = tmp_path / "machine.conf"
    path.write_text(text)
    library = ctypes.CDLL(str(library_path()))
    try:
        with pytest.raises(GfdError) as info:
            configure_library(library, path)
        assert str(path) in str(info.value) and problem in str(info.value)
        with pytest.raises(GfdError, match="cannot open"):
            configure_library(library, tmp_path / "missing.conf")
    finally:
        configure_library(library, None)


def test_machine_file_renders_every_fact() -> None:
    profile = load_profile(MIG_PROFILE)
    text = render_machine_file(profile.facts, profile.faults)
    assert "pair 0 1 20\n" in text and "nvlink 11 1 00000000:C9:00.0 2\n" in text
    assert "mig_gi_profile 9 2 3 19968\n" in text and "mig_gi_profile 19 0 1 4864\n" in text
    assert "cpu_affinity 48-63,176-191\n" in text and "mig_mode 1 1\n" in text


# --------------------------------------------------------------------------- other processes


def test_another_process_finds_the_machine_through_the_environment() -> None:
    # The consumer loads "libnvidia-ml.so.1" the way pynvml and nvidia-smi do.
    script = textwrap.dedent(
        """
        import json, pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(3)
        print(json.dumps([pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(handle),
                          pynvml.nvmlSystemGetDriverVersion()]))
        pynvml.nvmlShutdown()
        """
    )
    with simulate("pcie-l4x4") as machine:
        env = {**os.environ, **machine.environment()}
        result = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [4, "NVIDIA L4", "570.172.08"]


def test_a_bad_machine_file_from_the_environment_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "machine.conf"
    bad.write_text("gfdsim-config 1\nbogus 1\n")
    script = (
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
        "print(lib.nvmlInitWithFlags(0), lib.nvmlInit_v2())"
    )
    env = {**os.environ, CONFIG_ENV: str(bad)}
    result = subprocess.run(
        [sys.executable, "-c", script, str(library_path())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.split() == [str(NVML_ERROR_CODES["NVML_ERROR_UNKNOWN"])] * 2
    assert f"{bad}: line 2: unknown key 'bogus'" in result.stderr


def test_command_line_prepares_a_machine_for_a_shell(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gfd.sim", "t4-single", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in result.stdout.splitlines()
        if line.startswith("export ")
    )
    assert exports[CONFIG_ENV] == str(tmp_path / "m" / "machine.conf")
    assert exports["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(tmp_path / "m" / "lib")
    assert (tmp_path / "m" / "sys/class/dmi/id/product_name").read_text() == "g4dn.xlarge\n"
    missing = subprocess.run(
        [sys.executable, "-m", "gfd.sim", "no-such-machine", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "no-such-machine" in missing.stderr


def test_unreadable_profiles_name_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00gpus")
    with pytest.raises(FactsError, match=re.escape(f"{binary}: not UTF-8 text")):
        load_profile(str(binary))
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(FactsError, match=re.escape(f"{listing}: expected a mapping")):
        load_profile(str(listing))


def test_resource_file_is_what_nvidias_pci_reader_parses(tmp_path: Path) -> None:
    """NVIDIA's go-nvlib reads ``resource`` as lines of exactly three numbers (start end flags)
    and keeps the regions of non-zero size; a GPU has BAR0, BAR1 (>= its memory) and BAR3."""
    with simulate("dgx-h100", workdir=tmp_path) as machine:
        regions: dict[str, dict[int, tuple[int, int]]] = {}
        for device in sorted((machine.sysfs_root / "bus/pci/devices").iterdir()):
            lines = (device / "resource").read_text().strip().split("\n")
            assert len(lines) == 13
            fields = [line.split(" ") for line in lines]
            assert all(len(f) == 3 for f in fields)
            regions[device.name] = {
                i: (int(f[0], 0), int(f[1], 0)) for i, f in enumerate(fields) if f[0] != f[1]
            }
    memory = machine.profile.facts.gpus[0].memory_total_bytes
    assert memory is not None
    spans = []
    for bars in regions.values():
        assert sorted(bars) == [0, 1, 3]
        assert bars[0][1] - bars[0][0] + 1 == 16 << 20 and bars[0][1] < 1 << 32
        assert bars[1][1] - bars[1][0] + 1 >= memory
        spans.extend(bars.values())
    spans.sort()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), "regions overlap"
