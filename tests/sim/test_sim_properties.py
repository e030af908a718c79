"""Property tests: whatever servable facts the machine file carries, NVML serves them back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gfd.facts import PCI_LEVELS, Gpu, NodeFacts, PciPair, cpulist_from_ids
from tests.facts_readback import cpulist_to_ids, pci_level
from tests.sim import simulate_raw

# One line of text that fits NVML's 96-byte buffers (leading and trailing spaces included).
line_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=0, max_size=30
).filter(lambda s: len(s.encode()) < 96)
# Any driver version is served (an unemulated branch with the nearest emulated one below).
driver_versions = st.builds(
    "{}.{}.{:02d}".format,
    st.integers(1, 999),
    st.integers(0, 999),
    st.integers(0, 99),
) | st.builds(str, st.integers(0, 999))
cpu_sets = st.lists(st.integers(min_value=0, max_value=4095), max_size=40)


@st.composite
def machines(draw: st.DrawFn) -> NodeFacts:
    count = draw(st.integers(min_value=1, max_value=5))
    gpus = tuple(
        Gpu(
            index=i,
            name=draw(line_text),
            uuid=f"GPU-{i:08x}-{draw(st.integers(0, 2**32)):08x}",
            bus_id=f"{draw(st.integers(0, 0xFFFF)):08X}:{i:02X}:{draw(st.integers(0, 31)):02X}.0",
            memory_total_bytes=draw(st.none() | st.integers(0, 2**63)),
            cpu_affinity=draw(st.none() | cpu_sets.map(cpulist_from_ids)),
            brand=draw(st.none() | st.integers(0, 20)),
        )
        for i in range(count)
    )
    pairs = tuple(
        PciPair(a=a, b=b, level=draw(st.sampled_from(sorted(PCI_LEVELS))))
        for a in range(count)
        for b in range(a + 1, count)
        if draw(st.booleans())
    )
    # A text that is no driver version is refused (tested in test_sim_branches).
    driver = st.none() | driver_versions
    return NodeFacts(driver_version=draw(driver), gpus=gpus, pci_pairs=pairs)


def served(nvml: ModuleType, call: Callable[..., Any], *args: object) -> Any:
    try:
        return call(*args)
    except nvml.NVMLError as exc:
        assert exc.value == nvml.NVML_ERROR_NOT_SUPPORTED
        return None


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(facts=machines())
def test_served_values_equal_the_facts(nvml: ModuleType, facts: NodeFacts) -> None:
    with simulate_raw(facts):
        nvml.nvmlInit()
        try:
            assert served(nvml, nvml.nvmlSystemGetDriverVersion) == facts.driver_version
            handles = [nvml.nvmlDeviceGetHandleByIndex(g.index) for g in facts.gpus]
            for gpu, handle in zip(facts.gpus, handles, strict=True):
                assert nvml.nvmlDeviceGetName(handle) == gpu.name
                assert nvml.nvmlDeviceGetPciInfo_v3(handle).busId == gpu.bus_id
                memory = served(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
                total = getattr(memory, "total", None)
                assert total == gpu.memory_total_bytes
                assert served(nvml, nvml.nvmlDeviceGetBrand, handle) == gpu.brand
                words = served(nvml, nvml.nvmlDeviceGetCpuAffinity, handle, 64)
                if gpu.cpu_affinity is None:
                    assert words is None
                else:
                    cpus = [
                        w * 64 + b
                        for w, word in enumerate(words)
                        for b in range(64)
                        if word >> b & 1
                    ]
                    assert cpus == cpulist_to_ids(gpu.cpu_affinity)
            for a in range(len(handles)):
                for b in range(a + 1, len(handles)):
                    level = served(
                        nvml, nvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b]
                    )
                    expected = pci_level(facts, a, b)
                    assert level == (PCI_LEVELS[expected] if expected is not None else None)
        finally:
            nvml.nvmlShutdown()


def test_concurrent_callers_see_consistent_answers(nvml: ModuleType) -> None:
    failures: list[str] = []

    def reader(index: int) -> None:
        for _ in range(200):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if nvml.nvmlDeviceGetIndex(handle) != index:
                failures.append(f"GPU {index}: wrong handle")
            if not nvml.nvmlDeviceGetName(handle).startswith("NVIDIA H100"):
                failures.append(f"GPU {index}: wrong name")

    with simulate_raw("dgx-h100"):
        nvml.nvmlInit()
        threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        nvml.nvmlShutdown()
    assert failures == []
