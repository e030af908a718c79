"""gfd.metrics: telemetry rules, the address parser, and the endpoints over real HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gfd.base.errors import (
    ERROR_KINDS,
    ConfigError,
    NvmlError,
    NvmlGpuLost,
    NvmlNotReady,
    SinkError,
    SinkPermanentError,
    TopologyError,
    error_kind,
)
from gfd.facts import FactsError
from gfd.metrics import (
    DEFAULT_METRICS_ADDRESS,
    AgentTelemetry,
    ListenAddress,
    MetricsServer,
    liveness_window_for,
    parse_listen_address,
    serve,
)
from gfd.metrics.probes import Health


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


#: Short, so that closing a server in a test takes milliseconds, not half a second.
POLL = 0.02


class DisabledTelemetry:
    """What the endpoints may serve without metrics: the verdicts alone, always healthy."""

    registry = None

    def liveness(self) -> Health:
        return Health(True, "metrics are disabled")

    def readiness(self) -> Health:
        return Health(True, "metrics are disabled")


def base_url(server: MetricsServer) -> str:
    """Where a server bound to loopback answers."""
    return f"http://127.0.0.1:{server.port}"


def scrape(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text exposition."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {name}{labels} in:\n{text}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def telemetry(clock: FakeClock, wall: FakeClock) -> AgentTelemetry:
    return AgentTelemetry(sleep_interval=60.0, clock=clock, wall_clock=wall)


@pytest.fixture
def server(telemetry: AgentTelemetry) -> Iterator[MetricsServer]:
    with serve(telemetry, "127.0.0.1:0", poll_interval=POLL) as running:
        yield running


def test_endpoints_move_as_cycles_run(
    telemetry: AgentTelemetry, server: MetricsServer, clock: FakeClock, wall: FakeClock
) -> None:
    assert server.port > 0
    status, body = scrape(base_url(server) + "/readyz")
    assert (status, body) == (503, "unhealthy: no cycle has succeeded yet\n")
    assert scrape(base_url(server) + "/healthz")[0] == 200
    _, metrics = scrape(base_url(server) + "/metrics")
    assert sample(metrics, "gfd_cycles_total", result="success") == 0
    assert sample(metrics, "gfd_last_success_timestamp_seconds") == 0
    assert sample(metrics, "gfd_build_info", version="0.1.0") == 1

    telemetry.cycle_started()
    telemetry.nvml_up(True)
    clock.advance(0.2)
    telemetry.cycle_succeeded(0.2, labels_published=31)
    status, body = scrape(base_url(server) + "/readyz")
    assert status == 200 and body.startswith("ok")
    _, metrics = scrape(base_url(server) + "/metrics")
    assert sample(metrics, "gfd_cycles_total", result="success") == 1
    assert sample(metrics, "gfd_cycles_total", result="failure") == 0
    assert sample(metrics, "gfd_cycle_duration_seconds_count") == 1
    assert sample(metrics, "gfd_cycle_duration_seconds_bucket", le="0.25") == 1
    assert sample(metrics, "gfd_cycle_duration_seconds_bucket", le="0.1") == 0
    assert sample(metrics, "gfd_labels_published") == 31
    assert sample(metrics, "gfd_last_success_timestamp_seconds") == wall.now
    assert sample(metrics, "gfd_nvml_up") == 1

    wall.advance(60)
    telemetry.cycle_started()
    telemetry.nvml_up(False)
    telemetry.cycle_failed(error_kind(NvmlNotReady("nvmlInit", 9, "DRIVER_NOT_LOADED")), 3.0)
    _, metrics = scrape(base_url(server) + "/metrics")
    assert sample(metrics, "gfd_cycles_total", result="failure") == 1
    assert sample(metrics, "gfd_cycle_errors_total", kind="nvml-not-ready") == 1
    assert sample(metrics, "gfd_cycle_errors_total", kind="sink") == 0
    assert sample(metrics, "gfd_nvml_up") == 0
    assert sample(metrics, "gfd_cycle_duration_seconds_count") == 2
    # A failure keeps the last success's timestamp and label count, and readiness.
    assert sample(metrics, "gfd_last_success_timestamp_seconds") == wall.now - 60
    assert sample(metrics, "gfd_labels_published") == 31
    assert scrape(base_url(server) + "/readyz")[0] == 200
    # Process metrics come with the default registry.
    assert sample(metrics, "process_resident_memory_bytes") > 0


def test_liveness_fails_when_the_loop_stops_turning(
    telemetry: AgentTelemetry, server: MetricsServer, clock: FakeClock
) -> None:
    telemetry.cycle_started()
    telemetry.cycle_succeeded(0.1, 10)
    clock.advance(150.0)
    assert scrape(base_url(server) + "/healthz")[0] == 200
    clock.advance(1.0)
    status, body = scrape(base_url(server) + "/healthz")
    assert status == 503
    assert "no cycle for 151s, past the 150s window" in body
    # The loop wakes up again: live at once.
    telemetry.cycle_started()
    assert scrape(base_url(server) + "/healthz")[0] == 200


def test_liveness_fails_when_a_cycle_hangs(clock: FakeClock) -> None:
    telemetry = AgentTelemetry(sleep_interval=None, cycle_deadline=60.0, clock=clock)
    telemetry.cycle_started()
    clock.advance(60.0)
    assert telemetry.liveness().ok
    clock.advance(0.5)
    health = telemetry.liveness()
    assert not health.ok
    assert "past the 60s deadline" in health.reason


def test_infinite_sleep_stays_live_between_cycles(clock: FakeClock) -> None:
    # --sleep-interval infinite: after its cycle the loop waits for a signal for ever.
    telemetry = AgentTelemetry(sleep_interval=None, clock=clock)
    telemetry.cycle_started()
    telemetry.cycle_succeeded(0.5, 12)
    clock.advance(86_400.0 * 30)
    assert telemetry.liveness().ok
    assert telemetry.readiness().ok


def test_liveness_counts_from_start_before_the_first_cycle(clock: FakeClock) -> None:
    telemetry = AgentTelemetry(sleep_interval=2.0, liveness_margin=6.0, clock=clock)
    clock.advance(10.5)
    assert not telemetry.liveness().ok


def test_liveness_window_for_sleep_interval() -> None:
    assert liveness_window_for(60.0) == 150.0
    assert liveness_window_for(60.0, margin=0.0) == 120.0
    assert liveness_window_for(None) is None
    with pytest.raises(ConfigError, match="must not be negative"):
        liveness_window_for(-1.0)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (NvmlNotReady("nvmlInit", 9, "NVML_ERROR_DRIVER_NOT_LOADED"), "nvml-not-ready"),
        (NvmlGpuLost("nvmlDeviceGetName", 15, "NVML_ERROR_GPU_IS_LOST"), "nvml-gpu-lost"),
        (NvmlError("nvmlDeviceGetName", 999, "NVML_ERROR_UNKNOWN"), "nvml"),
        (SinkPermanentError("403"), "sink-permanent"),
        (SinkError("503"), "sink"),
        (TopologyError("bad bus id"), "topology"),
        (FactsError("facts.yaml", "gpus[0]", "bad"), "facts"),
        (ConfigError("bad flag"), "config"),
        (KeyError("bug"), "internal"),
    ],
)
def test_error_kind(error: BaseException, kind: str) -> None:
    assert error_kind(error) == kind
    assert kind in ERROR_KINDS


def test_unknown_error_kind_is_folded_into_internal(telemetry: AgentTelemetry) -> None:
    telemetry.cycle_failed("made-up", 1.0)
    value = telemetry.registry.get_sample_value("gfd_cycle_errors_total", {"kind": "internal"})
    assert value == 1
    assert (
        telemetry.registry.get_sample_value("gfd_cycle_errors_total", {"kind": "made-up"}) is None
    )


def test_shared_registry_is_used_as_given(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    telemetry = AgentTelemetry(sleep_interval=5.0, registry=registry, clock=clock)
    telemetry.nvml_up(True)
    assert registry.get_sample_value("gfd_nvml_up") == 1
    # No process collector was added to a registry the caller owns.
    assert registry.get_sample_value("process_resident_memory_bytes") is None


def test_rejects_nonsense_windows() -> None:
    with pytest.raises(ConfigError, match="liveness window"):
        AgentTelemetry(sleep_interval=0.0, liveness_margin=0.0)
    with pytest.raises(ConfigError, match="sleep interval must not be negative"):
        AgentTelemetry(sleep_interval=-1.0)
    with pytest.raises(ConfigError, match="cycle deadline"):
        AgentTelemetry(sleep_interval=None, cycle_deadline=-1.0)


def test_openmetrics_on_request(server: MetricsServer) -> None:
    request = urllib.request.Request(
        base_url(server) + "/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.read().decode().rstrip().endswith("# EOF")


def test_unknown_path_and_head(server: MetricsServer) -> None:
    status, body = scrape(base_url(server) + "/nothing")
    assert status == 404 and "/healthz" in body
    request = urllib.request.Request(base_url(server) + "/healthz", method="HEAD")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
        assert response.read() == b""


def test_disabled_telemetry_serves_health_but_no_metrics() -> None:
    with serve(DisabledTelemetry(), "127.0.0.1:0", poll_interval=POLL) as running:
        assert scrape(base_url(running) + "/healthz")[0] == 200
        assert scrape(base_url(running) + "/readyz")[0] == 200
        assert scrape(base_url(running) + "/metrics")[0] == 404


def test_close_releases_the_port(telemetry: AgentTelemetry) -> None:
    running = telemetry.serve("127.0.0.1:0", poll_interval=POLL)
    port = running.port
    running.close()
    running.close()
    with socket.create_server(("127.0.0.1", port)):
        pass


def test_port_in_use_is_a_config_error(telemetry: AgentTelemetry, server: MetricsServer) -> None:
    with pytest.raises(ConfigError, match=rf"127.0.0.1:{server.port}'?: cannot listen"):
        serve(telemetry, f"127.0.0.1:{server.port}", poll_interval=POLL)


def test_all_interfaces_default_answers_on_loopback(telemetry: AgentTelemetry) -> None:
    with serve(telemetry, ":0", poll_interval=POLL) as running:
        assert scrape(f"http://127.0.0.1:{running.port}/healthz")[0] == 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DEFAULT_METRICS_ADDRESS, ListenAddress("", 8079)),
        ("127.0.0.1:9500", ListenAddress("127.0.0.1", 9500)),
        ("[::1]:0", ListenAddress("::1", 0)),
        ("localhost:1", ListenAddress("localhost", 1)),
        ("8080", ListenAddress("", 8080)),
    ],
)
def test_parse_listen_address(text: str, expected: ListenAddress) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("127.0.0.1:http", "is not a number"),
        ("::1:80", "in brackets"),
        (":70000", "outside 0-65535"),
        ("", "is not a number"),
    ],
)
def test_parse_listen_address_errors_name_the_address(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        parse_listen_address(text)
    assert f"--metrics-address {text!r}" in str(caught.value)


def test_prometheus_client_is_imported_only_when_metrics_are_on() -> None:
    code = (
        "import sys, gfd.metrics as m\n"
        "assert 'prometheus_client' not in sys.modules, 'imported too early'\n"
        "m.AgentTelemetry(sleep_interval=None)\n"
        "assert 'prometheus_client' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_each_xid_is_counted_with_the_action_nvidias_catalog_recommends(
    telemetry: AgentTelemetry,
) -> None:
    from gfd.nvml.xid_events import XidEvent, XidGpu

    gpu = XidGpu(index=3, bus_id="00000000:61:00.0", uuid="GPU-3")
    for number in (79, 79, 95, 13, 999, 163):
        telemetry.xid_error(XidEvent(gpu=gpu, xid=number, at=0.0))
    counted = {
        (sample.labels["xid"], sample.labels["action"]): sample.value
        for family in telemetry.registry.collect()
        if family.name == "gfd_gpu_xid_errors"
        for sample in family.samples
        if sample.name == "gfd_gpu_xid_errors_total"
    }
    assert counted == {
        ("79", "restart_bm"): 2.0,
        ("95", "reset_gpu"): 1.0,
        ("13", "restart_app"): 1.0,
        # Not in the catalog, or in it without an action.
        ("999", "unknown"): 1.0,
        ("163", "unknown"): 1.0,
    }
