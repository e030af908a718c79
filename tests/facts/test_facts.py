"""Facts: lossless YAML/JSON round trip and errors that name the file, the field and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfd.facts import (
    GPU_VIRTUALIZATION_MODES,
    FabricInfo,
    FactsError,
    MigDevice,
    NodeFacts,
    NvLink,
    NvLinkP2P,
    PciPair,
    cpulist_from_ids,
    dump_facts,
    facts_from_dict,
    parse_document,
)
from tests.factories import make_facts, make_gpu
from tests.facts_readback import cpulist_to_ids, load_facts, load_facts_text, pci_level

RICH = make_facts(
    [
        make_gpu(
            0,
            nvlinks=(
                NvLink(
                    index=0, active=True, remote_bus_id="00000000:C3:00.0", remote_type="switch"
                ),
                NvLink(index=1, active=False),
            ),
            nvlink_version=6,
            fabric=FabricInfo(
                cluster_uuid="5a2c0e1f-0000-4000-8000-00000000c0de",
                clique_id=7,
                state="completed",
                status=0,
                health_mask=0,
            ),
            virtualization_mode=GPU_VIRTUALIZATION_MODES["passthrough"],
            mig_devices=(
                MigDevice(
                    index=0,
                    uuid="MIG-1",
                    name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                    memory_total_bytes=10 << 30,
                    gpu_instance_id=1,
                    compute_instance_id=0,
                    gi_profile_id=19,
                    gi_slice_count=1,
                    gi_memory_mib=9856,
                    ci_slice_count=1,
                    multiprocessors=16,
                    copy_engines=1,
                    decoders=1,
                    jpeg_decoders=1,
                ),
            ),
        ),
        make_gpu(1, cpu_affinity=None, numa_node=None, pci_class=None),
    ],
    pci_pairs=(PciPair(a=0, b=1, level="node"),),
    nvlink_p2p=(NvLinkP2P(a=0, b=1, status="ok"),),
)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip_is_lossless(fmt: str) -> None:
    text = dump_facts(RICH, fmt)  # type: ignore[arg-type]
    assert load_facts_text(text, "<test>") == RICH
    assert dump_facts(load_facts_text(text, "<test>"), fmt) == text  # type: ignore[arg-type]


def test_virtualization_mode_is_written_only_where_nvml_reported_it() -> None:
    plain = parse_document(dump_facts(RICH, "json"), "node.json")
    assert plain["gpus"][0]["virtualization_mode"] == 1
    # Facts read before the field existed (or from a driver that does not report it) dump
    # as they did, so the records keyed by their text stay valid.
    assert "virtualization_mode" not in plain["gpus"][1]
    assert facts_from_dict(plain).gpus[1].virtualization_mode is None


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(dump_facts(RICH))
    assert load_facts(path) == RICH


def test_extra_keys_are_ignored_only_when_asked() -> None:
    text = dump_facts(RICH) + "faults: {}\n"
    assert load_facts_text(text, "<t>", extra_keys=frozenset({"faults"})) == RICH
    with pytest.raises(FactsError, match="faults: unknown field"):
        load_facts_text(text, "<t>")


def _bad(mutate):  # type: ignore[no-untyped-def]
    import yaml

    data = yaml.safe_load(dump_facts(RICH))
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("mutate", "path", "problem"),
    [
        (
            lambda d: d["gpus"][0].update(memory_total_bytes="80GB"),
            "gpus[0].memory_total_bytes",
            "expected an integer, got a string",
        ),
        (lambda d: d["gpus"][0].pop("uuid"), "gpus[0].uuid", "required field is missing"),
        (lambda d: d["gpus"][1].update(colour="green"), "gpus[1].colour", "unknown field"),
        (
            lambda d: d["gpus"][0]["nvlinks"][0].update(remote_type="bridge"),
            "gpus[0].nvlinks[0].remote_type",
            "'bridge' is not one of",
        ),
        (
            lambda d: d["gpus"][0]["nvlinks"][0].update(active="yes"),
            "gpus[0].nvlinks[0].active",
            "expected a boolean",
        ),
        (
            lambda d: d["gpus"][0].update(bus_id="1b:00.0"),
            "gpus[0].bus_id",
            "not an NVML PCI bus id",
        ),
        (
            lambda d: d["gpus"][1].update(bus_id=d["gpus"][0]["bus_id"]),
            "gpus[1].bus_id",
            "used by two GPUs",
        ),
        (lambda d: d["gpus"][1].update(index=5), "gpus[1].index", "indices must be 0..N-1"),
        (
            lambda d: d["gpus"][0].update(cpu_affinity="0-4,x"),
            "gpus[0].cpu_affinity",
            "not a cpulist",
        ),
        (
            lambda d: d["pci_pairs"][0].update(level="far"),
            "pci_pairs[0].level",
            "'far' is not one of",
        ),
        (
            lambda d: d["pci_pairs"].append({"a": 1, "b": 0, "level": "node"}),
            "pci_pairs[1]",
            "must name two GPU indices",
        ),
        (
            lambda d: d["pci_pairs"].append({"a": 0, "b": 1, "level": "node"}),
            "pci_pairs[1]",
            "listed twice",
        ),
        (
            lambda d: d["nvlink_p2p"].append({"a": 0, "b": 2, "status": "ok"}),
            "nvlink_p2p[1]",
            "pair (0, 2) must name two GPU indices a < b below 2",
        ),
        (
            lambda d: d["nvlink_p2p"].append({"a": 0, "b": 1, "status": "unknown"}),
            "nvlink_p2p[1]",
            "pair (0, 1) is listed twice",
        ),
        (
            lambda d: d["nvlink_p2p"][0].update(status="OK"),
            "nvlink_p2p[0].status",
            "'OK' is not one of 'ok', 'chipset-not-supported'",
        ),
        (
            lambda d: d["nvlink_p2p"][0].pop("status"),
            "nvlink_p2p[0].status",
            "required field is missing",
        ),
        (lambda d: d.update(schema_version=7), "schema_version", "unsupported schema version 7"),
        (lambda d: d.update(gpus={"a": 1}), "gpus", "expected a list"),
        (lambda d: d["gpus"][0].update(fabric="none"), "gpus[0].fabric", "expected a mapping"),
        (
            lambda d: d["gpus"][0].update(memory_total_bytes=True),
            "gpus[0].memory_total_bytes",
            "got a boolean",
        ),
    ],
)
def test_malformed_facts_name_field_and_problem(mutate, path: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FactsError) as caught:
        facts_from_dict(_bad(mutate), "node.yaml")
    assert caught.value.source == "node.yaml"
    assert caught.value.path == path
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"node.yaml: {path}: ")


def test_unparsable_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("gpus:\n  - index: 0\n    name: [unclosed\n")
    with pytest.raises(FactsError, match=r"broken.yaml: line \d+, column \d+: not valid YAML"):
        load_facts(path)


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(FactsError, match="cannot read"):
        load_facts(tmp_path / "absent.yaml")
    with pytest.raises(FactsError, match="expected a mapping at the top level"):
        load_facts_text("- 1\n- 2\n", "list.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FactsError, match="not UTF-8"):
        load_facts(binary)


def test_empty_node_is_valid() -> None:
    assert facts_from_dict({}, "x") == NodeFacts()


def test_pci_level_lookup_is_symmetric() -> None:
    assert pci_level(RICH, 0, 1) == pci_level(RICH, 1, 0) == "node"
    assert pci_level(RICH, 0, 0) is None


@given(st.sets(st.integers(min_value=0, max_value=300)))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    text = cpulist_from_ids(sorted(cpus))
    assert cpulist_to_ids(text) == sorted(cpus)


def test_cpulist_examples() -> None:
    assert cpulist_from_ids(list(range(48)) + list(range(96, 144))) == "0-47,96-143"
    assert cpulist_from_ids([3]) == "3"
    assert cpulist_from_ids([]) == ""
