"""The process's one connection to the API server, and the only code that sends requests.

This module owns :class:`KubeClient` and its construction (:func:`connect_kubernetes`):
the one ``ApiClient`` of the process, per-request timeouts, and the retry loop. Retries
belong to this layer only. urllib3's own retries are switched off
(``Configuration.retries = False``) and :meth:`KubeClient.request` retries with tenacity
as :mod:`gfd.kube_api.retry` says: on 5xx, on 408 and 429 (waiting at least the server's
``Retry-After``), on connection errors and timeouts; never on other 4xx. Delays grow
exponentially with jitter up to a cap, and the whole operation has a deadline. Every
backoff sleep waits on the agent's stop event, so SIGTERM ends a retry storm at once.

Each retry is told (:class:`gfd.kube_api.retry.RetryReporter`: a warning naming the server,
the request and what failed, at most one every few seconds), and a one-shot run bounds
every operation (:meth:`KubeClient.give_up_by`).

A 401 re-reads the credentials (:mod:`gfd.kube_api.credentials`: the projected
service-account token rotates under a running pod; a kubeconfig may be rewritten) and
tries once more before it is reported. In a pod, the service account's CA file is looked
at again every few seconds and after a TLS failure: a CA the kubelet filled late or
rotated is used from the next request on, and one that is still empty makes requests
retryable failures, not permanent ones. Failures leave as :mod:`gfd.kube_api.errors` says.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import tenacity

from gfd.base.errors import ConfigError
from gfd.base.logs import get_logger
from gfd.kube_api.credentials import (
    IN_CLUSTER_CA_PATH,
    IN_CLUSTER_TOKEN_PATH,
    Credentials,
    in_cluster_credentials,
    kubeconfig_credentials,
)
from gfd.kube_api.errors import Interrupted, KubeApiError, KubeApiPermanentError
from gfd.kube_api.responses import KubeResponse, read_response, status_message
from gfd.kube_api.retry import (
    RetryPolicy,
    RetryReporter,
    is_retryable_status,
    parse_retry_after,
)

log = get_logger()

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def path_segment(value: str) -> str:
    """Quote one URL path segment (a name or namespace) so that ``/`` cannot escape it."""
    return quote(value, safe="")


#: The shortest timeout a request is sent with, even when its operation's deadline is
#: closer: a request needs some time to be answered at all.
MIN_REQUEST_TIMEOUT = 0.5


def connection_problem(exc: BaseException, server: str, timeout: float) -> str:
    """What went wrong on the way to ``server``, in a few words: refused, unresolvable,
    timed out, dropped (urllib3's own message repeats the pool, host and port thrice)."""
    import urllib3.exceptions as wire

    cause = exc.__cause__
    reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else None
    if isinstance(exc, wire.NameResolutionError):
        return f"cannot resolve the host of {server}: {reason or exc}"
    if isinstance(exc, wire.NewConnectionError):
        return f"cannot connect to {server}: {reason or str(exc).rsplit(': ', 1)[-1]}"
    if isinstance(exc, wire.ConnectTimeoutError):
        return f"cannot connect to {server}: no answer within {timeout:g} s"
    if isinstance(exc, wire.ReadTimeoutError):
        return f"{server} sent no answer within {timeout:g} s"
    if isinstance(exc, wire.ProtocolError):
        inner = exc.args[1] if len(exc.args) > 1 else exc
        return f"{server} dropped the connection: {type(inner).__name__}: {inner}"
    return f"{server}: {type(exc).__name__}: {exc}"


#: How often the service account's CA file is looked at while it is fine (one ``stat``).
TRUST_CHECK_SECONDS = 5.0


class _TlsFailure(Exception):
    """Internal: the TLS handshake failed (the client's status-0 ApiException)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Transient(Exception):
    """Internal: one attempt failed in a retryable way."""

    def __init__(self, status: int | None, detail: str, retry_after: float | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class KubeClient:
    """The process's single connection to the API server.

    Owns one ``kubernetes.client.ApiClient``. Sinks call :meth:`request`; nothing
    else in gfd builds requests. Close it once, when the agent exits.
    """

    def __init__(
        self,
        *,
        api_client: Any,
        credentials: Credentials,
        request_timeout: float,
        retry_policy: RetryPolicy,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api_client
        self._credentials = credentials
        self.request_timeout = request_timeout
        self.retry_policy = retry_policy
        self.clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._retries = RetryReporter(log, clock=clock)
        #: The clock value by which every operation gives up, whatever its own deadline
        #: (a one-shot run's bound), and why, for the line that says it gave up.
        self._give_up_at: float | None = None
        self._give_up_why = ""
        #: When the service account's CA file is looked at next (:meth:`_check_trust`).
        self._next_trust_check = clock() + TRUST_CHECK_SECONDS

    @property
    def server(self) -> str:
        """The API server's URL, as the credentials name it."""
        return str(self._api.configuration.host)

    @property
    def unverified(self) -> str | None:
        """Why the server's certificate is not verified (a kubeconfig's
        ``insecure-skip-tls-verify``), or None when it is."""
        return self._credentials.unverified

    def give_up_by(self, when: float, why: str) -> None:
        """Bound every operation from now on to end by ``when`` (this client's clock):
        retries stop in time and each request's timeout is cut to what is left."""
        self._give_up_at, self._give_up_why = when, why

    def deadline(self) -> float:
        """The clock value by which an operation started now must give up."""
        own = self.clock() + self.retry_policy.deadline
        return own if self._give_up_at is None else min(own, self._give_up_at)

    def conflict_delay(self, conflicts: int) -> float:
        """How long to wait before the ``conflicts``-th retry of a write that lost a race."""
        policy = self.retry_policy
        exponent = min(max(conflicts - 1, 0), 30)  # 2**30 is far past any cap
        ceiling = min(policy.conflict_max_delay, policy.conflict_initial_delay * 2**exponent)
        return self._rng.uniform(0.0, ceiling)

    def request(
        self,
        method: str,
        path: str,
        *,
        stop: threading.Event,
        deadline: float,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept_statuses: Collection[int] = (),
    ) -> KubeResponse:
        """Send one request, retrying transient failures until ``deadline``.

        Returns 2xx responses and those whose status is in ``accept_statuses`` (a
        sink that expects 404 or 409 handles them itself). Raises
        :class:`KubeApiPermanentError`, :class:`KubeApiError` or
        :class:`Interrupted`.
        """
        started = self.clock()
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Transient),
            wait=self._backoff,
            stop=lambda state: self.clock() + state.upcoming_sleep > deadline,
            before_sleep=lambda state: self._report_retry(state, method, path),
            sleep=lambda seconds: self._sleep(seconds, stop, method, path),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._send_authenticated(
                        method, path, query, body, content_type, accept_statuses, deadline
                    )
        except _Transient as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            took = self.clock() - started
            bound = f": {self._give_up_why}" if deadline == self._give_up_at else ""
            raise KubeApiError(
                method,
                path,
                exc.status,
                f"{exc.detail} (gave up after {attempts} attempt{'s' if attempts != 1 else ''} "
                f"in {took:.1f} s{bound})",
            ) from None
        raise AssertionError("tenacity returned without a result")  # pragma: no cover

    def close(self) -> None:
        """Close the connection pool."""
        self._api.close()

    def _backoff(self, state: tenacity.RetryCallState) -> float:
        policy = self.retry_policy
        failure = state.outcome.exception() if state.outcome else None
        if isinstance(failure, _Transient) and failure.retry_after is not None:
            return min(failure.retry_after, policy.max_retry_after)
        ceiling = min(policy.max_delay, policy.initial_delay * 2 ** (state.attempt_number - 1))
        return self._rng.uniform(ceiling / 2, ceiling)

    def _check_trust(self, *, after_tls_failure: bool) -> None:
        """Look at the service account's CA file again, when due: every
        :data:`TRUST_CHECK_SECONDS`, at every attempt while it cannot be trusted, and after
        a TLS failure. A changed file drops the pooled connections (verified by the old
        CA: the next ones verify with the new); a CA not fit to trust, or one that changed
        under a TLS failure, makes the attempt a retryable failure."""
        ca = self._credentials.ca
        if ca is None:
            return
        with self._lock:
            now = self.clock()
            if not after_tls_failure and ca.problem is None and now < self._next_trust_check:
                return
            self._next_trust_check = now + TRUST_CHECK_SECONDS
            changed = ca.check()
            if changed:
                self._api.rest_client.pool_manager.clear()
            problem = ca.problem
        if changed and problem is None:
            log.info("service account CA reloaded", path=str(ca.path))
        if problem is not None:
            raise _Transient(None, problem)
        if changed and after_tls_failure:
            raise _Transient(
                None, f"service account CA certificate {ca.path} changed; trying again"
            )

    def _report_retry(self, state: tenacity.RetryCallState, method: str, path: str) -> None:
        failure = state.outcome.exception() if state.outcome else None
        problem = failure.detail if isinstance(failure, _Transient) else str(failure)
        status = failure.status if isinstance(failure, _Transient) else None
        wait = state.next_action.sleep if state.next_action else 0.0
        self._retries.retrying(
            self.server,
            f"{method} {path}",
            problem,
            attempt=state.attempt_number,
            wait=wait,
            status=status,
        )

    @staticmethod
    def _sleep(seconds: float, stop: threading.Event, method: str, path: str) -> None:
        if stop.wait(seconds):
            raise Interrupted(f"interrupted while waiting to retry {method} {path}")

    def _send_authenticated(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        accept_statuses: Collection[int],
        deadline: float,
    ) -> KubeResponse:
        self._check_trust(after_tls_failure=False)
        try:
            response = self._send_once(method, path, query, body, content_type, deadline)
        except _TlsFailure as exc:
            # A CA the kubelet filled or rotated since is retried at once; a CA that
            # cannot be trusted yet (empty, unreadable) is retried until it can.
            self._check_trust(after_tls_failure=True)
            raise KubeApiPermanentError(method, path, None, exc.reason) from exc
        if response.status == 401:
            # A rotated token is the usual cause: read the credentials again, once.
            with self._lock:
                try:
                    self._credentials.reload(self._api.configuration)
                except ConfigError as exc:
                    raise KubeApiPermanentError(method, path, 401, str(exc)) from exc
            log.info("credentials reloaded after a 401", source=self._credentials.describe)
            response = self._send_once(method, path, query, body, content_type, deadline)
        status = response.status
        if 200 <= status < 300 or status in accept_statuses:
            return response
        message = status_message(response.body)
        if is_retryable_status(status):
            # Told by the retry reporter, with the wait it chose (Retry-After included).
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise _Transient(status, message, retry_after)
        raise KubeApiPermanentError(method, path, status, self._explain(status, message))

    def _explain(self, status: int, message: str) -> str:
        if status == 401:
            return (
                f"{message}; the credentials from {self._credentials.describe} were "
                "rejected even after reading them again"
            )
        if status == 403:
            # RBAC and admission policies (gfd's own ValidatingAdmissionPolicy) both
            # answer 403; the server's message says which.
            return f"{message}; check the RBAC rules and admission policies for gfd"
        return message

    def _send_once(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        deadline: float,
    ) -> KubeResponse:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        # No request outlives the operation's deadline by more than MIN_REQUEST_TIMEOUT.
        timeout = max(MIN_REQUEST_TIMEOUT, min(self.request_timeout, deadline - self.clock()))

        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            _, url, header_params, serialised, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query.items()) if query else None,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            raw = self._api.call_api(
                method,
                url,
                header_params=header_params,
                body=serialised,
                _request_timeout=timeout,
            )
            return read_response(raw, method, path)
        except ApiException as exc:
            # The client turns TLS failures into status-0 ApiExceptions.
            raise _TlsFailure(str(exc.reason)) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _Transient(None, connection_problem(exc, self.server, timeout)) from exc


