"""The Kubernetes API client that the node, NodeFeature and condition sinks share.

This module owns how gfd talks to the API server: loading credentials (in-cluster
service account with a rotating token, or a kubeconfig file), the one ``ApiClient``
of the process, per-request timeouts, and the retry policy.

Retries belong to one layer only. urllib3's own retries are switched off
(``Configuration.retries = False``) and :meth:`KubeClient.request` retries with
tenacity: on 5xx, on 429 (waiting at least the server's ``Retry-After``), on
connection errors and timeouts; never on other 4xx. Delays grow exponentially with
jitter up to a cap, and the whole operation has a deadline. Every backoff sleep
waits on the agent's stop event, so SIGTERM ends a retry storm at once.

A 401 re-reads the credentials (the projected service-account token rotates under
a running pod; a kubeconfig may be rewritten) and tries once more before it is
reported. Responses are returned as raw JSON bytes: gfd never builds the client's
model objects, which would cost time and memory for nothing.

Errors: every failure leaves as :class:`KubeApiError` (a ``SinkError``; retrying
later may help) or :class:`KubeApiPermanentError` (a ``SinkPermanentError``: any
other 4xx such as 400, 401 after a credential reload, 403, 404 or 422, and TLS
set-up failures), each naming the method, the path, the HTTP status and the API
server's own message.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import tenacity

from gfd.errors import ConfigError, SinkError, SinkPermanentError, echo, shorten
from gfd.inputs import (
    KUBECONFIG_LIMIT,
    TOKEN_FILE_LIMIT,
    InputRejected,
    check_yaml,
    read_bounded_text,
)
from gfd.logs import get_logger

log = get_logger()

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
IN_CLUSTER_TOKEN_PATH = f"{SERVICE_ACCOUNT_DIR}/token"
IN_CLUSTER_CA_PATH = f"{SERVICE_ACCOUNT_DIR}/ca.crt"

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

#: 4xx statuses worth retrying (besides every 5xx): the server timed out reading the
#: request, or throttled it. Any other 4xx means the request itself is wrong, denied
#: or moot, and is reported at once.
RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class RetryPolicy:
    """How :meth:`KubeClient.request` retries transient failures.

    The n-th retry waits a random time between half and all of
    ``min(max_delay, initial_delay * 2**n)``, or the server's ``Retry-After`` when it
    sent one (never more than ``max_retry_after``). No retry starts whose wait would
    end past the operation's deadline (``deadline`` seconds after it began).

    A write that lost a race (409, or a failed JSON Patch ``test``) is tried again by the
    sink after a random time between 0 and ``min(conflict_max_delay,
    conflict_initial_delay * 2**(n-1))`` (full jitter: two writers that collided do not
    retry in lockstep), until the same deadline; see :meth:`KubeClient.conflict_delay`.
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


@dataclass(frozen=True)
class KubeResponse:
    """An HTTP response from the API server, body kept as bytes."""

    status: int
    body: bytes
    #: Header names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` when it is not, or is nested absurdly deep)."""
        try:
            return json.loads(self.body) if self.body else None
        except RecursionError as exc:
            raise ValueError("JSON nested too deeply") from exc

    def json_object(self, what: str) -> dict[str, Any]:
        """The body as a Kubernetes object whose metadata has the shapes the API defines.

        Raises :class:`SinkError` with one line naming ``what`` and the first thing that
        is wrong: a proxy or a broken server that sends garbage fails one cycle, never
        the agent.
        """
        try:
            data = self.json()
        except ValueError as exc:
            raise SinkError(
                f"{what}: API server sent invalid JSON: {shorten(str(exc), 120)}"
            ) from exc
        problem = object_shape_problem(data)
        if problem is not None:
            raise SinkError(f"{what}: API server sent a malformed object: {problem}")
        assert isinstance(data, dict)
        return data


def _kind_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else f"a {type(value).__name__}"
    )


def object_shape_problem(data: Any) -> str | None:
    """What is wrong with the shape of an object's metadata, or None when nothing is."""
    if not isinstance(data, dict):
        return f"{_kind_name(data)}, not an object"
    metadata = data.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return f"metadata is {_kind_name(metadata)}, not an object"
    for field_name in ("labels", "annotations"):
        value = metadata.get(field_name)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"metadata.{field_name} is {_kind_name(value)}, not a map of strings"
        for key, item in value.items():
            if not isinstance(item, str):
                return f"metadata.{field_name}[{echo(key)}] is {_kind_name(item)}, not a string"
    for field_name in ("resourceVersion", "name", "uid"):
        value = metadata.get(field_name)
        if value is not None and not isinstance(value, str):
            return f"metadata.{field_name} is {_kind_name(value)}, not a string"
    owners = metadata.get("ownerReferences")
    if owners is not None and (
        not isinstance(owners, list) or not all(isinstance(o, dict) for o in owners)
    ):
        return "metadata.ownerReferences is not a list of objects"
    return None


