"""The per-GPU series of ``/metrics`` (issue 43): inventory, PCIe link, fabric state, health
problems, and no ``_created`` series, read from the endpoint's text as Prometheus reads it.

In process: the telemetry is handed the facts of bundled simulated machines (what a cycle
hands it) and serves on loopback. End to end: a whole agent on a simulated DGX H100 with
a PCIe link trained down and an Xid 79 (tests/reliability/agent_process.py).
"""

from __future__ import annotations

import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfd.health import FAILING, OK, UNKNOWN
from gfd.health.check import CheckResult, Problem, Verdict, gpu_name, gpu_named
from gfd.metrics import AgentTelemetry
from gfd.sim import load_profile
from tests.reliability.agent_process import AgentProcess, write_profile

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(telemetry: AgentTelemetry) -> str:
    server = telemetry.serve("127.0.0.1:0", poll_interval=0.02)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    finally:
        server.close()


def samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def labelled(name: str, text: str) -> list[dict[str, str]]:
    return sorted((dict(k) for k in samples(text, name)), key=lambda d: int(d.get("gpu") or -1))


def telemetry_of(profile: str, node: str = "node-a") -> AgentTelemetry:
    telemetry = AgentTelemetry(sleep_interval=60.0, node_name=node)
    telemetry.facts_read(load_profile(profile).facts)
    return telemetry


def test_inventory_one_series_per_gpu_with_the_nodes_versions() -> None:
    text = scrape(telemetry_of("dgx-h100"))
    info = samples(text, "gfd_gpu_info")
    assert len(info) == 8 and set(info.values()) == {1.0}
    first = labelled("gfd_gpu_info", text)[0]
    facts = load_profile("dgx-h100").facts
    assert first == {
        "node": "node-a",
        "gpu": "0",
        "uuid": facts.gpus[0].uuid,
        "product": "NVIDIA-H100-80GB-HBM3",
        "driver_version": facts.driver_version,
        "cuda_version": "12.8",
    }
    assert [d["gpu"] for d in labelled("gfd_gpu_info", text)] == [str(i) for i in range(8)]


def test_pcie_link_current_and_maximum() -> None:
    facts = load_profile("dgx-h100").facts
    text = scrape(telemetry_of("dgx-h100"))
    for name, attribute in (
        ("gfd_gpu_pcie_link_generation", "current_generation"),
        ("gfd_gpu_pcie_link_generation_max", "max_generation"),
        ("gfd_gpu_pcie_link_width", "current_width"),
        ("gfd_gpu_pcie_link_width_max", "max_width"),
    ):
        got = samples(text, name)
        want = {
            frozenset({("node", "node-a"), ("gpu", str(gpu.index))}): float(
                getattr(gpu.pcie, attribute)
            )
            for gpu in facts.gpus
            if gpu.pcie is not None and getattr(gpu.pcie, attribute) is not None
        }
        assert want and got == want, name


def test_a_machine_without_pcie_facts_has_no_link_series() -> None:
    # gb200-nvl4 reports no PCIe link (its header says so): no series, not zeros.
    text = scrape(telemetry_of("gb200-nvl4"))
    assert samples(text, "gfd_gpu_pcie_link_width") == {}
    assert len(samples(text, "gfd_gpu_info")) == 4


@pytest.mark.parametrize(
    ("profile", "states"),
    [
        ("gb200-nvl4", ["completed"] * 4),
        ("gb200-nvl4-fabric-broken", ["completed", "completed", "completed", "in-progress"]),
        ("pcie-l4x4", []),
    ],
)
def test_fabric_state_one_series_per_gpu_on_a_fabric(profile: str, states: list[str]) -> None:
    series = labelled("gfd_gpu_fabric_state", scrape(telemetry_of(profile)))
    assert [s["state"] for s in series] == states
    assert [s["gpu"] for s in series] == [str(i) for i in range(len(states))]


def test_a_gpu_that_leaves_the_facts_leaves_no_series() -> None:
    facts = load_profile("dgx-h100").facts
    telemetry = AgentTelemetry(sleep_interval=60.0, node_name="node-a")
    telemetry.facts_read(facts)
    telemetry.facts_read(replace(facts, gpus=facts.gpus[:7]))
    text = scrape(telemetry)
    for name in ("gfd_gpu_info", "gfd_gpu_pcie_link_width", "gfd_gpu_fabric_state"):
        assert "7" not in {d["gpu"] for d in labelled(name, text)}, name
        assert len(samples(text, name)) == 7, name


