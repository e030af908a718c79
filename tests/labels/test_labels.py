"""Core labels: each rule of reference/GFD-COMPAT.md on table-driven cases, whole maps compared."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfd.facts import NodeFacts, VgpuInfo
from gfd.labels import LabelOptions, build_labels, merge, validated
from gfd.labels.core import gpu_family
from gfd.labels.rules import is_valid_key, is_valid_value, reference_sanitise, sanitise_value
from tests.factories import MIB, make_facts, make_gpu

P = "nvidia.com/"

H100_LABELS = {
    f"{P}cuda.driver-version.major": "550",
    f"{P}cuda.driver-version.minor": "107",
    f"{P}cuda.driver-version.revision": "02",
    f"{P}cuda.driver-version.full": "550.107.02",
    f"{P}cuda.driver.major": "550",
    f"{P}cuda.driver.minor": "107",
    f"{P}cuda.driver.rev": "02",
    f"{P}cuda.runtime-version.major": "12",
    f"{P}cuda.runtime-version.minor": "4",
    f"{P}cuda.runtime-version.full": "12.4",
    f"{P}cuda.runtime.major": "12",
    f"{P}cuda.runtime.minor": "4",
    f"{P}gpu.machine": "DGXH100",
    f"{P}gpu.product": "NVIDIA-H100-80GB-HBM3",
    f"{P}gpu.count": "2",
    f"{P}gpu.replicas": "1",
    f"{P}gpu.sharing-strategy": "none",
    f"{P}gpu.memory": "81559",
    f"{P}gpu.compute.major": "9",
    f"{P}gpu.compute.minor": "0",
    f"{P}gpu.family": "hopper",
    f"{P}gpu.mode": "compute",
    f"{P}mig.capable": "true",
    f"{P}mps.capable": "false",
}


def labels_of(facts, **options):  # type: ignore[no-untyped-def]
    return dict(build_labels(facts, LabelOptions(**options)).labels)


def test_whole_map_for_two_h100() -> None:
    facts = make_facts([make_gpu(0), make_gpu(1)])
    assert labels_of(facts) == H100_LABELS


def test_timestamp_is_the_given_start_time() -> None:
    facts = make_facts([make_gpu(0), make_gpu(1)])
    assert labels_of(facts, timestamp=1700000000) == {
        **H100_LABELS,
        f"{P}gfd.timestamp": "1700000000",
    }


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("550.107.02", ("550", "107", "02")),
        ("535.54", ("535", "54", "")),
        ("580.159.03", ("580", "159", "03")),
    ],
)
def test_driver_version_split(driver: str, expected: tuple[str, str, str]) -> None:
    labels = labels_of(make_facts(driver_version=driver))
    assert (
        labels[f"{P}cuda.driver-version.major"],
        labels[f"{P}cuda.driver-version.minor"],
        labels[f"{P}cuda.driver-version.revision"],
    ) == expected
    assert labels[f"{P}cuda.driver.rev"] == expected[2]
    assert labels[f"{P}cuda.driver-version.full"] == driver


def test_no_driver_version_means_no_driver_labels() -> None:
    labels = labels_of(make_facts(driver_version=None))
    assert not any(k.startswith(f"{P}cuda.driver") for k in labels)


@pytest.mark.parametrize(
    ("cuda", "major", "minor", "full"),
    [
        (12040, "12", "4", "12.4"),
        (11080, "11", "8", "11.8"),
        (13000, "13", "0", "13.0"),
        (12090, "12", "9", "12.9"),
    ],
)
def test_cuda_runtime_version(cuda: int, major: str, minor: str, full: str) -> None:
    labels = labels_of(make_facts(cuda_driver_version=cuda))
    assert labels[f"{P}cuda.runtime-version.major"] == major
    assert labels[f"{P}cuda.runtime-version.minor"] == minor
    assert labels[f"{P}cuda.runtime-version.full"] == full
    assert (labels[f"{P}cuda.runtime.major"], labels[f"{P}cuda.runtime.minor"]) == (major, minor)


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        ("DGXH100", "DGXH100"),
        ("ProLiant XL675d Gen10 Plus", "ProLiant-XL675d-Gen10-Plus"),
        ("  PowerEdge XE9680  ", "PowerEdge-XE9680"),
        ("", "unknown"),
        (None, "unknown"),
        ("((()))", "unknown"),
    ],
)
def test_machine(machine: str | None, expected: str) -> None:
    assert labels_of(make_facts(machine_type=machine))[f"{P}gpu.machine"] == expected


@pytest.mark.parametrize(
    ("major", "minor", "family"),
    [
        (1, 3, "tesla"),
        (2, 0, "fermi"),
        (3, 7, "kepler"),
        (5, 2, "maxwell"),
        (6, 0, "pascal"),
        (7, 0, "volta"),
        (7, 2, "volta"),
        (7, 5, "turing"),
        (8, 0, "ampere"),
        (8, 6, "ampere"),
        (8, 9, "ada-lovelace"),
        (9, 0, "hopper"),
        (10, 0, "blackwell"),
        (12, 0, "blackwell"),
        (13, 0, "rubin"),
        (4, 0, "undefined"),
        (11, 0, "undefined"),
        (99, 9, "undefined"),
    ],
)
def test_family(major: int, minor: int, family: str) -> None:
    assert gpu_family(major, minor) == family
    labels = labels_of(make_facts([make_gpu(0, compute_major=major, compute_minor=minor)]))
    assert labels[f"{P}gpu.family"] == family


@pytest.mark.parametrize("major", [0, None])
def test_compute_labels_omitted_without_major(major: int | None) -> None:
    labels = labels_of(make_facts([make_gpu(0, compute_major=major, compute_minor=None)]))
    for key in ("gpu.compute.major", "gpu.compute.minor", "gpu.family"):
        assert f"{P}{key}" not in labels


@pytest.mark.parametrize(
    ("memory", "expected"),
    [(81559 * MIB, "81559"), (15360 * MIB + 123, "15360"), (0, None), (None, None)],
)
def test_memory_in_mib(memory: int | None, expected: str | None) -> None:
    labels = labels_of(make_facts([make_gpu(0, memory_total_bytes=memory)]))
    assert labels.get(f"{P}gpu.memory") == expected


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        ([0x030200, 0x030200], "compute"),
        ([0x030000, 0x030000], "graphics"),
        ([0x030000, 0x030200], "unknown"),
        ([0x030200, None], "unknown"),
        ([0x038000, 0x038000], "unknown"),
    ],
)
def test_gpu_mode(classes: list[int | None], mode: str) -> None:
    gpus = [make_gpu(i, pci_class=c) for i, c in enumerate(classes)]
    assert labels_of(make_facts(gpus))[f"{P}gpu.mode"] == mode


@pytest.mark.parametrize(
    ("modes", "capable"),
    [([None, None], "false"), ([False, None], "true"), ([True, True], "true")],
)
def test_mig_capable(modes: list[bool | None], capable: str) -> None:
    gpus = [make_gpu(i, mig_mode_current=m, mig_mode_pending=m) for i, m in enumerate(modes)]
    assert labels_of(make_facts(gpus))[f"{P}mig.capable"] == capable


def test_mig_enabled_full_gpu_has_zero_replicas() -> None:
    gpus = [make_gpu(0, mig_mode_current=True), make_gpu(1, mig_mode_current=True)]
    assert labels_of(make_facts(gpus))[f"{P}gpu.replicas"] == "0"


def test_one_mig_disabled_gpu_of_the_model_gives_replicas_one() -> None:
    gpus = [make_gpu(0, mig_mode_current=True), make_gpu(1, mig_mode_current=False)]
    assert labels_of(make_facts(gpus))[f"{P}gpu.replicas"] == "1"


def test_no_gpus_gives_only_node_labels() -> None:
    labels = labels_of(make_facts([]))
    assert not any(k.startswith(f"{P}gpu.") and k != f"{P}gpu.machine" for k in labels)
    assert f"{P}mig.capable" not in labels


def test_mixed_models_label_the_larger_group_deterministically() -> None:
    a100 = dict(name="NVIDIA A100 80GB PCIe", memory_total_bytes=81920 * MIB, compute_major=8)
    gpus = [make_gpu(0), make_gpu(1, **a100), make_gpu(2, **a100), make_gpu(3), make_gpu(4, **a100)]
    labels = labels_of(make_facts(gpus))
    assert labels[f"{P}gpu.product"] == "NVIDIA-A100-80GB-PCIe"
    assert labels[f"{P}gpu.count"] == "3"
    assert labels[f"{P}gpu.memory"] == "81920"
    assert all(labels_of(make_facts(gpus)) == labels for _ in range(20))


def test_mixed_models_tie_goes_to_lowest_gpu_index() -> None:
    other = dict(name="NVIDIA L4", memory_total_bytes=23034 * MIB, compute_major=8, compute_minor=9)
    gpus = [make_gpu(0, **other), make_gpu(1), make_gpu(2, **other), make_gpu(3)]
    labels = labels_of(make_facts(gpus))
    assert labels[f"{P}gpu.product"] == "NVIDIA-L4"
    assert labels[f"{P}gpu.count"] == "2"


# --------------------------------------------------------------------------- product names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA TITAN X (Pascal)", "NVIDIA-TITAN-X-Pascal"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA-GeForce-RTX-4090"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("Ünïcødé GPU ✓", "ncd-GPU"),
        ("-leading and trailing-", "leading-and-trailing"),
        ("(((", ""),
        ("a" * 200, "a" * 63),
        ("x" * 62 + "-yyy", "x" * 62),
        # Tabs and newlines are outside the kept set, so they vanish before the split.
        ("NVIDIA\tH200\nNVL", "NVIDIAH200NVL"),
    ],
)
def test_product_name_sanitising(name: str, expected: str) -> None:
    assert sanitise_value(name) == expected
    assert is_valid_value(sanitise_value(name))


def test_reference_sanitiser_matches_reference_examples() -> None:
    assert reference_sanitise("NVIDIA-TITAN-X-(Pascal)") == "NVIDIA-TITAN-X-Pascal"
    assert reference_sanitise("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"


def test_product_that_sanitises_to_nothing_gets_the_fallback() -> None:
    label_set = build_labels(make_facts([make_gpu(0, name="(((")]), LabelOptions())
    # Never an empty product (tests/labels/test_labels_edge_names.py has the whole table).
    assert label_set.labels[f"{P}gpu.product"] == "unknown"


@given(st.text(max_size=300))
def test_any_product_name_gives_valid_labels(name: str) -> None:
    label_set = build_labels(make_facts([make_gpu(0, name=name)]), LabelOptions())
    for key, value in label_set.labels.items():
        assert is_valid_key(key), key
        assert is_valid_value(value), (key, value)


@given(st.text(max_size=300))
def test_any_machine_type_gives_a_valid_label(machine: str) -> None:
    labels = build_labels(make_facts(machine_type=machine), LabelOptions()).labels
    assert is_valid_value(labels[f"{P}gpu.machine"])


def test_invalid_driver_version_value_is_dropped_with_reason() -> None:
    label_set = build_labels(make_facts(driver_version="550.(bad).x"), LabelOptions())
    dropped = dict(label_set.dropped)
    assert f"{P}cuda.driver-version.full" in dropped
    assert f"{P}cuda.driver-version.minor" in dropped
    assert "value" in dropped[f"{P}cuda.driver-version.full"]
    assert f"{P}cuda.driver-version.full" not in label_set.labels
    assert label_set.labels[f"{P}cuda.driver-version.major"] == "550"


# --------------------------------------------------------------------------- rules and merge


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("nvidia.com/gpu.product", True),
        ("gpu.product", True),
        ("Nvidia.com/gpu", False),
        ("nvidia.com/", False),
        ("/gpu", False),
        ("a/b/c", False),
        ("nvidia.com/" + "a" * 63, True),
        ("nvidia.com/" + "a" * 64, False),
        ("nvidia.com/-gpu", False),
        ("nvidia.com/gpu_", False),
        ("x" * 254 + "/a", False),
    ],
)
def test_key_rules(key: str, valid: bool) -> None:
    assert is_valid_key(key) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("a", True),
        ("a-b_c.d", True),
        ("-a", False),
        ("a-", False),
        ("a b", False),
        ("a" * 64, False),
        ("a" * 63, True),
        ("é", False),
    ],
)
def test_value_rules(value: str, valid: bool) -> None:
    assert is_valid_value(value) is valid


def test_merge_later_wins_and_validated_sorts() -> None:
    merged = merge([{"b": "1", "a": "1"}, {"a": "2"}])
    assert merged == {"a": "2", "b": "1"}
    assert list(validated({"z": "1", "a": "2"}).labels) == ["a", "z"]


def test_a_node_without_gpus_gets_no_gpu_labels() -> None:
    """As the reference labels it (measured: its oneshot on a simulated zero-GPU machine)."""
    facts = NodeFacts(
        driver_version="550.163.01", cuda_driver_version=12040, machine_type="DGX H100",
        vgpu=VgpuInfo(present=False),
    )  # fmt: skip
    labels = build_labels(facts, LabelOptions(timestamp=1700000000, mig_strategy="mixed")).labels
    assert labels == {"nvidia.com/gfd.timestamp": "1700000000", "nvidia.com/vgpu.present": "false"}
