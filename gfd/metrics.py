"""Metrics and health: what the agent loop reports, and the HTTP endpoints that serve it.

This module owns the agent's telemetry: the Prometheus metrics (``gfd_*``), the
liveness and readiness rules, and one small HTTP server on ``--metrics-address``
(default :data:`DEFAULT_METRICS_ADDRESS`) that answers

- ``/metrics``: Prometheus exposition (text, or OpenMetrics when asked for);
- ``/healthz``: 200 while the loop is turning, 503 when it is stuck;
- ``/readyz``: 200 once a first cycle succeeded, 503 before, and 503 while the last
  SIGHUP reload failed (the previous configuration keeps running; the body says so).

The loop talks to a :class:`Telemetry`: :class:`AgentTelemetry` when metrics are on,
:class:`DisabledTelemetry` (does nothing, imports nothing) when they are off.
``prometheus_client`` is imported only when an :class:`AgentTelemetry` is built, so
a run without metrics never pays for it.

Liveness, precisely: the loop is *live* while it is either inside a cycle that has
run for at most ``cycle_deadline`` seconds, or between cycles for at most the
liveness window since the last cycle ended: twice the sleep interval plus
``liveness_margin`` (see :func:`liveness_window_for`). With no interval
(``--sleep-interval infinite``) the loop may sleep for ever after a cycle; only a
hung cycle then makes it not live.
"""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gfd.agent import NullTelemetry
from gfd.errors import ERROR_KINDS, ConfigError, echo

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from gfd.health import HealthState, Verdict

#: Default ``--metrics-address``: every interface, port 8079. Outside the exporter
#: range 9100-9999 (all of it allocated, 9400 being NVIDIA's DCGM exporter), and
#: clear of node-feature-discovery's 8080/8081 and the kubelet's 10248-10250.
DEFAULT_METRICS_ADDRESS = ":8079"
DEFAULT_METRICS_PORT = 8079

#: How long one cycle may run before the loop counts as stuck. Generous: a cycle
#: includes NVML init on a cold driver and sink retries with back-off.
DEFAULT_CYCLE_DEADLINE = 300.0

#: Slack added to twice the sleep interval: jitter, a slow API server, a cold start.
LIVENESS_MARGIN = 30.0

#: Cycle duration buckets (seconds): a simulated read takes milliseconds, a real
#: 8-GPU read tenths of a second, a cycle with API retries tens of seconds.
CYCLE_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def liveness_window_for(
    sleep_interval: float | None, *, margin: float = LIVENESS_MARGIN
) -> float | None:
    """The liveness window for a loop that sleeps ``sleep_interval`` seconds between
    cycles (``None``: it sleeps for ever). Two intervals plus a margin, so one late
    wake-up (the loop's jitter, a slow API server) never restarts the pod."""
    if sleep_interval is None:
        return None
    if sleep_interval < 0:
        raise ConfigError(f"sleep interval must not be negative, got {sleep_interval!r}")
    return 2.0 * sleep_interval + margin


@dataclass(frozen=True)
class Health:
    """One health verdict: ``ok`` and a one-line reason for people reading probes."""

    ok: bool
    reason: str


class Telemetry(Protocol):
    """What the agent loop reports. Every method is cheap and never raises."""

    def cycle_started(self) -> None:
        """A cycle begins (the loop woke up)."""
        ...

    def cycle_succeeded(self, duration: float, labels_published: int) -> None:
        """A cycle published ``labels_published`` labels in ``duration`` seconds."""
        ...

    def cycle_failed(self, kind: str, duration: float) -> None:
        """A cycle failed with an error of ``kind`` (see :func:`error_kind`)."""
        ...

    def nvml_up(self, up: bool) -> None:
        """Whether the last NVML read worked."""
        ...

    def topology_failed(self) -> None:
        """A cycle's topology failed; its labels were withheld, the others published."""
        ...

    def liveness(self) -> Health:
        """Is the loop turning?"""
        ...

    def readiness(self) -> Health:
        """Has a first cycle succeeded?"""
        ...


class DisabledTelemetry(NullTelemetry):
    """The null telemetry for runs without metrics: records nothing, always healthy."""

    def liveness(self) -> Health:
        return Health(True, "metrics are disabled")

    def readiness(self) -> Health:
        return Health(True, "metrics are disabled")


class AgentTelemetry:
    """Prometheus metrics plus the liveness and readiness state of the agent loop.

    ``registry``: where the metrics go; by default a fresh registry with the
    process and platform collectors, so several instances (tests) never clash.
    ``clock`` measures intervals (monotonic); ``wall_clock`` stamps the last
    success (Unix seconds).
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
    ) -> None:
        import prometheus_client

        liveness_window = liveness_window_for(sleep_interval, margin=liveness_margin)
        if liveness_window is not None and liveness_window <= 0:
            raise ConfigError(f"liveness window must be positive, got {liveness_window!r}")
        if cycle_deadline <= 0:
            raise ConfigError(f"cycle deadline must be positive, got {cycle_deadline!r}")
        if registry is None:
            registry = prometheus_client.CollectorRegistry()
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
            "1 while a GPU health check reports a problem (gpu-lost, device-plugin, "
            "nvlink), else 0; only the checks that run have a series.",
            ["check"],
            registry=registry,
        )
        self._health_problems = prometheus_client.Gauge(
            "gfd_health_check_problems",
            "Problems the check found in its last run, those still in their grace "
            "period included (GPUs lost, resources short, GPUs with links down).",
            ["check"],
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

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        """A reload changed the interval: the liveness window moves with it, at once."""
        window = liveness_window_for(sleep_interval, margin=self._liveness_margin)
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
        from gfd.health import FAILING, UNKNOWN

        for result in verdict.results:
            if result.state == UNKNOWN:
                continue
            self._health_failing.labels(check=result.check).set(1 if result.state == FAILING else 0)
            self._health_problems.labels(check=result.check).set(len(result.problems))
        if state is not None:
            self._gpu_healthy.set(1 if state.healthy else 0)

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
        """Serve this telemetry's endpoints; see the module-level :func:`serve`."""
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