class _Transient(Exception):
    """Internal: one attempt failed in a retryable way."""

    def __init__(self, status: int | None, detail: str, retry_after: float | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


def status_message(body: bytes) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, or the body itself, shortened."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    text = body.decode("utf-8", "replace").strip()
    return text[:300] if text else "(empty body)"


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


def path_segment(value: str) -> str:
    """Quote one URL path segment (a name or namespace) so that ``/`` cannot escape it."""
    return quote(value, safe="")


class _Credentials:
    """Where the bearer token comes from, and how to read it again after a 401."""

    def __init__(
        self,
        *,
        describe: str,
        reload: Callable[[Any], None],
        refresh_hook: Callable[[Any], None] | None = None,
    ) -> None:
        self.describe = describe
        self.reload = reload
        self.refresh_hook = refresh_hook


class _RotatingTokenFile:
    """A service-account token file that the kubelet replaces while the pod runs.

    The token is read again whenever the file's identity (inode, size, mtime) changes,
    which costs one ``stat`` per request, and unconditionally after a 401.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int, int] | None = None
        self.token = ""
        self.read(force=True)

    def read(self, *, force: bool) -> None:
        try:
            stat = self.path.stat()
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if not force and signature == self._signature:
                return
            token = read_bounded_text(self.path, TOKEN_FILE_LIMIT).strip()
        except OSError as exc:
            raise ConfigError(
                f"service account token {self.path}: cannot read: {exc.strerror or exc}"
            ) from exc
        except (InputRejected, UnicodeDecodeError) as exc:
            problem = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise ConfigError(f"service account token {self.path}: {problem}") from exc
        if not token:
            raise ConfigError(f"service account token {self.path}: file is empty")
        self.token = token
        self._signature = signature

    def apply(self, configuration: Any) -> None:
        configuration.api_key["authorization"] = self.token
        configuration.api_key_prefix["authorization"] = "Bearer"


class KubeClient:
    """The process's single connection to the API server.

    Owns one ``kubernetes.client.ApiClient``. Sinks call :meth:`request`; nothing
    else in gfd builds requests. Close it once, when the agent exits.
    """

    def __init__(
        self,
        *,
        api_client: Any,
        credentials: _Credentials,
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

    @property
    def host(self) -> str:
        """The API server URL requests go to."""
        return str(self._api.configuration.host)

    def deadline(self) -> float:
        """The clock value by which an operation started now must give up."""
        return self.clock() + self.retry_policy.deadline

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
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Transient),
            wait=self._backoff,
            stop=lambda state: self.clock() + state.upcoming_sleep > deadline,
            sleep=lambda seconds: self._sleep(seconds, stop, method, path),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._send_authenticated(
                        method, path, query, body, content_type, accept_statuses
                    )
        except _Transient as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            raise KubeApiError(
                method, path, exc.status, f"{exc.detail} (gave up after {attempts} attempt(s))"
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

    @staticmethod
    def _sleep(seconds: float, stop: threading.Event, method: str, path: str) -> None:
        log.debug("kube_retry_wait", method=method, path=path, seconds=round(seconds, 3))
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
    ) -> KubeResponse:
        response = self._send_once(method, path, query, body, content_type)
        if response.status == 401:
            # A rotated token is the usual cause: read the credentials again, once.
            with self._lock:
                try:
                    self._credentials.reload(self._api.configuration)
                except ConfigError as exc:
                    raise KubeApiPermanentError(method, path, 401, str(exc)) from exc
            log.info("kube_credentials_reloaded", source=self._credentials.describe)
            response = self._send_once(method, path, query, body, content_type)
        status = response.status
        if 200 <= status < 300 or status in accept_statuses:
            return response
        message = status_message(response.body)
        if status in RETRYABLE_CLIENT_STATUSES or status >= 500:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            log.info(
                "kube_retryable_status",
                method=method,
                path=path,
                status=status,
                retry_after=retry_after,
                message=message,
            )
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
    ) -> KubeResponse:
        import urllib3
        from kubernetes.client.exceptions import ApiException

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
                _request_timeout=self.request_timeout,
            )
            data = _read_bounded_body(raw, method, path)
        except ApiException as exc:
            # The client turns TLS failures into status-0 ApiExceptions.
            raise KubeApiPermanentError(method, path, None, str(exc.reason)) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _Transient(None, f"{type(exc).__name__}: {exc}") from exc
        headers = {name.lower(): value for name, value in raw.headers.items()}
        return KubeResponse(status=raw.status, body=data or b"", headers=headers)


#: The most of one response body gfd reads. etcd stores objects of at most 1.5 MiB,
#: so a Node or NodeFeature is far smaller; a larger answer is not an object of ours.
MAX_RESPONSE_BYTES = 8 << 20


def _read_bounded_body(raw: Any, method: str, path: str) -> bytes:
    """The response body, at most :data:`MAX_RESPONSE_BYTES`; a larger one fails the request."""
    declared = raw.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
        raise SinkError(
            f"{method} {path}: the API server announced a {declared}-byte answer, over "
            f"gfd's limit of {MAX_RESPONSE_BYTES}"
        )
    response = getattr(raw, "response", None)
    if response is None or not hasattr(response, "read"):
        return bytes(raw.read() or b"")
    data = bytes(response.read(MAX_RESPONSE_BYTES + 1) or b"")
    if len(data) > MAX_RESPONSE_BYTES:
        # Bytes remain unread: close the connection rather than hand it back to the pool.
        response.close()
        raise SinkError(
            f"{method} {path}: the API server's answer is over gfd's limit of "
            f"{MAX_RESPONSE_BYTES} bytes"
        )
    return data


def connect_kubernetes(
    *,
    kubeconfig: str | None,
    request_timeout: float = 10.0,
    retry_policy: RetryPolicy | None = None,
    in_cluster_token_path: str = IN_CLUSTER_TOKEN_PATH,
    in_cluster_ca_path: str = IN_CLUSTER_CA_PATH,
    in_cluster_host_env: Mapping[str, str] | None = None,
    context: str | None = None,
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
        credentials = _kubeconfig_credentials(kubeconfig, context)
    else:
        env = os.environ if in_cluster_host_env is None else in_cluster_host_env
        credentials = _in_cluster_credentials(
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
    )


def _kubeconfig_credentials(kubeconfig: str, context: str | None) -> _Credentials:
    from kubernetes import config as k8s_config

    # The client's kubeconfig loader carries no type hints.
    load_kube_config: Callable[..., None] = k8s_config.load_kube_config

    def reload(configuration: Any) -> None:
        import yaml

        try:
            # Bounded and checked here: the client's loader reads the whole file and
            # builds any YAML it is given.
            text = read_bounded_text(kubeconfig, KUBECONFIG_LIMIT)
            check_yaml(text)
            document = yaml.safe_load(text)
        except OSError as exc:
            raise ConfigError(
                f"kubeconfig {kubeconfig}: cannot read: {exc.strerror or exc}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: not UTF-8 text") from exc
        except InputRejected as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: {exc}") from exc
        except (yaml.YAMLError, RecursionError) as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: not valid YAML") from exc
        if not isinstance(document, dict):
            raise ConfigError(
                f"kubeconfig {kubeconfig}: expected a kubeconfig mapping "
                "(apiVersion, clusters, users, contexts), got "
                f"{'nothing' if document is None else type(document).__name__}"
            )
        try:
            load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (k8s_config.ConfigException, OSError, ValueError) as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: {shorten(str(exc))}") from exc
        except Exception as exc:
            # The client's loader assumes a well-formed file: any other exception is a
            # malformed one (a list where a mapping belongs, a missing field).
            raise ConfigError(
                f"kubeconfig {kubeconfig}: malformed ({type(exc).__name__}: {shorten(str(exc), 120)})"
            ) from exc
        problem = _connection_problem(configuration)
        if problem is not None:
            raise ConfigError(f"kubeconfig {kubeconfig}: {problem}")

    return _Credentials(describe=f"kubeconfig {kubeconfig}", reload=reload)


def _connection_problem(configuration: Any) -> str | None:
    """What makes a loaded kubeconfig unusable before any request, or None.

    The client's loader accepts a server that is no URL and certificate data that
    is no certificate; every request would then fail and be retried until the
    deadline. Both are configuration errors, said once, at start-up.
    """
    import ssl
    from urllib.parse import urlsplit

    host = str(configuration.host or "")
    try:
        split = urlsplit(host)
        port = split.port
    except ValueError:
        split, port = None, None
    if split is None or split.scheme not in ("http", "https") or not split.hostname:
        return f"server {echo(host)} is not an http(s) URL with a host"
    del port
    ca = configuration.ssl_ca_cert
    if ca:
        try:
            ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, OSError, ValueError) as exc:
            return f"the cluster's certificate authority is not a usable PEM certificate ({shorten(str(exc), 120)})"
    return None


def _in_cluster_credentials(
    configuration: Any, env: Mapping[str, str], token_path: Path, ca_path: Path
) -> _Credentials:
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are "
            "unset) and no kubeconfig given: pass --kubeconfig or set KUBECONFIG"
        )
    if not ca_path.is_file():
        raise ConfigError(f"service account CA certificate {ca_path}: file not found")
    token = _RotatingTokenFile(token_path)
    configuration.host = f"https://{f'[{host}]' if ':' in host else host}:{port}"
    configuration.ssl_ca_cert = str(ca_path)

    def reload(config: Any) -> None:
        token.read(force=True)
        token.apply(config)

    def refresh(config: Any) -> None:
        try:
            token.read(force=False)
        except ConfigError as exc:
            # Mid-rotation hiccup: keep the token we have; a 401 forces a re-read.
            log.warning("kube_token_unreadable", problem=str(exc))
        token.apply(config)

    return _Credentials(
        describe=f"service account token {token_path}", reload=reload, refresh_hook=refresh
    )
