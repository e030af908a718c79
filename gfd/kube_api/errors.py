"""How a request to the API server fails: the error tree every caller of the client sees.

Every failure of :meth:`gfd.kube_api.client.KubeClient.request` leaves as one of:

- :class:`KubeApiError` (a :class:`~gfd.base.errors.SinkError`: retrying later may help): 5xx,
  408 and 429 past the retry deadline, connection errors and timeouts;
- :class:`KubeApiPermanentError` (a :class:`~gfd.base.errors.SinkPermanentError`): any other
  4xx such as 400, 401 after a credential reload, 403, 404 or 422, and TLS set-up failures;
- :class:`Interrupted`: the stop event was set while a retry was waiting.

The first two name the method, the path, the HTTP status and the API server's own message.
A response that is no Kubernetes object, or too large, is a plain ``SinkError``
(:mod:`gfd.kube_api.responses`); bad credentials at start-up are a ``ConfigError``
(:mod:`gfd.kube_api.credentials`).
"""

from __future__ import annotations

from gfd.base.errors import SinkError, SinkPermanentError


class _RequestFailure(Exception):
    """What both request errors carry: the request, the HTTP status (if any), the detail."""

    #: How the message reads when no HTTP status came back.
    no_status = "no response"

    def __init__(self, method: str, path: str, status: int | None, detail: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        what = f"HTTP {status}" if status is not None else self.no_status
        super().__init__(f"Kubernetes API {method} {path}: {what}: {detail}")


class KubeApiError(_RequestFailure, SinkError):
    """A request failed in a way that may pass later (5xx, 429, network, deadline)."""


class KubeApiPermanentError(_RequestFailure, SinkPermanentError):
    """A request that retrying cannot fix (denied, invalid, not found)."""

    no_status = "request not sent"


class Interrupted(SinkError):
    """The stop event was set while a request was waiting to be retried."""