@dataclass(frozen=True)
class ListenAddress:
    """A parsed ``--metrics-address``: ``host`` is ``""`` for every interface."""

    host: str
    port: int


def parse_listen_address(address: str) -> ListenAddress:
    """Parse ``HOST:PORT``, ``:PORT``, ``[V6]:PORT`` or ``PORT``; port 0 picks a free one."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(
            f"--metrics-address {echo(address)}: write an IPv6 host in brackets, e.g. [::1]:8079"
        )
    # ASCII digits only: int() would also take fullwidth digits, "80_79" or " 80".
    if not (port_text.isascii() and port_text.isdigit()):
        raise ConfigError(
            f"--metrics-address {echo(address)}: port {echo(port_text)} is not a number "
            f"(expected HOST:PORT, e.g. {DEFAULT_METRICS_ADDRESS})"
        )
    if len(port_text) > 5:
        raise ConfigError(
            f"--metrics-address {echo(address)}: port {echo(port_text)} is outside 0-65535"
        )
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"--metrics-address {echo(address)}: port {port} is outside 0-65535")
    return ListenAddress(host=host, port=port)


class _TelemetryHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Probes and scrapes are short; one stuck client must not hold a thread for ever.
    request_timeout = 10.0

    def __init__(
        self,
        address: tuple[str, int],
        telemetry: Telemetry,
        registry: CollectorRegistry | None,
        family: socket.AddressFamily,
    ) -> None:
        self.address_family = family
        self.telemetry = telemetry
        self.registry = registry
        super().__init__(address, _TelemetryHandler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # "::" should also accept IPv4 clients (the kubelet probes the pod IP).
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _TelemetryHandler(http.server.BaseHTTPRequestHandler):
    server: _TelemetryHTTPServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(_TelemetryHTTPServer.request_timeout)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send_metrics()
        elif path == "/healthz":
            self._send_health(self.server.telemetry.liveness())
        elif path == "/readyz":
            self._send_health(self.server.telemetry.readiness())
        else:
            self._send(
                404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz, /readyz\n"
            )

    def do_HEAD(self) -> None:
        self.do_GET()

    def _send_metrics(self) -> None:
        registry = self.server.registry
        if registry is None:
            self._send(404, "text/plain; charset=utf-8", b"metrics are disabled\n")
            return
        from prometheus_client import exposition

        encoder, content_type = exposition.choose_encoder(self.headers.get("Accept", ""))
        self._send(200, content_type, encoder(registry))

    def _send_health(self, health: Health) -> None:
        body = f"{'ok' if health.ok else 'unhealthy'}: {health.reason}\n".encode()
        self._send(200 if health.ok else 503, "text/plain; charset=utf-8", body)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Probes hit every few seconds; access logs would drown the agent's own log.
        return None


class MetricsServer:
    """The running endpoint server. ``port`` is the bound port (useful with port 0)."""

    def __init__(self, server: _TelemetryHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host: str = str(server.server_address[0])
        self.port: int = int(server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for a client on this machine (``http://127.0.0.1:PORT``)."""
        host = self.host
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and release the port. Safe to call twice."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5.0)
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve(
    telemetry: Telemetry,
    address: str = DEFAULT_METRICS_ADDRESS,
    *,
    poll_interval: float = 0.5,
) -> MetricsServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``address`` in a daemon thread.

    ``poll_interval`` bounds how long :meth:`MetricsServer.close` waits for the
    serving thread to notice (tests use a short one).

    Raises :class:`ConfigError` when the address is malformed or cannot be bound
    (port in use, unknown host), naming the address.
    """
    listen = parse_listen_address(address)
    family = socket.AF_INET
    host = listen.host
    if host == "":
        # Every interface: dual-stack when the kernel has IPv6, else IPv4 only.
        family, host = (socket.AF_INET6, "::") if socket.has_ipv6 else (socket.AF_INET, "0.0.0.0")
    else:
        try:
            if ipaddress.ip_address(host).version == 6:
                family = socket.AF_INET6
        except ValueError:
            pass  # a host name: let bind() resolve it as IPv4
    registry = telemetry.registry if isinstance(telemetry, AgentTelemetry) else None
    try:
        server = _TelemetryHTTPServer((host, listen.port), telemetry, registry, family)
    except OSError as error:
        if listen.host == "" and family == socket.AF_INET6:
            # IPv6 compiled in but disabled on this node: fall back to IPv4.
            try:
                server = _TelemetryHTTPServer(
                    ("0.0.0.0", listen.port), telemetry, registry, socket.AF_INET
                )
            except OSError as error4:
                raise ConfigError(
                    f"--metrics-address {echo(address)}: cannot listen: {error4}"
                ) from None
        else:
            raise ConfigError(
                f"--metrics-address {echo(address)}: cannot listen: {error}"
            ) from None
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": poll_interval},
        name="gfd-metrics",
        daemon=True,
    )
    thread.start()
    return MetricsServer(server, thread)
