"""The HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz`` on ``--metrics-address``.

This module owns the one small server (a daemon thread) and the parsing of its address
(default :data:`DEFAULT_METRICS_ADDRESS`). It answers

- ``/metrics``: Prometheus exposition (text, or OpenMetrics when asked for);
- ``/healthz``: 200 while the loop is turning, 503 when it is stuck;
- ``/readyz``: 200 once a first cycle succeeded, 503 before, and 503 while the last
  SIGHUP reload failed (the previous configuration keeps running; the body says so).

What it serves is any :class:`gfd.metrics.probes.Probed`; the verdicts are the
telemetry's (:mod:`gfd.metrics.telemetry`).
"""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
from typing import TYPE_CHECKING

from gfd.base.errors import ConfigError, echo
from gfd.base.frozen import frozen_dataclass
from gfd.metrics.probes import Health, Probed

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: Default ``--metrics-address``: every interface, port 8079. Outside the exporter
#: range 9100-9999 (all of it allocated, 9400 being NVIDIA's DCGM exporter), and
#: clear of node-feature-discovery's 8080/8081 and the kubelet's 10248-10250.
DEFAULT_METRICS_PORT = 8079
DEFAULT_METRICS_ADDRESS = f":{DEFAULT_METRICS_PORT}"


@frozen_dataclass
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
        telemetry: Probed,
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
        self.port: int = int(server.server_address[1])

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
    telemetry: Probed,
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
    registry = telemetry.registry
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
