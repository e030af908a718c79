"""gfd's NVML reader against NVIDIA's mock NVML (k8s-test-infra), one case per machine and fact family.

A machine is one of the YAML configs bundled with the mock, served by the mock library as built,
or (two machines) a bundled config given an older driver branch: its ``driver_version`` and CUDA
version rewritten, and the library's exports cut to what NVIDIA's real library of that branch
exports among the functions gfd may call (``gfd.sim.branch_library``).

For each machine the config is copied to a private directory, ``render-pci-sysfs`` writes its fake
sysfs tree, and a fresh Python process (the mock is a Go c-shared library, and pynvml holds one
NVML per process) runs ``gfd.nvml.reader.read_facts`` on the mock and prints the facts as JSON.
Each case compares one family of facts with what the mock's config and code say
(``mock_nvml_model.py``, never gfd's own output), so a failure names the machine and the fact.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd.facts import Gpu, NodeFacts
from gfd.sim.branch_library import write_without_exports
from tests.conformance.mock_nvml_model import expected_facts
from tests.oracles import oracle_path

ORACLE = "mock-nvml"

#: The configs bundled with the mock at the pinned commit (../shared/oracles/PROVENANCE.md).
CONFIGS = ("a100", "b200", "gb200", "gb300", "h100", "l40s", "t4")

#: Functions gfd's reader may resolve (through pynvml) that NVIDIA's real library of a branch does
#: not export, from ../shared/reference/nvml-exports/libnvidia-ml.so.<version>.txt; with the v1
#: fabric call the reader is to fall back on (issue 11).
MISSING_IN_470 = frozenset(
    {
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetGpuInstanceProfileInfoV",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    }
)
MISSING_IN_535 = frozenset({"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetGpuFabricInfoV"})


@dataclass(frozen=True)
class Machine:
    """A bundled config, optionally given an older driver branch."""

    name: str
    config: str
    driver_version: str | None = None
    cuda: tuple[int, int] | None = None
    hidden_exports: frozenset[str] = frozenset()


MACHINES = (
    *(Machine(name, name) for name in CONFIGS),
    # An A100 box on the 470 long-term branch (CUDA 11.4).
    Machine("a100-r470", "a100", "470.256.02", (11, 4), MISSING_IN_470),
    # An HGX H100 box on the 535 long-term branch (CUDA 12.2), with its fabric block.
    Machine("h100-r535", "h100", "535.261.03", (12, 2), MISSING_IN_535),
)

#: Fact family -> (NodeFacts fields, Gpu fields) it covers. Every field of the facts model is in
#: exactly one family or in NOT_FROM_THE_MOCK (test_every_fact_has_a_family).
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "system": (("driver_version", "cuda_driver_version"), ("index",)),
    "identity": ((), ("name", "uuid", "serial", "bus_id", "pci_device_id")),
    "memory": ((), ("memory_total_bytes",)),
    "compute": ((), ("compute_major", "compute_minor", "architecture", "brand")),
    "sysfs": ((), ("pci_class", "numa_node")),
    "affinity": ((), ("gpu_numa_id", "cpu_affinity")),
    "mig": ((), ("mig_mode_current", "mig_mode_pending", "mig_devices")),
    "nvlink": ((), ("nvlink_version", "nvlinks")),
    "fabric": ((), ("fabric",)),
    "pcie": ((), ("pcie",)),
    "memory_health": ((), ("memory_health",)),
    "virtualization": ((), ("virtualization_mode",)),
    "topology": (("pci_pairs", "nvlink_p2p"), ()),
    "vgpu": (("vgpu",), ()),
}
#: Facts the harness decides, not the mock.
NOT_FROM_THE_MOCK = {
    "machine_type": "read from a DMI file the harness points at a path that does not exist",
    "schema_version": "the facts format's version",
}


#: Run in a fresh interpreter: which of the names resolve in the library, then gfd's read.
_READ_FACTS = """
import ctypes, json, sys
from pathlib import Path

