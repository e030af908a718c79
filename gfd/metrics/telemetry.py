"""The agent's telemetry: its Prometheus metrics (``gfd_*``) and the state behind the probes.

This module owns :class:`AgentTelemetry`, what the loop, the reload and the health checks
report to when metrics are on (with metrics off the loop reports to
:class:`gfd.agent.NullTelemetry`, and nothing here is imported). ``prometheus_client`` is
imported only when an :class:`AgentTelemetry` is built, so a run without metrics never
pays for it. The rules of its liveness and readiness verdicts are
:mod:`gfd.metrics.probes`; :meth:`AgentTelemetry.serve` puts them on HTTP
(:mod:`gfd.metrics.server`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gfd.base.errors import ERROR_KINDS, ConfigError
from gfd.config.values import HEALTH_CHECKS
from gfd.metrics.probes import (
    DEFAULT_CYCLE_DEADLINE,
    LIVENESS_MARGIN,
    Health,
    liveness_window_for,
)
from gfd.metrics.server import DEFAULT_METRICS_ADDRESS, MetricsServer, serve

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from gfd.facts import NodeFacts
    from gfd.health import HealthState, Verdict
    from gfd.nvml.xid_events import XidEvent

#: Cycle duration buckets (seconds): a simulated read takes milliseconds, a real
#: 8-GPU read tenths of a second, a cycle with API retries tens of seconds.
CYCLE_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def registry_without_created() -> CollectorRegistry:
    """A registry whose exposition has no ``*_created`` series.

    ``prometheus_client`` adds one to every counter, histogram and summary; Prometheus
    stores each as a series of its own that no rule or dashboard of gfd's reads.
    ``prometheus_client.disable_created_metrics()`` would drop them for every registry in
    the process (the tests' included), so this registry drops them from its own
    collection only.
    """
    import prometheus_client

    class _Registry(prometheus_client.CollectorRegistry):
        def collect(self):  # type: ignore[no-untyped-def]
            for metric in super().collect():
                if metric.type in ("counter", "histogram", "summary", "gaugehistogram"):
                    metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
                yield metric

    return _Registry()


class AgentTelemetry:
    """Prometheus metrics plus the liveness and readiness state of the agent loop.

    ``registry``: where the metrics go; by default a fresh registry with the
    process and platform collectors, so several instances (tests) never clash.
    ``clock`` measures intervals (monotonic); ``wall_clock`` stamps the last
    success (Unix seconds). ``node_name``: the ``node`` label of the per-GPU series
    (:mod:`gfd.metrics.gpus`), the node gfd labels; empty when unknown.
    """

    def __init__(
        self,
        *,
        sleep_interval: float | None,
        liveness_margin: float = LIVENESS_MARGIN,
        cycle_deadline: float = DEFAULT_CYCLE_DEADLINE,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        node_name: str = "",
    ) -> None:
        import prometheus_client

        from gfd.metrics.gpus import GpuCollector

        liveness_window = liveness_window_for(sleep_interval, margin=liveness_margin)
        if liveness_window is not None and liveness_window <= 0:
            raise ConfigError(f"liveness window must be positive, got {liveness_window!r}")
        if cycle_deadline <= 0:
            raise ConfigError(f"cycle deadline must be positive, got {cycle_deadline!r}")
        if registry is None:
            registry = registry_without_created()
            prometheus_client.ProcessCollector(registry=registry)
            prometheus_client.PlatformCollector(registry=registry)
        self.registry = registry
        self._liveness_window = liveness_window
        self._liveness_margin = liveness_margin
        self._reload_failure: str | None = None
        self._cycle_deadline = cycle_deadline
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._cycle_started_at: float | None = None
        self._last_cycle_ended_at = clock()
        self._succeeded_once = False
        self._node_name = node_name
        self._facts: NodeFacts | None = None
        self._gpus = GpuCollector()
        registry.register(self._gpus)

        from gfd import __version__

        self._build_info = prometheus_client.Gauge(
            "gfd_build_info",
            "Always 1; the labels say which gfd runs.",
            ["version"],
            registry=registry,
        )
        self._build_info.labels(version=__version__).set(1)
        self._cycles = prometheus_client.Counter(
            "gfd_cycles",
            "Discovery cycles that ended, by result.",
            ["result"],
            registry=registry,
        )
        self._duration = prometheus_client.Histogram(
            "gfd_cycle_duration_seconds",
            "Wall time of one discovery cycle.",
            buckets=CYCLE_DURATION_BUCKETS,
            registry=registry,
        )
        self._errors = prometheus_client.Counter(
            "gfd_cycle_errors",
            "Failed cycles by kind of error.",
            ["kind"],
            registry=registry,
        )
        self._labels_published = prometheus_client.Gauge(
            "gfd_labels_published",
            "Labels published by the last successful cycle.",
            registry=registry,
        )
        self._last_success = prometheus_client.Gauge(
            "gfd_last_success_timestamp_seconds",
            "Unix time the last successful cycle ended; 0 before the first.",
            registry=registry,
        )
        self._sleep_interval = prometheus_client.Gauge(
            "gfd_sleep_interval_seconds",
            "The configured interval between cycles (+Inf with --sleep-interval infinite): "
            "labels not refreshed for three of them are stale.",
            registry=registry,
        )
        self._sleep_interval.set(_interval_value(sleep_interval))
        self._nvml_up = prometheus_client.Gauge(
            "gfd_nvml_up",
            "1 when the last NVML read worked, else 0.",
            registry=registry,
        )
        self._reloads = prometheus_client.Counter(
            "gfd_config_reloads",
            "SIGHUP reloads that were applied.",
            registry=registry,
        )
        self._reload_failures = prometheus_client.Counter(
            "gfd_config_reload_failures",
            "SIGHUP reloads that were refused; the previous configuration kept running.",
            registry=registry,
        )
        self._last_reload_ok = prometheus_client.Gauge(
            "gfd_config_last_reload_successful",
            "1 unless the last SIGHUP reload was refused.",
            registry=registry,
        )
        self._last_reload_ok.set(1)
        self._topology_failures = prometheus_client.Counter(
            "gfd_topology_failures",
            "Cycles whose topology could not be built: topology labels and the matrix "
            "annotation were withheld, the other labels published.",
            registry=registry,
        )
        self._health_failing = prometheus_client.Gauge(
            "gfd_health_check_failing",
            f"1 while a GPU health check reports a problem ({', '.join(HEALTH_CHECKS)}), "
            "else 0; only the checks that run have a series.",
            ["check"],
            registry=registry,
        )
        self._health_problems = prometheus_client.Gauge(
            "gfd_health_check_problems",
            "Problems the check found in its last run, those still in their grace "
            "period included (GPUs lost, resources short, GPUs with links down, GPUs with "
            "a fatal Xid held, memory problems, PCIe links degraded or replaying).",
            ["check"],
            registry=registry,
        )
        self._health_undecided = prometheus_client.Gauge(
            "gfd_health_check_cannot_decide",
            "1 while a GPU health check cannot judge part of what it watches (a GPU "
            "without ECC, one not watched for Xids, a run no Xid can reach, a GPU whose "
            "PCIe link NVML does not report), else 0.",
            ["check"],
            registry=registry,
        )
        self._xid_errors = prometheus_client.Counter(
            "gfd_gpu_xid_errors",
            "Critical Xid errors NVML reported, and those only the kernel log reported "
            "(--health-kernel-log), by GPU index (a bus id for a GPU NVML does not list), "
            "Xid and the action NVIDIA's Xid catalog recommends for it (its immediate "
            "action's bucket in lower case, unknown where the catalog gives none): every one, "
            "fatal or ignored by the xid check, counted as it arrives.",
            ["gpu", "xid", "action"],
            registry=registry,
        )
        self._gpu_healthy = prometheus_client.Gauge(
            "gfd_gpu_healthy",
            "1 while the GPUHealthy state is True, 0 while False; absent until known.",
            registry=registry,
        )
        # Pre-create every series so dashboards see zeros, not absent metrics.
        for result in ("success", "failure"):
            self._cycles.labels(result=result)
        for kind in ERROR_KINDS:
            self._errors.labels(kind=kind)

    def cycle_started(self) -> None:
        with self._lock:
            self._cycle_started_at = self._clock()

    def cycle_succeeded(self, duration: float, labels_published: int) -> None:
        self._cycles.labels(result="success").inc()
        self._duration.observe(max(duration, 0.0))
        self._labels_published.set(labels_published)
        self._last_success.set(self._wall_clock())
        with self._lock:
            self._succeeded_once = True
            self._end_cycle()

    def cycle_failed(self, kind: str, duration: float) -> None:
        self._cycles.labels(result="failure").inc()
        self._duration.observe(max(duration, 0.0))
        # An unknown kind is a caller bug; fold it into "internal" so the label
        # set stays bounded.
        self._errors.labels(kind=kind if kind in ERROR_KINDS else "internal").inc()
        with self._lock:
            self._end_cycle()

    def nvml_up(self, up: bool) -> None:
        self._nvml_up.set(1 if up else 0)

    def facts_read(self, facts: NodeFacts) -> None:
        """A cycle read the facts: the per-GPU series now show these GPUs, and only these.

        A failed read changes nothing: the series keep the last GPUs read (``gfd_nvml_up``
        says NVML is down)."""
        if facts is self._facts:
            return  # the reader hands back the same object for an unchanged machine
        from gfd.metrics.gpus import gpu_series

        self._facts = facts
        self._gpus.series = gpu_series(facts, self._node_name)

    def set_node_name(self, node_name: str) -> None:
        """A reload named another node: every per-GPU series moves to it at once."""
        if node_name == self._node_name:
            return
        from gfd.metrics.gpus import gpu_series

        self._node_name = node_name
        if self._facts is not None:
            self._gpus.series = gpu_series(self._facts, node_name)
        self._gpus.problems = {
            check: tuple(((node_name, *labels[1:]), value) for labels, value in rows)
            for check, rows in self._gpus.problems.items()
        }

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        """A reload changed the interval: the liveness window moves with it, at once."""
        window = liveness_window_for(sleep_interval, margin=self._liveness_margin)
        self._sleep_interval.set(_interval_value(sleep_interval))
        with self._lock:
            self._liveness_window = window

    def config_reloaded(self) -> None:
        self._reloads.inc()
        self._last_reload_ok.set(1)
        with self._lock:
            self._reload_failure = None

    def config_reload_failed(self, reason: str) -> None:
        """A reload was refused; readiness says so until a later reload succeeds."""
        self._reload_failures.inc()
        self._last_reload_ok.set(0)
        with self._lock:
            self._reload_failure = reason

    def topology_failed(self) -> None:
        self._topology_failures.inc()

    def health_checked(self, verdict: Verdict, state: HealthState | None) -> None:
        """One cycle's GPU health checks; a check that could not run keeps its last values."""
        from gfd.health import CANNOT_DECIDE, FAILING, UNKNOWN
        from gfd.metrics.gpus import problem_rows

        self._gpus.problems = {
            **self._gpus.problems,
            **problem_rows(verdict, self._node_name),
        }
        for result in verdict.results:
            if result.state == UNKNOWN:
                continue
            self._health_failing.labels(check=result.check).set(1 if result.state == FAILING else 0)
            self._health_problems.labels(check=result.check).set(len(result.problems))
            undecided = 1 if result.state == CANNOT_DECIDE else 0
            self._health_undecided.labels(check=result.check).set(undecided)
        if state is not None:
            self._gpu_healthy.set(1 if state.healthy else 0)

    def xid_error(self, event: XidEvent) -> None:
        """One critical Xid as the watcher received it (on the watcher's thread), or as the
        kernel log gave it; a GPU NVML does not list is named by its bus id."""
        from gfd.health.xid_catalog import action_label

        gpu = str(event.gpu.index) if event.gpu.index >= 0 else event.gpu.bus_id
        self._xid_errors.labels(gpu=gpu, xid=str(event.xid), action=action_label(event.xid)).inc()

    def liveness(self) -> Health:
        with self._lock:
            now = self._clock()
            if self._cycle_started_at is not None:
                running = now - self._cycle_started_at
                if running > self._cycle_deadline:
                    return Health(
                        False,
                        f"cycle running for {running:.0f}s, past the {self._cycle_deadline:.0f}s "
                        "deadline",
                    )
                return Health(True, f"cycle running for {running:.1f}s")
            idle = now - self._last_cycle_ended_at
            window = self._liveness_window
            if window is not None and idle > window:
                return Health(False, f"no cycle for {idle:.0f}s, past the {window:.0f}s window")
            within = (
                f"{window:.0f}s window" if window is not None else "no window: interval infinite"
            )
            return Health(True, f"last cycle ended {idle:.1f}s ago ({within})")

    def serve(
        self, address: str = DEFAULT_METRICS_ADDRESS, *, poll_interval: float = 0.5
    ) -> MetricsServer:
        """Serve this telemetry's endpoints; see :func:`gfd.metrics.server.serve`."""
        return serve(self, address, poll_interval=poll_interval)

    def readiness(self) -> Health:
        with self._lock:
            if self._reload_failure is not None:
                return Health(
                    False,
                    f"config reload failed, still running the previous configuration: "
                    f"{self._reload_failure}",
                )
            if self._succeeded_once:
                return Health(True, "a cycle has succeeded")
            return Health(False, "no cycle has succeeded yet")

    def _end_cycle(self) -> None:
        self._cycle_started_at = None
        self._last_cycle_ended_at = self._clock()


def _interval_value(sleep_interval: float | None) -> float:
    """The interval as a sample: None (``infinite``) is +Inf, so ``3 * interval`` never passes."""
    return float("inf") if sleep_interval is None else float(sleep_interval)
