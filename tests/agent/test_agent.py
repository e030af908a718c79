"""The agent cycle: last good labels survive NVML faults, a failing sink does not stop the others."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from gfd.agent import Agent, Derived, LoopControl, derive_topology, next_delay
from gfd.base.errors import NvmlError, NvmlGpuLost, NvmlNotReady, SinkError, SinkPermanentError
from gfd.facts import NodeFacts, NvLink
from gfd.labels import LabelOptions
from gfd.metrics import AgentTelemetry
from gfd.sinks import Publication
from gfd.sinks.featurefile import FeatureFileSink
from gfd.sinks.node_identity import identity_annotation
from tests.factories import make_facts, make_gpu


class RecordingSink:
    def __init__(self, name: str = "recording", fail: Exception | None = None) -> None:
        self.name = name
        self.fail = fail
        self.published: list[Publication] = []
        self.current: Publication | None = None
        self.closed = False

    def publish(self, publication: Publication) -> bool:
        if self.fail is not None:
            raise self.fail
        self.published.append(publication)
        changed = self.current is None or dict(self.current.labels) != dict(publication.labels)
        self.current = publication
        return changed

    def close(self) -> None:
        self.closed = True


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, object]]] = []

    def _record(self, level: str) -> Callable[..., None]:
        return lambda event, **kw: self.events.append((level, event, kw))

    def __getattr__(self, level: str) -> Callable[..., None]:
        return self._record(level)


def no_topology(_facts: NodeFacts) -> Derived:
    return Derived(
        labels={"nvidia.com/gpu.interconnect": "test"},
        annotations={"nvidia.com/gpu.topology": "{}"},
    )


def scripted(*results: NodeFacts | Exception) -> Callable[[], NodeFacts]:
    queue = list(results)

    def read() -> NodeFacts:
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item

    return read


STARTED_AT = LabelOptions(timestamp=1700000000)


def agent_with(
    read: Callable[[], NodeFacts],
    *sinks: RecordingSink,
    log: Log | None = None,
    options: LabelOptions = STARTED_AT,
    **kw: object,
) -> Agent:
    return Agent(
        read_facts=read,
        sinks=sinks or [RecordingSink()],
        options=options,
        log=log if log is not None else Log(),
        **{"derive": no_topology, **kw},
    )  # type: ignore[arg-type]


GOOD = make_facts([make_gpu(0), make_gpu(1)])
LOST = NvmlGpuLost("nvmlDeviceGetMemoryInfo", 15, "NVML_ERROR_GPU_IS_LOST")
UNKNOWN = NvmlError("nvmlDeviceGetName", 999, "NVML_ERROR_UNKNOWN")
NOT_READY = NvmlNotReady("nvmlInit", 9, "NVML_ERROR_DRIVER_NOT_LOADED")


def test_cycle_publishes_labels_and_annotations() -> None:
    sink = RecordingSink()
    outcome = agent_with(scripted(GOOD), sink).cycle()
    assert outcome.ok and outcome.wrote == ("recording",)
    assert sink.current is not None
    assert sink.current.labels["nvidia.com/gpu.count"] == "2"
    assert sink.current.labels["nvidia.com/gpu.interconnect"] == "test"
    assert sink.current.labels["nvidia.com/gfd.timestamp"] == "1700000000"
    assert sink.current.annotations == {
        "nvidia.com/gpu.topology": "{}",
        "nvidia.com/gpu.devices": identity_annotation(GOOD)["nvidia.com/gpu.devices"],
    }


def test_every_sink_gets_the_timestamp_label(tmp_path: Path) -> None:
    """Moving it into a node annotation (--timestamp-annotation) is the node sink's job
    (tests/kube/test_node_sink.py); the feature file beside it keeps the label."""
    recording = RecordingSink()
    output = tmp_path / "gfd"
    agent_with(scripted(GOOD), recording, FeatureFileSink(output)).cycle()  # type: ignore[arg-type]
    assert recording.current is not None
    assert recording.current.labels["nvidia.com/gfd.timestamp"] == "1700000000"
    assert "nvidia.com/gfd.timestamp" not in recording.current.annotations
    assert "nvidia.com/gfd.timestamp=1700000000\n" in output.read_text()


@pytest.mark.parametrize(
    ("error", "kind"), [(LOST, "nvml-gpu-lost"), (UNKNOWN, "nvml"), (NOT_READY, "nvml-not-ready")]
)
def test_nvml_fault_publishes_nothing_so_last_good_labels_stay(error: Exception, kind: str) -> None:
    sink = RecordingSink()
    agent = agent_with(scripted(GOOD, error, GOOD), sink)
    assert agent.cycle().ok
    good = sink.current
    outcome = agent.cycle()
    assert not outcome.ok and outcome.kind == kind
    assert "NVML_ERROR" in outcome.reason
    assert sink.current is good and len(sink.published) == 1
    assert agent.cycle().ok


def test_init_failure_is_flagged_for_fail_on_init_error() -> None:
    outcome = agent_with(scripted(NOT_READY), RecordingSink()).cycle()
    assert outcome.init_failure and not outcome.ok


def test_failing_sink_does_not_stop_the_others() -> None:
    broken = RecordingSink("broken", fail=SinkError("api server down"))
    healthy = RecordingSink("healthy")
    outcome = agent_with(scripted(GOOD), broken, healthy).cycle()
    assert not outcome.ok and outcome.kind == "sink"
    assert "broken: api server down" in outcome.reason
    assert outcome.wrote == ("healthy",)
    assert healthy.current is not None


def test_permanent_sink_error_is_classified() -> None:
    outcome = agent_with(scripted(GOOD), RecordingSink("n", fail=SinkPermanentError("403"))).cycle()
    assert outcome.kind == "sink-permanent"


def test_invalid_label_is_dropped_and_warned_once() -> None:
    facts = make_facts([make_gpu(0)], driver_version="550.(x).1")
    log = Log()
    agent = agent_with(scripted(facts), log=log, options=LabelOptions())
    agent.cycle()
    agent.cycle()
    warnings = [e for e in log.events if e[0] == "warning" and e[1].startswith("label dropped")]
    assert {w[2]["key"] for w in warnings} == {
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.driver.minor",
    }
    assert len(warnings) == 3


def test_close_closes_sinks() -> None:
    sink = RecordingSink()
    agent_with(scripted(GOOD), sink).close()
    assert sink.closed


def test_next_delay_jitter_and_backoff() -> None:
    rng = random.Random(1)
    delays = [next_delay(60.0, 0, rng=rng) for _ in range(200)]
    assert all(54.0 <= d <= 66.0 for d in delays if d is not None)
    assert len({round(d or 0, 3) for d in delays}) > 100
    assert next_delay(None, 0) is None
    backoffs = [next_delay(60.0, n, rng=random.Random(0)) or 0 for n in range(1, 10)]
    assert backoffs[0] < 1.2 and backoffs[-1] <= 66.0
    assert backoffs == sorted(backoffs)
    assert (next_delay(None, 3, rng=random.Random(0)) or 0) < 5


def test_loop_control_stop_wakes_sleep_and_stays_set() -> None:
    control = LoopControl()
    control.request_stop()
    control.sleep(30)
    control.sleep(30)
    assert control.stop.is_set()


def test_loop_control_reload_wakes_once() -> None:
    control = LoopControl()
    control.request_reload()
    control.sleep(30)
    assert control.reload_requested
    assert not control.wake.is_set()


def test_withheld_label_is_warned_once() -> None:
    log = Log()
    agent = agent_with(scripted(GOOD), log=log, options=LabelOptions())
    agent.cycle()
    agent.cycle()
    withheld = [e for e in log.events if e[1].startswith("label withheld")]
    # Once over two cycles: GOOD's GPUs report no vGPU facts (and no PCIe link, which
    # withholds nothing: NOT_SUPPORTED is an answer).
    assert [w[2]["key"] for w in withheld] == ["nvidia.com/vgpu.present"]


class CountingTelemetry:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.succeeded = 0

    def cycle_started(self) -> None:
        return None

    def cycle_succeeded(self, duration: float, labels_published: int) -> None:
        self.succeeded += 1

    def cycle_failed(self, kind: str, duration: float) -> None:
        self.failed.append(kind)

    def nvml_up(self, up: bool) -> None:
        return None

    def facts_read(self, facts: NodeFacts) -> None:
        return None

    def topology_failed(self) -> None:
        return None


@pytest.mark.parametrize(
    ("read", "derive", "stage"),
    [
        (scripted(ZeroDivisionError("reader bug"), GOOD), no_topology, "reading the facts"),
    ],
)
def test_an_unexpected_exception_fails_one_cycle_not_the_agent(
    read: Callable[[], NodeFacts], derive: Callable[[NodeFacts], Derived], stage: str
) -> None:
    log, telemetry, sink = Log(), CountingTelemetry(), RecordingSink()
    agent = Agent(
        read_facts=read, sinks=[sink], options=STARTED_AT, log=log, derive=derive,
        telemetry=telemetry,
    )  # fmt: skip
    outcome = agent.cycle()
    assert not outcome.ok and outcome.kind == "internal"
    assert stage in outcome.reason and "internal error" in outcome.reason
    assert telemetry.failed == ["internal"]
    assert sink.published == [], "nothing is published from a cycle that broke"
    (level, _event, fields), *_ = [e for e in log.events if e[1] == "cycle failed"]
    assert level == "error" and isinstance(fields["exc_info"], ZeroDivisionError)


def test_a_sink_raising_anything_does_not_stop_the_other_sinks() -> None:
    broken = RecordingSink("broken", fail=AttributeError("'str' object has no attribute 'get'"))
    good = RecordingSink("good")
    log = Log()
    outcome = agent_with(scripted(GOOD), broken, good, log=log).cycle()
    assert not outcome.ok and outcome.kind == "internal" and outcome.wrote == ("good",)
    assert "broken: internal error: AttributeError" in outcome.reason
    assert good.current is not None
    failed = [fields for _, event, fields in log.events if event == "cycle failed"]
    assert isinstance(failed[0]["exc_info"], AttributeError)


def test_a_permanent_sink_error_outranks_an_internal_one() -> None:
    outcome = agent_with(
        scripted(GOOD),
        RecordingSink("broken", fail=ValueError("bug")),
        RecordingSink("denied", fail=SinkPermanentError("403")),
    ).cycle()
    assert outcome.kind == "sink-permanent"


def test_an_internal_failure_reason_is_bounded() -> None:
    outcome = agent_with(scripted(RuntimeError("x" * 100_000))).cycle()
    assert outcome.kind == "internal" and len(outcome.reason) < 500


def test_the_json_log_carries_the_traceback_of_an_internal_failure() -> None:
    import io
    import json

    from gfd.base.logs import configure_logging, get_logger

    stream = io.StringIO()
    configure_logging("info", stream=stream, json=True)
    try:
        agent_with(scripted(RuntimeError("reader bug")), log=get_logger()).cycle()
    finally:
        configure_logging("info")
    (line,) = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["event"] == "cycle failed" and line["kind"] == "internal"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: reader bug" in line["exception"]


# --------------------------------------------------------------------------- topology failures

SELF_LINKED = make_facts(
    [
        make_gpu(0, nvlinks=(NvLink(index=0, active=True, remote_bus_id=make_gpu(0).bus_id),)),
        make_gpu(1),
    ]
)


def test_a_broken_topology_withholds_only_the_topology_labels() -> None:
    # The real builder: an NVLink whose far end is the GPU itself is no topology.
    sink, log = RecordingSink(), Log()
    telemetry = AgentTelemetry(sleep_interval=None)
    agent = agent_with(
        scripted(SELF_LINKED), sink, log=log, telemetry=telemetry, derive=derive_topology
    )
    outcomes = [agent.cycle(), agent.cycle()]
    assert all(outcome.ok for outcome in outcomes)
    assert sink.current is not None
    labels = sink.current.labels
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.product"] == make_gpu(0).name.replace(" ", "-")
    assert not [
        key
        for key in labels
        if key.startswith(
            ("nvidia.com/gpu.interconnect", "nvidia.com/gpu.nvlink", "nvidia.com/gpu.pcie")
        )
    ]
    # Only the matrix is withheld: the GPUs' identity needs no topology.
    assert set(sink.current.annotations) == {"nvidia.com/gpu.devices"}
    withheld = [event for event in log.events if event[1].startswith("topology labels withheld")]
    assert len(withheld) == 1, "logged once per distinct reason, not once per cycle"
    assert withheld[0][0] == "error"
    assert "TopologyError" in str(withheld[0][2]["reason"])
    assert "the remote end is the GPU itself" in str(withheld[0][2]["reason"])
    assert telemetry.registry.get_sample_value("gfd_topology_failures_total") == 2
    assert telemetry.registry.get_sample_value("gfd_cycles_total", {"result": "success"}) == 2


def test_any_builder_exception_is_withheld_and_each_reason_logged_once() -> None:
    reasons = iter([RuntimeError("first"), RuntimeError("first"), MemoryError("second")])

    def derive(_facts: NodeFacts) -> Derived:
        raise next(reasons)

    sink, log = RecordingSink(), Log()
    telemetry = AgentTelemetry(sleep_interval=None)
    agent = agent_with(scripted(GOOD), sink, log=log, telemetry=telemetry, derive=derive)
    assert all(agent.cycle().ok for _ in range(3))
    assert sink.current is not None and sink.current.labels["nvidia.com/gpu.count"] == "2"
    logged = [event[2]["reason"] for event in log.events if event[1].startswith("topology")]
    assert logged == ["RuntimeError: first", "MemoryError: second"]
    assert telemetry.registry.get_sample_value("gfd_topology_failures_total") == 3


def test_a_good_topology_counts_no_failure() -> None:
    telemetry = AgentTelemetry(sleep_interval=None)
    sink = RecordingSink()
    agent = agent_with(scripted(GOOD), sink, telemetry=telemetry, derive=derive_topology)
    assert agent.cycle().ok
    assert sink.current is not None and "nvidia.com/gpu.interconnect" in sink.current.labels
    assert "nvidia.com/gpu.topology" in sink.current.annotations
    assert telemetry.registry.get_sample_value("gfd_topology_failures_total") == 0


# --------------------------------------------------------------------------- health label

HEALTH = "nvidia.com/gpu.health"


class ScriptedHealth:
    """A health watch whose verdicts are given in advance, one mapping per cycle."""

    def __init__(self, *verdicts: dict[str, str]) -> None:
        self.verdicts = list(verdicts)

    def observe(self, facts: NodeFacts | None, error: Exception | None) -> dict[str, str]:
        return self.verdicts.pop(0)

    def report(self) -> None:
        return None


def test_each_cycles_health_verdict_is_published_and_equal_ones_reuse_the_labels() -> None:
    derived: list[NodeFacts] = []

    def counting(facts: NodeFacts) -> Derived:
        derived.append(facts)
        return no_topology(facts)

    sink = RecordingSink()
    verdicts: tuple[dict[str, str], ...] = (
        {HEALTH: "healthy"},
        {HEALTH: "healthy"},
        {HEALTH: "GPULost"},
        {},
    )
    agent = agent_with(scripted(GOOD), sink, derive=counting, health=ScriptedHealth(*verdicts))
    published: list[str | None] = []
    for _ in verdicts:
        assert agent.cycle().ok
        assert sink.current is not None
        published.append(sink.current.labels.get(HEALTH))
    assert published == ["healthy", "healthy", "GPULost", None]
    assert sink.current is not None and sink.current.labels["nvidia.com/gpu.interconnect"] == "test"
    assert len(derived) == 3, "equal facts with an equal verdict reuse the labels"


def test_a_health_label_kubernetes_would_refuse_is_dropped_and_warned() -> None:
    # A state adopted from a Node condition someone edited may carry any reason.
    sink, log = RecordingSink(), Log()
    agent = agent_with(scripted(GOOD), sink, log=log, health=ScriptedHealth({HEALTH: "GPU lost"}))
    assert agent.cycle().ok
    assert sink.current is not None and HEALTH not in sink.current.labels
    dropped = [e[2]["key"] for e in log.events if e[1].startswith("label dropped")]
    assert dropped == [HEALTH]
