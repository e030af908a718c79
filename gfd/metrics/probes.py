"""The liveness and readiness rules, and what the endpoints ask of the telemetry they serve.

This module owns the verdict a probe gets (:class:`Health`), the liveness window
(:func:`liveness_window_for`), and :class:`Probed`, the narrow view of the telemetry the
HTTP endpoints need. Liveness, precisely: the loop is *live* while it is either inside a
cycle that has run for at most ``cycle_deadline`` seconds, or between cycles for at most
the liveness window since the last cycle ended: twice the sleep interval plus
``liveness_margin``. With no interval (``--sleep-interval infinite``) the loop may sleep
for ever after a cycle; only a hung cycle then makes it not live. Readiness: a first
cycle succeeded, and the last SIGHUP reload did not fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gfd.base.errors import ConfigError
from gfd.base.frozen import frozen_dataclass

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: How long one cycle may run before the loop counts as stuck. Generous: a cycle
#: includes NVML init on a cold driver and sink retries with back-off.
DEFAULT_CYCLE_DEADLINE = 300.0

#: Slack added to twice the sleep interval: jitter, a slow API server, a cold start.
LIVENESS_MARGIN = 30.0


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


@frozen_dataclass
class Health:
    """One health verdict: ``ok`` and a one-line reason for people reading probes."""

    ok: bool
    reason: str


class Probed(Protocol):
    """What the endpoints serve: the two verdicts, and the metrics (None: ``/metrics`` is 404)."""

    @property
    def registry(self) -> CollectorRegistry | None: ...

    def liveness(self) -> Health:
        """Is the loop turning?"""
        ...

    def readiness(self) -> Health:
        """Has a first cycle succeeded, and did the last reload not fail?"""
        ...