def connect_kubernetes(
    *,
    kubeconfig: str | None,
    request_timeout: float = 10.0,
    retry_policy: RetryPolicy | None = None,
    in_cluster_token_path: str = IN_CLUSTER_TOKEN_PATH,
    in_cluster_ca_path: str = IN_CLUSTER_CA_PATH,
    in_cluster_host_env: Mapping[str, str] | None = None,
    context: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> KubeClient:
    """Build the process's :class:`KubeClient`.

    With ``kubeconfig`` set, credentials come from that file (``context``, or its
    current context). Otherwise the pod's service account is used: the API server
    from ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` in
    ``in_cluster_host_env`` (default: the process environment), the CA and the
    rotating token from the given files. Raises :class:`ConfigError` naming what is
    missing. The ``kubernetes`` package is imported here, not at gfd start-up.
    """
    if request_timeout <= 0:
        raise ConfigError(f"request timeout must be positive, got {request_timeout}")
    from kubernetes import client as k8s_client

    configuration: Any = k8s_client.Configuration()
    if kubeconfig is not None:
        credentials = kubeconfig_credentials(kubeconfig, context)
    else:
        env = os.environ if in_cluster_host_env is None else in_cluster_host_env
        credentials = in_cluster_credentials(
            configuration, env, Path(in_cluster_token_path), Path(in_cluster_ca_path)
        )
    credentials.reload(configuration)
    if credentials.refresh_hook is not None:
        configuration.refresh_api_key_hook = credentials.refresh_hook
    # tenacity in KubeClient.request is the only layer that retries.
    configuration.retries = False
    api_client = k8s_client.ApiClient(configuration)
    api_client.user_agent = "gfd"
    return KubeClient(
        api_client=api_client,
        credentials=credentials,
        request_timeout=request_timeout,
        retry_policy=retry_policy or RetryPolicy(),
        clock=clock,
    )
