"""The service account's CA file, filled late or rotated by the kubelet under a running pod.

Under a real kubelet (v1.36.2) a pod that started while its projected ``ca.crt`` was
still empty never recovered: every cycle failed as ``sink-permanent`` with
``NO_CERTIFICATE_OR_CRL_FOUND``. Here the emulator serves TLS with a self-signed CA made
by the test (openssl), and the pod's CA file changes the way the kubelet changes it: a
new file renamed over the old one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.agent import Agent
from gfd.base.logs import get_logger
from gfd.kube_api import KubeApiError, KubeApiPermanentError, KubeClient, connect_kubernetes
from gfd.kube_api.client import TRUST_CHECK_SECONDS
from gfd.labels import LabelOptions
from gfd.nvml.reader import NvmlReader
from gfd.sim import simulate
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator, Principal
from tests.kube.conftest import FAST_RETRIES, NODE
from tests.kube_fixtures import self_signed_certificate

PRINCIPAL = Principal("system:serviceaccount:gpu-operator:gfd")
TOKEN = "pod-token"


@pytest.fixture
def tls_emulator(tls_pair: tuple[Path, Path]) -> Iterator[ApiServerEmulator]:
    with ApiServerEmulator(tls_cert=tls_pair[0], tls_key=tls_pair[1]) as api:
        api.add_node(NODE)
        api.set_token(TOKEN, PRINCIPAL)
        yield api


def kubelet_writes(path: Path, content: bytes) -> None:
    """The kubelet's atomic writer: the new content in a file beside, renamed over."""
    fresh = path.with_name(f".{path.name}.new")
    fresh.write_bytes(content)
    os.replace(fresh, path)


class Clock:
    """A monotonic clock the test moves forward."""

    def __init__(self) -> None:
        import time

        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


def pod_client(
    emulator: ApiServerEmulator, tmp_path: Path, ca: Path, clock: Clock | None = None
) -> KubeClient:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    extra = {} if clock is None else {"clock": clock}
    return connect_kubernetes(
        kubeconfig=None,
        retry_policy=FAST_RETRIES,
        in_cluster_token_path=str(token),
        in_cluster_ca_path=str(ca),
        in_cluster_host_env={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(emulator.port),
        },
        **extra,
    )


def get_node(client: KubeClient, *, within: float | None = None) -> int:
    deadline = client.deadline() if within is None else client.clock() + within
    response = client.request(
        "GET", f"/api/v1/nodes/{NODE}", stop=threading.Event(), deadline=deadline
    )
    return int(response.status)


def test_an_empty_ca_is_waited_for_and_used_once_filled(
    tls_emulator: ApiServerEmulator, tls_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"")
    client = pod_client(tls_emulator, tmp_path, ca)
    # Retryable, and never sent with a CA that trusts nothing.
    with pytest.raises(KubeApiError) as waited:
        get_node(client, within=0.2)
    assert not isinstance(waited.value, KubeApiPermanentError)
    assert f"service account CA certificate {ca}: the file is empty (the kubelet has not " in str(
        waited.value
    )
    assert tls_emulator.requests == []
    kubelet_writes(ca, tls_pair[0].read_bytes())
    assert get_node(client) == 200
    client.close()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", "holds no usable PEM certificate"),
        (b"\n\n", "the file is empty"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
    ids=["garbage-pem", "blank", "binary"],
)  # fmt: skip
def test_a_ca_not_fit_to_trust_says_why_and_stays_retryable(
    tls_emulator: ApiServerEmulator, tmp_path: Path, content: bytes, problem: str
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(content)
    client = pod_client(tls_emulator, tmp_path, ca)
    with pytest.raises(KubeApiError) as waited:
        get_node(client, within=0.1)
    assert not isinstance(waited.value, KubeApiPermanentError)
    assert f"service account CA certificate {ca}: {problem}" in str(waited.value)
    client.close()


def test_a_rotated_ca_is_used_from_the_next_check_on_even_on_a_kept_connection(
    tls_emulator: ApiServerEmulator, tls_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """The emulator keeps connections alive, and a kept connection was verified once: a
    rotation drops the pool, so the next request is verified by the new CA."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes(tls_pair[0].read_bytes())
    clock = Clock()
    client = pod_client(tls_emulator, tmp_path, ca, clock)
    assert get_node(client) == 200
    other = tmp_path / "other.crt"
    self_signed_certificate(other, tmp_path / "other.key", "another-cluster")
    kubelet_writes(ca, other.read_bytes())
    # Not yet looked at: the kept connection still serves.
    assert get_node(client) == 200
    clock.now += TRUST_CHECK_SECONDS
    with pytest.raises(KubeApiPermanentError, match="CERTIFICATE_VERIFY_FAILED"):
        get_node(client)
    # Rotated back: the TLS failure made the client look again at once.
    kubelet_writes(ca, tls_pair[0].read_bytes())
    assert get_node(client) == 200
    client.close()


def test_a_pod_whose_ca_is_empty_at_start_labels_its_node_once_the_file_is_filled(
    tls_emulator: ApiServerEmulator, tls_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """The kubelet's case, through the agent: the first cycles fail as retryable sink
    failures (not sink-permanent), and the cycle after the kubelet filled the file
    labels the node, with the same client."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"")
    client = pod_client(tls_emulator, tmp_path, ca)
    with simulate("t4-single") as machine:
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        agent = Agent(
            read_facts=reader.read,
            sinks=[NodeSink(client=client, node_name=NODE, stop=threading.Event())],
            options=LabelOptions(),
            log=get_logger(),
        )
        try:
            waiting = agent.cycle()
            assert (waiting.ok, waiting.kind) == (False, "sink")
            assert "the file is empty (the kubelet has not filled it yet)" in waiting.reason
            assert "nvidia.com/gpu.count" not in tls_emulator.node_labels(NODE)
            kubelet_writes(ca, tls_pair[0].read_bytes())
            filled = agent.cycle()
            assert filled.ok, filled.reason
        finally:
            agent.close()
            reader.close()
    assert tls_emulator.node_labels(NODE)["nvidia.com/gpu.count"] == "1"
    client.close()
