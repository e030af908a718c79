"""vGPU: PCI config space parsing, reading under a sysfs root, and the labels (whole maps),
from config space and from NVML's virtualization mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from gfd.facts import FactsError, NodeFacts, VgpuInfo
from gfd.facts.pci import PciFunction, UnreadableConfig, nvidia_display_functions, vendor_capability
from gfd.labels import LabelOptions, build_labels
from gfd.labels.vgpu import PRESENT_KEY, UNREADABLE_REASON, vgpu_labels
from gfd.nvml.reader import read_facts
from gfd.nvml.vgpu import host_driver, is_vgpu_capability, read_vgpu, vgpu_from_functions
from gfd.sim import SimulationProfile, load_profile, simulate
from gfd.sim.pci_config import config_space
from tests.factories import make_facts, make_gpu

P = "nvidia.com/"
GUEST = VgpuInfo(present=True, host_driver_version="550.54.16", host_driver_branch="r550_00")


def write_function(
    root: Path,
    address: str,
    config: bytes | None,
    *,
    vendor: int = 0x10DE,
    pci_class: int = 0x030200,
) -> None:
    device = root / "bus" / "pci" / "devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"0x{vendor:04x}\n")
    (device / "class").write_text(f"0x{pci_class:06x}\n")
    if config is not None:
        (device / "config").write_bytes(config)


# --------------------------------------------------------------------------- parsing


def test_vgpu_capability_is_found_and_parsed() -> None:
    capability = vendor_capability(config_space(0x20B0, 0x030200, GUEST))
    assert capability is not None
    assert is_vgpu_capability(capability)
    assert host_driver(capability) == ("550.54.16", "r550_00")


def test_passthrough_gpu_has_a_vendor_capability_without_the_signature() -> None:
    capability = vendor_capability(config_space(0x20B0, 0x030200, VgpuInfo(present=False)))
    assert capability is not None
    assert not is_vgpu_capability(capability)


def test_no_capability_list_means_no_capability() -> None:
    config = bytearray(config_space(0x20B0, 0x030200, GUEST))
    config[0x06] = 0
    assert vendor_capability(bytes(config)) is None


@pytest.mark.parametrize("damage", ["loop", "broken"])
def test_damaged_capability_lists_end_the_walk(damage: str) -> None:
    config = bytearray(config_space(0x20B0, 0x030200, GUEST))
    if damage == "loop":
        config[0x61] = 0x60  # the power-management capability points at itself
    else:
        config[0x60] = 0xFF
    assert vendor_capability(bytes(config)) is None


def test_truncated_config_space_is_refused() -> None:
    with pytest.raises(ValueError, match="64 bytes"):
        vendor_capability(config_space(0x20B0, 0x030200, None))


@pytest.mark.parametrize(
    ("capability", "driver"),
    [
        # Records: another one (id 2, 4 bytes) first, then the host driver record.
        (
            b"\x09\x00\x1f"
            + b"VF"
            + b"\x02\x04\x01\x00"
            + b"\x00\x16"
            + b"460.16".ljust(10, b"\0")
            + b"r460_00".ljust(10, b"\0"),
            ("460.16", "r460_00"),
        ),
        # The driver record is cut short.
        (b"\x09\x00\x0f" + b"VF" + b"\x00\x16" + b"460.16\0\0", None),
        # A zero-length record would loop forever.
        (b"\x09\x00\x09" + b"VF" + b"\x03\x00\x00\x00", None),
        # No driver record at all.
        (b"\x09\x00\x09" + b"VF" + b"\x02\x04\x01\x00", None),
    ],
)
def test_host_driver_record(capability: bytes, driver: tuple[str, str] | None) -> None:
    assert is_vgpu_capability(capability)
    assert host_driver(capability) == driver


def test_first_vgpu_function_with_a_driver_record_wins() -> None:
    functions = [
        PciFunction("0000:01:00.0", config_space(1, 0x030200, VgpuInfo(present=False))),
        PciFunction("0000:02:00.0", config_space(1, 0x030200, VgpuInfo(present=True))),
        PciFunction("0000:03:00.0", config_space(1, 0x030200, GUEST)),
    ]
    assert vgpu_from_functions(functions) == GUEST
    assert vgpu_from_functions(functions[:2]) == VgpuInfo(present=True)
    assert vgpu_from_functions(functions[:1]) == VgpuInfo(present=False)


# --------------------------------------------------------------------------- reading sysfs


def test_read_vgpu_guest(tmp_path: Path) -> None:
    write_function(tmp_path, "0000:07:00.0", config_space(0x20B0, 0x030200, GUEST))
    # Other vendors' functions and NVIDIA's non-display functions (NVSwitch, audio) are skipped.
    write_function(tmp_path, "0000:00:01.0", b"", vendor=0x8086, pci_class=0x060400)
    write_function(tmp_path, "0000:c4:00.0", None, pci_class=0x068000)
    assert read_vgpu(tmp_path) == GUEST


def test_read_vgpu_bare_metal(tmp_path: Path) -> None:
    write_function(tmp_path, "0000:07:00.0", config_space(0x20B0, 0x030200, VgpuInfo(False)))
    assert read_vgpu(tmp_path) == VgpuInfo(present=False)


@pytest.mark.parametrize("config", [None, b"\xde\x10" + bytes(62)], ids=["missing", "truncated"])
def test_unreadable_config_gives_no_facts_and_no_error(
    tmp_path: Path, config: bytes | None
) -> None:
    write_function(tmp_path, "0000:07:00.0", config_space(0x20B0, 0x030200, GUEST))
    write_function(tmp_path, "0000:0f:00.0", config)
    assert read_vgpu(tmp_path) is None
    with pytest.raises(UnreadableConfig, match="0000:0f:00.0"):
        nvidia_display_functions(tmp_path)


def test_no_sysfs_gives_no_facts_and_no_nvidia_function_no_guest(tmp_path: Path) -> None:
    assert read_vgpu(tmp_path / "absent") is None
    write_function(tmp_path, "0000:00:01.0", None, vendor=0x8086)
    # NVIDIA's reference labels a bus without NVIDIA display functions vgpu.present=false
    # (measured: its oneshot on a machine without NVIDIA devices).
    assert read_vgpu(tmp_path) == VgpuInfo(present=False)


@pytest.mark.parametrize("vgpu", [GUEST, VgpuInfo(present=False), VgpuInfo(present=True), None])
def test_simulated_vgpu_round_trips_through_the_reader(vgpu: VgpuInfo | None) -> None:
    facts = replace(load_profile("t4-single").facts, vgpu=vgpu)
    with simulate(SimulationProfile(facts=facts)) as machine:
        read = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    assert read == facts


# --------------------------------------------------------------------------- labels

BASE_KEYS = set(build_labels(make_facts(), LabelOptions()).labels)


@pytest.mark.parametrize(
    ("vgpu", "expected"),
    [
        (
            GUEST,
            {
                f"{P}vgpu.present": "true",
                f"{P}vgpu.host-driver-version": "550.54.16",
                f"{P}vgpu.host-driver-branch": "r550_00",
            },
        ),
        (VgpuInfo(present=True), {f"{P}vgpu.present": "true"}),
        (VgpuInfo(present=False), {f"{P}vgpu.present": "false"}),
        (None, {}),
    ],
    ids=["guest", "guest-without-driver-record", "bare-metal", "unreadable"],
)
def test_vgpu_labels(vgpu: VgpuInfo | None, expected: dict[str, str]) -> None:
    facts: NodeFacts = make_facts(vgpu=vgpu)
    assert vgpu_labels(facts) == expected
    label_set = build_labels(facts, LabelOptions())
    labels = dict(label_set.labels)
    assert {k: v for k, v in labels.items() if k not in BASE_KEYS} == expected
    vgpu_withheld = tuple(w for w in label_set.withheld if w[0].startswith(f"{P}vgpu."))
    assert vgpu_withheld == (() if vgpu is not None else ((PRESENT_KEY, UNREADABLE_REASON),))


NONE, PASSTHROUGH, VGPU, HOST_VGPU = (
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU,
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU,
)
WITHHELD = ((PRESENT_KEY, UNREADABLE_REASON),)


@pytest.mark.parametrize(
    ("modes", "vgpu", "expected", "withheld"),
    [
        # nvml.h: NONE is bare metal, PASSTHROUGH a GPU passed to a VM: no vGPU guest, which
        # is all vgpu.present says (the reference's privileged answer there is false).
        ((NONE, NONE), None, {f"{P}vgpu.present": "false"}, ()),
        ((PASSTHROUGH,), None, {f"{P}vgpu.present": "false"}, ()),
        ((NONE, PASSTHROUGH), None, {f"{P}vgpu.present": "false"}, ()),
        # NVML's word stands over config space when it says no guest.
        ((NONE,), GUEST, {f"{P}vgpu.present": "false"}, ()),
        # A guest, or a GPU NVML cannot tell of: config space answers, or nothing does.
        ((VGPU,), None, {}, WITHHELD),
        ((NONE, None), None, {}, WITHHELD),
        ((HOST_VGPU,), None, {}, WITHHELD),
        ((HOST_VGPU,), VgpuInfo(present=False), {f"{P}vgpu.present": "false"}, ()),
        (
            (VGPU,),
            GUEST,
            {
                f"{P}vgpu.present": "true",
                f"{P}vgpu.host-driver-version": "550.54.16",
                f"{P}vgpu.host-driver-branch": "r550_00",
            },
            (),
        ),
    ],
    ids=[
        "bare-metal-unreadable",
        "passthrough-unreadable",
        "mixed-unreadable",
        "bare-metal-config-says-guest",
        "guest-unreadable",
        "one-gpu-untold-unreadable",
        "host-unreadable",
        "host-readable",
        "guest-readable",
    ],
)
def test_nvml_virtualization_mode_answers_where_it_can(
    modes: tuple[int | None, ...],
    vgpu: VgpuInfo | None,
    expected: dict[str, str],
    withheld: tuple[tuple[str, str], ...],
) -> None:
    gpus = [make_gpu(i, virtualization_mode=mode) for i, mode in enumerate(modes)]
    label_set = build_labels(make_facts(gpus, vgpu=vgpu), LabelOptions())
    labels = dict(label_set.labels)
    assert {k: v for k, v in labels.items() if k not in BASE_KEYS} == expected
    assert label_set.withheld == withheld


def test_nothing_is_withheld_without_gpus() -> None:
    assert build_labels(make_facts([]), LabelOptions()).withheld == ()


@pytest.mark.parametrize(
    ("vgpu", "field", "problem"),
    [
        (VgpuInfo(False, "550.54"), "vgpu", "only in a vGPU guest"),
        (VgpuInfo(True, None, "r550_00"), "vgpu.host_driver_branch", "needs host_driver_version"),
        (VgpuInfo(True, "550.54.16.1234", "r550"), "vgpu.host_driver_version", "1 to 10"),
        (VgpuInfo(True, "", None), "vgpu.host_driver_version", "1 to 10"),
        (VgpuInfo(True, "55\u00e9", None), "vgpu.host_driver_version", "ASCII"),
    ],
)
def test_vgpu_facts_the_capability_cannot_carry_are_refused(
    vgpu: VgpuInfo, field: str, problem: str
) -> None:
    facts = replace(load_profile("t4-single").facts, vgpu=vgpu)
    with (
        pytest.raises(FactsError) as info,
        simulate(SimulationProfile(facts=facts, source="x.yaml")),
    ):
        pass
    assert info.value.path == field
    assert problem in info.value.problem


def test_vgpu_facts_need_a_display_function() -> None:
    base = load_profile("t4-single").facts
    facts = replace(base, gpus=(replace(base.gpus[0], pci_class=None),), vgpu=GUEST)
    with pytest.raises(FactsError, match="display"), simulate(SimulationProfile(facts=facts)):
        pass
