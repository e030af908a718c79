"""Connection set-up, credentials and the retry policy of gfd.kube_api."""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.base.errors import ConfigError
from gfd.base.logs import configure_logging
from gfd.kube_api import (
    KubeApiError,
    KubeApiPermanentError,
    KubeClient,
    RetryPolicy,
    connect_kubernetes,
    parse_retry_after,
)
from gfd.kube_api.client import MIN_REQUEST_TIMEOUT
from gfd.kube_api.retry import RETRY_WARNING_INTERVAL, RetryReporter
from tests.emulator import ApiServerEmulator, Fault, Principal
from tests.kube.conftest import FAST_RETRIES, NODE
from tests.kube_fixtures import self_signed_certificate

PRINCIPAL = Principal("system:serviceaccount:gpu-operator:gfd")


@pytest.fixture
def tls_emulator(tls_pair: tuple[Path, Path]) -> Iterator[ApiServerEmulator]:
    with ApiServerEmulator(tls_cert=tls_pair[0], tls_key=tls_pair[1]) as api:
        api.add_node(NODE)
        yield api


def service_account(tmp_path: Path, token: str) -> Path:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    return token_file


def rotate_like_the_kubelet(token_file: Path, token: str) -> None:
    """The kubelet swaps a projected token atomically: write aside, then rename."""
    fresh = token_file.with_name(".token.new")
    fresh.write_text(token)
    os.replace(fresh, token_file)


def in_cluster(emulator: ApiServerEmulator, token_file: Path, ca: Path) -> KubeClient:
    return connect_kubernetes(
        kubeconfig=None,
        retry_policy=FAST_RETRIES,
        in_cluster_token_path=str(token_file),
        in_cluster_ca_path=str(ca),
        in_cluster_host_env={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(emulator.port),
        },
    )


def get_node(client: KubeClient, stop: threading.Event | None = None) -> int:
    response = client.request(
        "GET", f"/api/v1/nodes/{NODE}", stop=stop or threading.Event(), deadline=client.deadline()
    )
    return int(response.status)


def test_in_cluster_over_tls_with_a_rotating_token(
    tls_emulator: ApiServerEmulator, tls_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    tls_emulator.set_token("token-1", PRINCIPAL)
    token_file = service_account(tmp_path, "token-1")
    client = in_cluster(tls_emulator, token_file, tls_pair[0])
    # Answered by the emulator at the in-cluster address, its certificate checked against
    # the service account's CA: the address and the CA both came from the pod's view.
    assert get_node(client) == 200

    # The kubelet rotates the file before the old token expires: the next request
    # already carries the new token, without a 401 first.
    tls_emulator.set_token("token-2", PRINCIPAL)
    rotate_like_the_kubelet(token_file, "token-2")
    tls_emulator.revoke_token("token-1")
    tls_emulator.clear_log()
    assert get_node(client) == 200
    assert [r.status for r in tls_emulator.requests] == [200]
    client.close()


def test_in_cluster_401_forces_a_token_reread(
    tls_emulator: ApiServerEmulator, tls_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    tls_emulator.set_token("token-A", PRINCIPAL)
    token_file = service_account(tmp_path, "token-A")
    client = in_cluster(tls_emulator, token_file, tls_pair[0])
    assert get_node(client) == 200
    # A change the cheap check cannot see (same inode, size and mtime).
    stat = token_file.stat()
    token_file.write_text("token-B\n")
    os.utime(token_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    tls_emulator.set_token("token-B", PRINCIPAL)
    tls_emulator.revoke_token("token-A")
    tls_emulator.clear_log()
    assert get_node(client) == 200
    assert [r.status for r in tls_emulator.requests] == [401, 200]
    client.close()


def test_untrusted_server_certificate_is_a_permanent_error(
    tls_emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    tls_emulator.set_token("t", PRINCIPAL)
    other_ca = tmp_path / "other-ca.crt"
    self_signed_certificate(other_ca, tmp_path / "k", "other")
    client = in_cluster(tls_emulator, service_account(tmp_path, "t"), other_ca)
    with pytest.raises(KubeApiPermanentError, match="CERTIFICATE_VERIFY_FAILED"):
        get_node(client)
    client.close()


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, ("token", "ca"), "KUBERNETES_SERVICE_HOST.*--kubeconfig"),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            ("token",),
            r"CA certificate .*ca\.crt: file not found",
        ),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            ("ca",),
            r"token .*token: cannot read",
        ),
    ],
    ids=["not-in-cluster", "no-ca", "no-token"],
)
def test_in_cluster_configuration_errors_say_what_is_missing(
    tmp_path: Path, env: dict[str, str], files: tuple[str, ...], message: str
) -> None:
    if "token" in files:
        (tmp_path / "token").write_text("t")
    if "ca" in files:
        (tmp_path / "ca.crt").write_text("not used")
    with pytest.raises(ConfigError, match=message):
        connect_kubernetes(
            kubeconfig=None,
            in_cluster_token_path=str(tmp_path / "token"),
            in_cluster_ca_path=str(tmp_path / "ca.crt"),
            in_cluster_host_env=env,
        )


def test_unreadable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kubeconfig .*missing"):
        connect_kubernetes(kubeconfig=str(tmp_path / "missing"))


def test_non_positive_timeout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="timeout must be positive"):
        connect_kubernetes(kubeconfig=str(tmp_path / "k"), request_timeout=0)


