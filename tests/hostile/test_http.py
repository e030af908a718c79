"""Hostile requests to the metrics server: each is answered (or refused) and the server lives on.

The server runs in this process on a free loopback port, as ``--metrics-address``
starts it. Every row sends raw bytes, checks the first line of the answer, then
checks that ``/healthz`` still answers and that nothing (no traceback) reached stderr.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from gfd.metrics import AgentTelemetry, MetricsServer

#: Rows: name, raw request, the start of the answer (b"" = the server may just close).
REQUESTS: list[tuple[str, bytes, bytes]] = [
    ("unknown-path", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 404 "),
    ("path-traversal", b"GET /../../etc/passwd HTTP/1.1\r\n\r\n", b"HTTP/1.1 404 "),
    ("absolute-uri", b"GET http://evil.example/metrics HTTP/1.1\r\n\r\n", b"HTTP/1.1 404 "),
    ("long-uri", b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"HTTP/1.1 414 "),
    ("long-query", b"GET /healthz?" + b"q" * 60_000 + b" HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 "),
    ("many-headers", b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", b"HTTP/1.1 431 "),
    ("long-header", b"GET /healthz HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", b"HTTP/1.1 431 "),
    ("unknown-method", b"BREW /metrics HTTP/1.1\r\n\r\n", b"HTTP/1.1 501 "),
    ("post-with-body", b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"HTTP/1.1 501 "),
    ("delete", b"DELETE /metrics HTTP/1.1\r\n\r\n", b"HTTP/1.1 501 "),
    ("http-0.9-garbage", b"\x00\xff\xfe garbage\r\n\r\n", b"<!DOCTYPE HTML>"),
    ("bad-version", b"GET /healthz HTTP/9.9\r\n\r\n", b"<!DOCTYPE HTML>"),
    ("binary-tls-hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64, b""),
    ("empty-connection", b"", b""),
    ("head", b"HEAD /metrics HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 "),
    ("http-1.0-readyz", b"GET /readyz HTTP/1.0\r\n\r\n", b"HTTP/1.1 503 "),
    ("openmetrics-odd-version", b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=99\r\n\r\n", b"HTTP/1.1 200 "),
    ("accept-bomb", b"GET /metrics HTTP/1.1\r\nAccept: " + b"text/plain;q=0.1," * 3000 + b"\r\n\r\n", b"HTTP/1.1 200 "),
    ("content-length-huge", b"GET /healthz HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", b"HTTP/1.1 200 "),
    ("header-without-colon", b"GET /healthz HTTP/1.1\r\nnot a header\r\n\r\n", b"HTTP/1.1 "),
    ("percent-garbage", b"GET /%ff%fe%00 HTTP/1.1\r\n\r\n", b"HTTP/1.1 404 "),
    ("pipelined", b"GET /healthz HTTP/1.1\r\n\r\n" * 50, b"HTTP/1.1 200 "),
]  # fmt: skip


@pytest.fixture(scope="module")
def server() -> Iterator[MetricsServer]:
    telemetry = AgentTelemetry(sleep_interval=60.0)
    with telemetry.serve("127.0.0.1:0", poll_interval=0.05) as running:
        yield running


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        try:
            connection.sendall(raw)
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse mid-send; what it answered is still read
        answer = b""
        try:
            while len(answer) < 1 << 20:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return answer


@pytest.mark.parametrize(
    ("raw", "start"), [row[1:] for row in REQUESTS], ids=[r[0] for r in REQUESTS]
)
def test_hostile_request(
    server: MetricsServer, raw: bytes, start: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    answer = _exchange(server.port, raw)
    assert answer.startswith(start), answer[:200]
    healthy = _exchange(server.port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert healthy.startswith(b"HTTP/1.1 200 "), healthy[:200]
    _, err = capfd.readouterr()
    assert "Traceback" not in err and err == "", err[-2000:]
