"""Metrics and health: what the agent loop reports, and the HTTP endpoints that serve it.

This package owns the agent's telemetry, one concern a module:

- :mod:`gfd.metrics.telemetry`: :class:`AgentTelemetry`, the Prometheus metrics
  (``gfd_*``) and the state behind the probes, built only when metrics are on;
- :mod:`gfd.metrics.probes`: the liveness and readiness rules;
- :mod:`gfd.metrics.server`: the one small HTTP server on ``--metrics-address``
  (``/metrics``, ``/healthz``, ``/readyz``).

The names the assembly and the deployment checks use are importable from here.
"""

from gfd.metrics.probes import liveness_window_for as liveness_window_for
from gfd.metrics.server import DEFAULT_METRICS_ADDRESS as DEFAULT_METRICS_ADDRESS
from gfd.metrics.server import DEFAULT_METRICS_PORT as DEFAULT_METRICS_PORT
from gfd.metrics.server import ListenAddress as ListenAddress
from gfd.metrics.server import MetricsServer as MetricsServer
from gfd.metrics.server import parse_listen_address as parse_listen_address
from gfd.metrics.server import serve as serve
from gfd.metrics.telemetry import AgentTelemetry as AgentTelemetry