from gfd.facts import facts_to_dict
from gfd.nvml.reader import read_facts

library, sysfs, dmi = sys.argv[1:4]
names = json.loads(sys.argv[4])
lib = ctypes.CDLL(library)
out = {"resolves": {name: hasattr(lib, name) for name in names}, "facts": None, "error": None}
try:
    facts = read_facts(library_path=library, sysfs_root=Path(sysfs), machine_type_file=Path(dmi))
    out["facts"] = facts_to_dict(facts)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
sys.stdout.write(json.dumps(out))
"""


@dataclass(frozen=True)
class MockRead:
    """One run of gfd's reader on the mock serving one machine."""

    config: dict[str, Any]
    resolves: dict[str, bool]
    facts: dict[str, Any] | None
    error: str | None


def _mock_environment(config_path: Path) -> dict[str, str]:
    """This process's environment without anything that reconfigures the mock behind its config
    (overrides, topology overlay, fabric-manager coupling, device count, debug output)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MOCK_") and key not in ("NODE_NAME", "LD_PRELOAD")
    }
    env["MOCK_NVML_CONFIG"] = str(config_path)
    return env


def _prepare_config(mock_dir: Path, machine: Machine, config_path: Path) -> dict[str, Any]:
    source = mock_dir / "configs" / f"mock-nvml-config-{machine.config}.yaml"
    if machine.driver_version is None:
        shutil.copyfile(source, config_path)
        return dict(yaml.safe_load(config_path.read_text()))
    config = dict(yaml.safe_load(source.read_text()))
    system = dict(config["system"])
    system["driver_version"] = machine.driver_version
    system["nvml_version"] = f"{machine.cuda[0] if machine.cuda else 12}.{machine.driver_version}"
    if machine.cuda is not None:
        system["cuda_version"] = f"{machine.cuda[0]}.{machine.cuda[1]}"
        system["cuda_version_major"], system["cuda_version_minor"] = machine.cuda
    config["system"] = system
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def _read(mock_dir: Path, machine: Machine, work: Path) -> MockRead:
    # A private copy of the config: the mock reads an overrides.yaml beside it when one exists.
    work.mkdir(parents=True)
    config_path = work / "config.yaml"
    config = _prepare_config(mock_dir, machine, config_path)
    library = mock_dir / "libnvidia-ml.so.1"
    if machine.hidden_exports:
        (work / "lib").mkdir()
        write_without_exports(library, work / "lib" / "libnvidia-ml.so.1", machine.hidden_exports)
        library = work / "lib" / "libnvidia-ml.so.1"
    root = work / "root"
    rendered = subprocess.run(
        [str(mock_dir / "render-pci-sysfs"), "--config", str(config_path), "--output", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if rendered.returncode != 0:
        return MockRead(config, {}, None, f"render-pci-sysfs failed: {rendered.stderr.strip()}")
    probe = sorted(machine.hidden_exports | {"nvmlInitWithFlags", "nvmlDeviceGetName"})
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _READ_FACTS,
            str(library),
            str(root / "sys"),
            str(work / "no-such-dmi-product-name"),
            json.dumps(probe),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_mock_environment(config_path),
    )
    if run.returncode != 0:
        lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
        return MockRead(config, {}, None, lines[-1] if lines else f"exit status {run.returncode}")
    out = json.loads(run.stdout)
    return MockRead(config, out["resolves"], out["facts"], out["error"])


class _Reads:
    """Each machine is read once per session, by the first case that needs it."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._reads: dict[str, MockRead] = {}

    def get(self, machine: Machine) -> MockRead:
        if machine.name not in self._reads:
            self._reads[machine.name] = _read(
                oracle_path(ORACLE), machine, self._tmp / machine.name
            )
        return self._reads[machine.name]


@pytest.fixture(scope="module")
def mock_reads(tmp_path_factory: pytest.TempPathFactory) -> _Reads:
    return _Reads(tmp_path_factory.mktemp("mock-nvml"))


