"""The per-GPU series of ``/metrics``: inventory, PCIe link, fabric state, health problems.

This module owns what gfd says about each GPU as Prometheus series, built from the last
facts and health verdict the cycle handed to :class:`gfd.metrics.AgentTelemetry`. The
series are made at scrape time from one immutable :class:`GpuSeries` (a collector, not
label children of gauges), so a GPU that left the facts, or a problem that cleared, leaves
no stale series behind. Every series has ``node`` (the node gfd labels) and ``gpu`` (the
NVML index as a string); there is one series per GPU (per problem for the health one),
never one per event.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gfd.base.frozen import frozen_dataclass
from gfd.facts import NodeFacts

if TYPE_CHECKING:
    from gfd.health import Verdict

#: (name, help, the label names after ``node`` and ``gpu``).
INFO = (
    "gfd_gpu_info",
    "Always 1, one series per GPU: its UUID, product (as the gpu.product label names it), "
    "and the node's driver and CUDA (the driver's, as cuda.driver-version.full) versions.",
    ("uuid", "product", "driver_version", "cuda_version"),
)
PCIE_GENERATION = (
    "gfd_gpu_pcie_link_generation",
    "PCIe generation the GPU's link runs at now (it may idle lower while the GPU is idle).",
)
PCIE_GENERATION_MAX = (
    "gfd_gpu_pcie_link_generation_max",
    "Highest PCIe generation the GPU's link can reach in its slot.",
)
PCIE_WIDTH = ("gfd_gpu_pcie_link_width", "Lanes the GPU's PCIe link runs with now.")
PCIE_WIDTH_MAX = (
    "gfd_gpu_pcie_link_width_max",
    "Most lanes the GPU's PCIe link can reach in its slot.",
)
FABRIC_STATE = (
    "gfd_gpu_fabric_state",
    "Always 1, one series per GPU on an NVLink fabric: its registration state "
    "(not-started, in-progress, completed); absent for a GPU without fabric.",
)
HEALTH_PROBLEM = (
    "gfd_gpu_health_problem",
    "Always 1, one series per GPU health problem that fails the GPUHealthy condition now, "
    "by check and condition reason; gpu is empty for a problem of the node (device plugin).",
)

Row = tuple[tuple[str, ...], float]


def cuda_version(facts: NodeFacts) -> str:
    """The driver's CUDA version as ``12.8`` (12080 from NVML), empty when unknown."""
    version = facts.cuda_driver_version
    if version is None:
        return ""
    return f"{version // 1000}.{(version % 1000) // 10}"


@frozen_dataclass
class GpuSeries:
    """The rows of every per-GPU family at one moment, labels in declaration order."""

    info: tuple[Row, ...] = ()
    pcie_generation: tuple[Row, ...] = ()
    pcie_generation_max: tuple[Row, ...] = ()
    pcie_width: tuple[Row, ...] = ()
    pcie_width_max: tuple[Row, ...] = ()
    fabric_state: tuple[Row, ...] = ()


def gpu_series(facts: NodeFacts, node: str) -> GpuSeries:
    """The per-GPU rows of ``facts`` on ``node``: pure, one row per GPU and family."""
    from gfd.labels.rules import product_value

    driver = facts.driver_version or ""
    cuda = cuda_version(facts)
    info: list[Row] = []
    rows: dict[str, list[Row]] = {
        name: [] for name in ("gen", "gen_max", "width", "width_max", "fabric")
    }
    for gpu in facts.gpus:
        index = str(gpu.index)
        info.append(((node, index, gpu.uuid, product_value(gpu.name), driver, cuda), 1.0))
        link = gpu.pcie
        if link is not None:
            for key, value in (
                ("gen", link.current_generation),
                ("gen_max", link.max_generation),
                ("width", link.current_width),
                ("width_max", link.max_width),
            ):
                if value is not None:
                    rows[key].append(((node, index), float(value)))
        if gpu.fabric is not None and gpu.fabric.state != "not-supported":
            rows["fabric"].append(((node, index, gpu.fabric.state), 1.0))
    return GpuSeries(
        info=tuple(info),
        pcie_generation=tuple(rows["gen"]),
        pcie_generation_max=tuple(rows["gen_max"]),
        pcie_width=tuple(rows["width"]),
        pcie_width_max=tuple(rows["width_max"]),
        fabric_state=tuple(rows["fabric"]),
    )


def problem_rows(verdict: Verdict, node: str) -> dict[str, tuple[Row, ...]]:
    """Each decided check's failing problems as ``(node, gpu, check, reason)`` rows; a
    check that could not run this cycle (unknown) is left out, so its last rows stand."""
    from gfd.health import FAILING, UNKNOWN
    from gfd.health.check import gpu_named

    rows: dict[str, tuple[Row, ...]] = {}
    for result in verdict.results:
        if result.state == UNKNOWN:
            continue
        found: dict[tuple[str, ...], float] = {}
        if result.state == FAILING:
            for problem in result.problems:
                gpu = gpu_named(problem.message) or ""
                found[(node, gpu, problem.check, problem.reason)] = 1.0
        rows[result.check] = tuple(found.items())
    return rows


class GpuCollector:
    """A ``prometheus_client`` collector of :class:`GpuSeries` and the health problems.

    The telemetry swaps whole immutable values in (one assignment each, atomic under the
    GIL); a scrape reads whatever is current.
    """

    def __init__(self) -> None:
        self.series = GpuSeries()
        self.problems: Mapping[str, tuple[Row, ...]] = {}

    def describe(self) -> Iterator[Any]:
        # Names only, so that the registry knows them without collecting.
        from prometheus_client.core import GaugeMetricFamily

        for name, documentation, *_ in self._families():
            yield GaugeMetricFamily(name, documentation)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        series, problems = self.series, self.problems
        contents: dict[str, Iterable[Row]] = {
            INFO[0]: series.info,
            PCIE_GENERATION[0]: series.pcie_generation,
            PCIE_GENERATION_MAX[0]: series.pcie_generation_max,
            PCIE_WIDTH[0]: series.pcie_width,
            PCIE_WIDTH_MAX[0]: series.pcie_width_max,
            FABRIC_STATE[0]: series.fabric_state,
            HEALTH_PROBLEM[0]: [row for check in sorted(problems) for row in problems[check]],
        }
        for name, documentation, labels in self._families():
            family = GaugeMetricFamily(name, documentation, labels=list(labels))
            for values, value in contents[name]:
                family.add_metric(list(values), value)
            yield family

    @staticmethod
    def _families() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        per_gpu = ("node", "gpu")
        return (
            (INFO[0], INFO[1], per_gpu + INFO[2]),
            (*PCIE_GENERATION, per_gpu),
            (*PCIE_GENERATION_MAX, per_gpu),
            (*PCIE_WIDTH, per_gpu),
            (*PCIE_WIDTH_MAX, per_gpu),
            (*FABRIC_STATE, (*per_gpu, "state")),
            (*HEALTH_PROBLEM, (*per_gpu, "check", "reason")),
        )
