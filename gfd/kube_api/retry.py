"""When a request to the API server is tried again, and how long gfd waits before it does.

This module owns the retry policy's numbers (:class:`RetryPolicy`), which statuses are
worth retrying (every 5xx and :data:`RETRYABLE_CLIENT_STATUSES`), the reading of a
server's ``Retry-After``, and how retries are told (:class:`RetryReporter`: a warning
that names the server, the request, what failed and when the next try is, at most one
every :data:`RETRY_WARNING_INTERVAL` seconds). :class:`gfd.kube_api.client.KubeClient`
applies them; it is the only layer that retries (urllib3's own retries are off).
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Callable
from typing import Any

from gfd.base.frozen import frozen_dataclass

#: 4xx statuses worth retrying (besides every 5xx): the server timed out reading the
#: request, or throttled it. Any other 4xx means the request itself is wrong, denied
#: or moot, and is reported at once.
RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})


@frozen_dataclass
class RetryPolicy:
    """How :meth:`gfd.kube_api.client.KubeClient.request` retries transient failures.

    The n-th retry waits a random time between half and all of
    ``min(max_delay, initial_delay * 2**n)``, or the server's ``Retry-After`` when it
    sent one (never more than ``max_retry_after``). No retry starts whose wait would
    end past the operation's deadline (``deadline`` seconds after it began).

    A write that lost a race (409, or a failed JSON Patch ``test``) is tried again by the
    sink after a random time between 0 and ``min(conflict_max_delay,
    conflict_initial_delay * 2**(n-1))`` (full jitter: two writers that collided do not
    retry in lockstep), until the same deadline; see
    :meth:`gfd.kube_api.client.KubeClient.conflict_delay`.
    """

    initial_delay: float = 0.5
    max_delay: float = 30.0
    deadline: float = 120.0
    max_retry_after: float = 60.0
    conflict_initial_delay: float = 0.05
    conflict_max_delay: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_delay <= self.max_delay:
            raise ValueError("RetryPolicy needs 0 < initial_delay <= max_delay")
        if self.deadline <= 0 or self.max_retry_after <= 0:
            raise ValueError("RetryPolicy needs a positive deadline and max_retry_after")
        if not 0 < self.conflict_initial_delay <= self.conflict_max_delay:
            raise ValueError("RetryPolicy needs 0 < conflict_initial_delay <= conflict_max_delay")


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status may pass when the request is sent again."""
    return status in RETRYABLE_CLIENT_STATUSES or status >= 500


def parse_retry_after(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


#: The least time between two retry warnings of one client: an API server that is down
#: is said at once and then every few seconds, never once per fast retry; the retries
#: in between are logged at debug and counted in the next warning.
RETRY_WARNING_INTERVAL = 5.0


class RetryReporter:
    """Tells each retry of a client's requests: at warning level, at most one every
    ``interval`` seconds of ``clock`` (the first at once), else at debug.

    A warning names the server, the request, what failed, the attempt, how long until the
    next try, and how many retries went at debug since the last warning.
    """

    def __init__(
        self,
        log: Any,
        *,
        interval: float = RETRY_WARNING_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last_warning: float | None = None
        self._quiet = 0

    def retrying(
        self,
        server: str,
        request: str,
        problem: str,
        *,
        attempt: int,
        wait: float,
        status: int | None,
    ) -> None:
        """Attempt ``attempt`` of ``request`` to ``server`` failed with ``problem``; the
        next is in ``wait`` seconds."""
        now = self._clock()
        with self._lock:
            loud = self._last_warning is None or now - self._last_warning >= self._interval
            quiet_since = self._quiet
            if loud:
                self._last_warning, self._quiet = now, 0
            else:
                self._quiet += 1
        fields: dict[str, Any] = {
            "server": server,
            "request": request,
            "problem": problem,
            "attempt": attempt,
            "retry_in_seconds": round(wait, 1),
        }
        if status is not None:
            fields["status"] = status
        if loud:
            if quiet_since:
                fields["retries_since_last_warning"] = quiet_since
            self._log.warning("Kubernetes API request failed; retrying", **fields)
        else:
            self._log.debug("Kubernetes API request failed; retrying", **fields)