def test_urllib3_never_retries_behind_tenacitys_back(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    no_retries = RetryPolicy(initial_delay=1.0, max_delay=1.0, deadline=0.01)
    client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=no_retries)
    emulator.inject(Fault(drop=True, method="GET"))
    with pytest.raises(
        KubeApiError,
        match=r"GET /api/v1/nodes/gpu-node-1: no response: http://127\.0\.0\.1:\d+ dropped "
        r"the connection: .*\(gave up after 1 attempt in \d+\.\d s\)$",
    ):
        get_node(client)
    assert len(emulator.requests) == 1
    client.close()


def test_a_read_slower_than_the_timeout_is_abandoned_and_retried(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    client = connect_kubernetes(
        kubeconfig=str(kubeconfig), request_timeout=0.3, retry_policy=FAST_RETRIES
    )
    emulator.inject(Fault(delay=2.0, method="GET"))
    started = time.monotonic()
    assert get_node(client) == 200
    assert time.monotonic() - started < 1.5
    client.close()


def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="initial_delay"):
        RetryPolicy(initial_delay=5, max_delay=1)
    with pytest.raises(ValueError, match="deadline"):
        RetryPolicy(deadline=0)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("", None),
        (None, None),
        ("soon", None),
        ("Wed, 02 Dec 2026 14:00:10 GMT", 10.0),
        ("Wed, 02 Dec 2026 13:59:00 GMT", 0.0),
    ],
)
def test_retry_after_header_forms(header: str | None, expected: float | None) -> None:
    now = 1796220000.0  # Wed, 02 Dec 2026 14:00:00 GMT
    assert parse_retry_after(header, now=lambda: now) == expected


class RecordingLog:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, object]]] = []

    def warning(self, event: str, **fields: object) -> None:
        self.events.append(("warning", event, fields))

    def debug(self, event: str, **fields: object) -> None:
        self.events.append(("debug", event, fields))


def test_retries_are_warnings_at_most_every_few_seconds_each_saying_what_and_when() -> None:
    now = [100.0]
    log = RecordingLog()
    reporter = RetryReporter(log, clock=lambda: now[0])
    server = "https://10.0.0.1:6443"
    for step, wait in enumerate([0.4, 0.9, 1.8, 3.7, 7.1]):
        reporter.retrying(
            server, "GET /api/v1/nodes/n1", "cannot connect: Connection refused",
            attempt=step + 1, wait=wait, status=None,
        )  # fmt: skip
        now[0] += wait
    assert [level for level, _, _ in log.events] == [
        "warning",
        "debug",
        "debug",
        "debug",
        "warning",
    ]
    first, *_, last = [fields for _, _, fields in log.events]
    assert first == {
        "server": "https://10.0.0.1:6443",
        "request": "GET /api/v1/nodes/n1",
        "problem": "cannot connect: Connection refused",
        "attempt": 1,
        "retry_in_seconds": 0.4,
    }
    # 0.4 + 0.9 + 1.8 + 3.7 = 6.8 s after the first: the next is loud, and counts the quiet.
    assert (last["attempt"], last["retries_since_last_warning"], last["retry_in_seconds"]) == (
        5,
        3,
        7.1,
    )
    assert RETRY_WARNING_INTERVAL <= 6.8
    now[0] = 100.0 + 6.8 + 1.0  # one second after that warning: quiet again
    reporter.retrying(server, "PATCH /api/v1/nodes/n1", "HTTP 503", attempt=1, wait=1.0, status=503)
    assert log.events[-1][0] == "debug" and log.events[-1][2]["status"] == 503


def refused_server() -> str:
    """The URL of a port nothing listens on: connections to it are refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def kubeconfig_for(server: str, path: Path) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


def test_a_refused_connection_names_the_server_and_warns_while_it_retries(tmp_path: Path) -> None:
    server = refused_server()
    stream = io.StringIO()
    configure_logging("info", stream=stream, json=True)
    try:
        client = connect_kubernetes(
            kubeconfig=str(kubeconfig_for(server, tmp_path / "kc")),
            retry_policy=RetryPolicy(initial_delay=0.05, max_delay=0.1, deadline=0.6),
        )
        with pytest.raises(KubeApiError) as failed:
            get_node(client)
        client.close()
    finally:
        configure_logging("info")
    assert re.fullmatch(
        rf"Kubernetes API GET /api/v1/nodes/{NODE}: no response: cannot connect to {server}: "
        r"Connection refused \(gave up after \d+ attempts in 0\.\d s\)",
        str(failed.value),
    ), failed.value
    warnings = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert warnings and {w["level"] for w in warnings} == {"warning"}
    assert warnings[0]["server"] == server
    assert warnings[0]["problem"] == f"cannot connect to {server}: Connection refused"


def test_a_bound_cuts_retries_and_request_timeouts_short(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path
) -> None:
    """A one-shot run's bound (give_up_by): a server that answers after 3 s, each request
    allowed 10 s and the operation 120 s, still gives up by the bound."""
    client = connect_kubernetes(
        kubeconfig=str(kubeconfig), request_timeout=10.0, retry_policy=RetryPolicy()
    )
    bound = client.clock() + 0.8
    client.give_up_by(bound, "the test's bound")
    assert client.deadline() == bound
    emulator.inject(Fault(delay=3.0, method="GET", times=None))
    started = time.monotonic()
    with pytest.raises(
        KubeApiError, match=r"gave up after 1 attempt in \d\.\d s: the test's bound\)$"
    ):
        get_node(client)
    # The request's timeout was cut to what was left of the bound, never below
    # MIN_REQUEST_TIMEOUT: not the 10 s it has otherwise, nor the server's 3 s.
    assert time.monotonic() - started < 0.8 + MIN_REQUEST_TIMEOUT + 0.5
    client.close()
