"""The metrics and health HTTP endpoint of the running configuration, across reloads.

The telemetry (:class:`gfd.metrics.AgentTelemetry`) lives as long as an address is
configured: a reload that moves the server keeps the counters and the readiness state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gfd.config import Settings

if TYPE_CHECKING:
    from gfd.metrics import AgentTelemetry, MetricsServer


class MetricsEndpoint:
    """The telemetry and its HTTP server, as the running configuration asks for them.

    :meth:`apply` starts, moves or stops the server for a (re)loaded configuration;
    when a new address cannot be bound it raises and leaves the old server serving.
    """

    def __init__(self, log: Any) -> None:
        self._log = log
        self.telemetry: AgentTelemetry | None = None
        self._server: MetricsServer | None = None
        self._address = ""

    def apply(self, settings: Settings) -> Callable[[], None]:
        """Prepare ``settings``' endpoint; returns the commit that makes it current.

        Raises :class:`ConfigError` (nothing changed) when the new address cannot be
        served. The returned function swaps the servers and is cheap and safe.
        """
        address = settings.metrics_address
        if address == self._address:
            return lambda: self._set_interval(settings)
        telemetry, server = self.telemetry, None
        if address:
            from gfd.metrics import AgentTelemetry

            if telemetry is None:
                telemetry = AgentTelemetry(
                    sleep_interval=settings.sleep_interval, node_name=settings.node_name or ""
                )
            server = telemetry.serve(address)

        def commit() -> None:
            old = self._server
            self._server, self._address = server, address
            self.telemetry = telemetry if address else None
            if old is not None:
                old.close()
            if server is not None:
                self._log.info("metrics and health endpoints up", address=address, port=server.port)
            else:
                self._log.info("metrics and health endpoints off")
            self._set_interval(settings)

        return commit

    def _set_interval(self, settings: Settings) -> None:
        if self.telemetry is not None:
            self.telemetry.set_sleep_interval(settings.sleep_interval)
            self.telemetry.set_node_name(settings.node_name or "")

    def reload_failed(self, reason: str) -> None:
        if self.telemetry is not None:
            self.telemetry.config_reload_failed(reason)

    def reloaded(self) -> None:
        if self.telemetry is not None:
            self.telemetry.config_reloaded()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