def _family(facts: dict[str, Any], family: str) -> dict[str, Any]:
    node_fields, gpu_fields = FAMILIES[family]
    picked: dict[str, Any] = {field: facts.get(field) for field in node_fields}
    if gpu_fields:
        picked["gpus"] = [{field: gpu.get(field) for field in gpu_fields} for gpu in facts["gpus"]]
    return picked


def _differences(actual: Any, expected: Any, path: str = "") -> list[str]:
    """Where two plain-data values differ, as ``gpus[3].nvlinks: read X, the mock serves Y``."""
    if isinstance(actual, dict) and isinstance(expected, dict):
        out = []
        for key in sorted(set(actual) | set(expected)):
            where = f"{path}.{key}" if path else str(key)
            if key not in actual or key not in expected:
                out.append(
                    f"{where}: read {actual.get(key)!r}, the mock serves {expected.get(key)!r}"
                )
            else:
                out.extend(_differences(actual[key], expected[key], where))
        return out
    if isinstance(actual, list) and isinstance(expected, list) and len(actual) == len(expected):
        return [
            line
            for i, (a, e) in enumerate(zip(actual, expected, strict=True))
            for line in _differences(a, e, f"{path}[{i}]")
        ]
    if actual != expected:
        return [f"{path}: read {actual!r}, the mock serves {expected!r}"]
    return []


def _cases() -> list[Any]:
    cases = []
    for machine in MACHINES:
        for family in FAMILIES:
            cases.append(pytest.param(machine, family, id=f"{machine.name}-{family}"))
    return cases


@pytest.mark.oracle(ORACLE)
@pytest.mark.parametrize(("machine", "family"), _cases())
def test_facts_match_the_mock(mock_reads: _Reads, machine: Machine, family: str) -> None:
    read = mock_reads.get(machine)
    if read.facts is None:
        pytest.fail(
            f"gfd's reader failed on the mock's {machine.name}: {read.error}", pytrace=False
        )
    expected = _family(expected_facts(read.config, machine.hidden_exports), family)
    differences = _differences(_family(read.facts, family), expected)
    assert not differences, f"{machine.name} {family}:\n  " + "\n  ".join(differences[:20])


@pytest.mark.oracle(ORACLE)
@pytest.mark.parametrize(
    "machine", [m for m in MACHINES if m.hidden_exports], ids=lambda m: str(m.name)
)
def test_older_export_set_is_emulated(mock_reads: _Reads, machine: Machine) -> None:
    """The premise of the older-branch machines: exactly the hidden functions no longer resolve
    (so those machines test what they claim to), and the library still initialises."""
    read = mock_reads.get(machine)
    assert read.resolves, read.error
    assert {name for name, found in read.resolves.items() if not found} == machine.hidden_exports


@pytest.mark.oracle(ORACLE)
def test_every_bundled_config_is_covered() -> None:
    """A config added to the mock's bundle must get its cases (and a review of the model) here."""
    bundled = sorted(p.name for p in (oracle_path(ORACLE) / "configs").glob("*.yaml"))
    assert bundled == sorted(f"mock-nvml-config-{name}.yaml" for name in CONFIGS)


def test_every_fact_has_a_family() -> None:
    """A field added to the facts model must get an expectation from the mock (runs without it)."""
    covered_node = [f for node_fields, _ in FAMILIES.values() for f in node_fields]
    covered_gpu = [f for _, gpu_fields in FAMILIES.values() for f in gpu_fields]
    node_fields = (
        {f.name for f in dataclasses.fields(NodeFacts)} - {"gpus"} - set(NOT_FROM_THE_MOCK)
    )
    gpu_fields = {f.name for f in dataclasses.fields(Gpu)}
    assert sorted(covered_node) == sorted(node_fields)
    assert sorted(covered_gpu) == sorted(gpu_fields)