def test_a_reload_to_another_node_name_moves_every_series() -> None:
    telemetry = telemetry_of("t4-single", node="old")
    telemetry.health_checked(
        Verdict(
            (CheckResult("pcie", FAILING, (Problem("pcie", "PCIeLinkDegraded", "GPU 0 (x)"),)),)
        ),
        None,
    )
    telemetry.set_node_name("new")
    text = scrape(telemetry)
    nodes = {
        d["node"]
        for name in ("gfd_gpu_info", "gfd_gpu_health_problem")
        for d in labelled(name, text)
    }
    assert nodes == {"new"}


def test_no_created_series_but_the_counters_stay() -> None:
    telemetry = telemetry_of("dgx-h100")
    telemetry.cycle_succeeded(0.1, 30)
    text = scrape(telemetry)
    assert "_created" not in text
    assert samples(text, "gfd_cycles_total")[frozenset({("result", "success")})] == 1.0
    assert samples(text, "gfd_cycle_duration_seconds_count") == {frozenset(): 1.0}
    assert samples(text, "gfd_sleep_interval_seconds") == {frozenset(): 60.0}


def test_the_process_wide_created_switch_is_left_alone() -> None:
    # gfd's registry drops _created itself: other registries in the process keep them.
    import prometheus_client

    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("other", "x", registry=registry)
    AgentTelemetry(sleep_interval=None)
    assert b"other_created" in prometheus_client.generate_latest(registry)


def test_infinite_interval_is_plus_inf() -> None:
    text = scrape(AgentTelemetry(sleep_interval=None))
    assert samples(text, "gfd_sleep_interval_seconds") == {frozenset(): float("inf")}


@pytest.mark.parametrize(
    ("index", "address", "named"),
    [(3, "0000:61:00.0", "3"), (None, "0000:61:00.0", "0000:61:00.0"), (12, None, "12")],
)
def test_gpu_named_reads_back_what_gpu_name_wrote(
    index: int | None, address: str | None, named: str
) -> None:
    assert gpu_named(f"{gpu_name(index, address)}: Xid 79") == named


def test_gpu_named_is_none_for_a_problem_of_the_node() -> None:
    assert gpu_named("nvidia.com/gpu: 7 allocatable, 8 GPUs") is None


def test_health_problems_per_gpu_and_reason_clear_and_hold() -> None:
    telemetry = telemetry_of("dgx-h100")
    xid = Problem("xid", "XidError", f"{gpu_name(3, '0000:61:00.0')}: Xid 79, 1 time")
    plugin = Problem("device-plugin", "AllocatableMismatch", "nvidia.com/gpu: 7 of 8")
    telemetry.health_checked(
        Verdict(
            (
                CheckResult("xid", FAILING, (xid,)),
                CheckResult("device-plugin", FAILING, (plugin,)),
                CheckResult("pcie", OK),
            )
        ),
        None,
    )
    problems = labelled("gfd_gpu_health_problem", scrape(telemetry))
    assert problems == [
        {"node": "node-a", "gpu": "", "check": "device-plugin", "reason": "AllocatableMismatch"},
        {"node": "node-a", "gpu": "3", "check": "xid", "reason": "XidError"},
    ]
    # A check that could not run keeps its rows; one that passes clears its own.
    telemetry.health_checked(
        Verdict((CheckResult("xid", UNKNOWN), CheckResult("device-plugin", OK))), None
    )
    problems = labelled("gfd_gpu_health_problem", scrape(telemetry))
    assert [p["reason"] for p in problems] == ["XidError"]


@pytest.mark.slow
def test_an_agent_shows_a_link_trained_down_and_an_xid(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path,
        {
            "pcie_link_down": [{"gpu": 2, "after_calls": 0, "width": 8}],
            "xid": [{"gpu": 5, "xid": 79, "after_calls": 20}],
        },
    )
    with AgentProcess(
        "--simulate", str(profile), "--sleep-interval", "1s", "--no-timestamp",
        "--health-grace-period", "1s", "--node-name", "node-b", "-o", str(tmp_path / "labels"),
    ) as agent:  # fmt: skip

        def problems() -> list[dict[str, str]]:
            return labelled("gfd_gpu_health_problem", agent.get("/metrics")[1])

        want = [
            {"node": "node-b", "gpu": "2", "check": "pcie", "reason": "PCIeLinkDegraded"},
            {"node": "node-b", "gpu": "5", "check": "xid", "reason": "XidError"},
        ]
        agent.wait_for(lambda: problems() == want, f"the problems {want}")
        text = agent.get("/metrics")[1]
    width = samples(text, "gfd_gpu_pcie_link_width")
    assert width[frozenset({("node", "node-b"), ("gpu", "2")})] == 8.0
    assert (
        samples(text, "gfd_gpu_pcie_link_width_max")[frozenset({("node", "node-b"), ("gpu", "2")})]
        == 16.0
    )
    assert width[frozenset({("node", "node-b"), ("gpu", "1")})] == 16.0
    assert "_created" not in text
