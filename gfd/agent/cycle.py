"""One labelling cycle: read the facts, derive the topology and the labels, publish.

A cycle hands one :class:`~gfd.sinks.Publication` to every sink. When the facts
cannot be read (NVML not up yet, a GPU lost mid-read, an NVML error) nothing is
published: every sink keeps the last good labels rather than a wrong or partial set. A
failing sink does not stop the others.

No exception ends the agent from inside a cycle: one that is not a
:class:`~gfd.base.errors.GfdError` (a bug in a label rule, a library raising what it
should not) fails that cycle as ``internal``, is logged with its traceback and
counted, and the loop retries with backoff like after any failure. A stop that comes
while a cycle reads the facts or computes the labels ends that cycle at once (the
``interruptible`` the agent is given, :meth:`gfd.agent.control.LoopControl.interruptible`):
nothing of it has been published yet.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace
from typing import Any, Protocol

from gfd.base.errors import GfdError, NvmlError, NvmlNotReady, SinkError, error_kind, shorten
from gfd.base.frozen import frozen_dataclass
from gfd.facts import NodeFacts
from gfd.labels import CycleInputs, LabelOptions, LabelSet, build_labels, compose
from gfd.labels.labeler import NO_LABELS
from gfd.sinks import Publication, Sink
from gfd.sinks.node_identity import identity_annotation


class Telemetry(Protocol):
    """What the loop reports; :mod:`gfd.metrics` implements it for Prometheus and probes."""

    def cycle_started(self) -> None: ...
    def cycle_succeeded(self, duration: float, labels_published: int) -> None: ...
    def cycle_failed(self, kind: str, duration: float) -> None: ...
    def nvml_up(self, up: bool) -> None: ...
    def facts_read(self, facts: NodeFacts) -> None: ...
    def topology_failed(self) -> None: ...


class HealthWatch(Protocol):
    """The GPU health checks (:class:`gfd.health.HealthReporter`), as the loop drives them."""

    def observe(self, facts: NodeFacts | None, error: GfdError | None) -> Mapping[str, str]:
        """Check this cycle (``facts`` None: the read failed); the labels to add."""
        ...

    def report(self) -> None:
        """After the cycle: write what changed."""
        ...


class LabelModeChoice(Protocol):
    """How ``--label-mode auto`` is decided each cycle (:class:`gfd.app.label_mode.AutoLabelMode`)."""

    def mode(self, facts: NodeFacts) -> str:
        """This cycle's label mode, ``device-plugin`` or ``hardware``; asked after the
        health checks observed the cycle, whose read of the Node it may share."""
        ...


class NullTelemetry:
    """Telemetry that records nothing (metrics off)."""

    def cycle_started(self) -> None:
        return None

    def cycle_succeeded(self, duration: float, labels_published: int) -> None:
        return None

    def cycle_failed(self, kind: str, duration: float) -> None:
        return None

    def nvml_up(self, up: bool) -> None:
        return None

    def facts_read(self, facts: NodeFacts) -> None:
        return None

    def topology_failed(self) -> None:
        return None


@frozen_dataclass
class CycleOutcome:
    """What one cycle did. ``reason`` is a one-line explanation when ``ok`` is False."""

    ok: bool
    reason: str = ""
    #: The error class of a failure: nvml-not-ready, nvml-gpu-lost, nvml, topology, sink, ...
    kind: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Names of the sinks that wrote something.
    wrote: tuple[str, ...] = ()
    #: True when NVML could not be started at all (drives --fail-on-init-error).
    init_failure: bool = False
    #: NVML could not start, and the labels of a node without GPUs were published
    #: (``--fail-on-init-error=false``): a one-shot run has done its job.
    published_without_nvml: bool = False
    #: The unexpected exception behind an ``internal`` failure (logged with its traceback).
    error: BaseException | None = field(default=None, compare=False, repr=False)


@frozen_dataclass
class Derived:
    """What the topology part of a cycle derives from the facts: the topology family's
    labels (handed to its labeler in :data:`gfd.labels.LABELERS`) and the matrix annotation."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]


def derive_topology(facts: NodeFacts) -> Derived:
    """Topology labels and the matrix annotation, from the C builder."""
    from gfd.labels.topology import topology_labels
    from gfd.topology import ANNOTATION_KEY, build_topology, to_annotation

    if not facts.gpus:
        return Derived(labels={}, annotations={})
    topology = build_topology(facts)
    return Derived(
        labels=topology_labels(topology), annotations={ANNOTATION_KEY: to_annotation(topology)}
    )


def compute_labels(
    facts: NodeFacts,
    options: LabelOptions,
    *,
    derive: Callable[[NodeFacts], Derived] = derive_topology,
    health_labels: Mapping[str, str] = NO_LABELS,
) -> tuple[LabelSet, Mapping[str, str]]:
    """The validated labels of one cycle (every family, topology and ``health_labels``
    included, composed by :func:`gfd.labels.compose`) and the annotations that go with them
    (the topology matrix and the GPUs' identity)."""
    derived = derive(facts)
    inputs = CycleInputs(
        facts, options, topology_labels=derived.labels, health_labels=health_labels
    )
    return compose(inputs), {**derived.annotations, **identity_annotation(facts)}


class Agent:
    """Runs labelling cycles against a facts source and a set of sinks."""

    def __init__(
        self,
        *,
        read_facts: Callable[[], NodeFacts],
        facts_without_nvml: Callable[[], NodeFacts] | None = None,
        sinks: Sequence[Sink],
        options: LabelOptions,
        log: Any,
        telemetry: Telemetry | None = None,
        derive: Callable[[NodeFacts], Derived] = derive_topology,
        monotonic: Callable[[], float] = time.monotonic,
        health: HealthWatch | None = None,
        label_mode: LabelModeChoice | None = None,
        interruptible: Callable[[], contextlib.AbstractContextManager[object]] = (
            contextlib.nullcontext
        ),
        ends_run: Callable[[CycleOutcome], bool] = lambda outcome: False,
    ) -> None:
        self._read_facts = read_facts
        self._facts_without_nvml = facts_without_nvml
        self._published = False
        self.sinks = tuple(sinks)
        self.options = options
        self._log = log
        self._telemetry: Telemetry = telemetry if telemetry is not None else NullTelemetry()
        self._derive = derive
        self._monotonic = monotonic
        self._warned: set[tuple[str, str]] = set()
        #: (facts, health labels, options, labels, annotations) of the last cycle whose labels
        #: were computed in full: labels are a function of facts, the health verdict and
        #: options, and the options of an agent change only in their label mode (a reload
        #: makes a new agent), so equal facts, verdict and mode reuse them.
        self._last_computed: (
            tuple[NodeFacts, Mapping[str, str], LabelOptions, LabelSet, Mapping[str, str]] | None
        ) = None
        self._topology_withheld = False
        self._health = health
        #: Decides ``--label-mode auto`` each cycle; None: the options' mode stands.
        self._label_mode = label_mode
        #: Wraps the parts of a cycle a stop may abandon
        #: (:meth:`gfd.agent.control.LoopControl.interruptible`).
        self._interruptible = interruptible
        #: Whether a failed cycle ends the run (a one-shot's, or a first NVML start that
        #: failed with --fail-on-init-error): the run's last line then says why, so the
        #: failure is logged at debug only and stderr says it once.
        self._ends_run = ends_run

    def cycle(self) -> CycleOutcome:
        """Read, label, publish once."""
        started = self._monotonic()
        self._telemetry.cycle_started()
        outcome = self._cycle()
        self._health_step("report", lambda watch: watch.report())
        duration = self._monotonic() - started
        if outcome.ok:
            self._telemetry.cycle_succeeded(duration, len(outcome.labels))
            self._log.debug(
                "cycle done",
                labels=len(outcome.labels),
                wrote=list(outcome.wrote),
                seconds=round(duration, 4),
            )
        else:
            self._telemetry.cycle_failed(outcome.kind, duration)
            report = self._log.debug if self._ends_run(outcome) else self._log.error
            if outcome.error is not None:
                report(
                    "cycle failed", reason=outcome.reason, kind=outcome.kind, exc_info=outcome.error
                )
            else:
                report("cycle failed", reason=outcome.reason, kind=outcome.kind)
        return outcome

    def _cycle(self) -> CycleOutcome:
        try:
            with self._interruptible():
                facts = self._read_facts()
        except GfdError as exc:
            lost: GfdError = exc
            self._health_step("check", lambda watch: watch.observe(None, lost))
            failed = self._read_failed(exc)
            if failed.init_failure and self._facts_without_nvml and not self._published:
                return self._publish_without_nvml(failed, self._facts_without_nvml)
            return failed
        except Exception as exc:
            return _internal_failure("reading the facts", exc)
        self._telemetry.nvml_up(True)
        self._telemetry.facts_read(facts)
        health_labels = self._health_step("check", lambda watch: watch.observe(facts, None))
        try:
            with self._interruptible():
                options = self._options_for(facts)
                label_set, annotations = self._labels_of(facts, health_labels or NO_LABELS, options)
        except GfdError as exc:
            # Facts that contradict the configuration (MPS sharing on a MIG-enabled
            # GPU); a topology the facts cannot describe is withheld above instead.
            return CycleOutcome(
                ok=False, reason=f"{exc}; keeping the last published labels", kind=error_kind(exc)
            )
        except Exception as exc:
            return _internal_failure("computing the labels", exc)
        self._report_drops(label_set)
        # Every sink gets the same labels; the node sink itself moves the timestamp
        # into an annotation when asked, so the feature file keeps it as a label.
        publication = Publication(labels=dict(label_set.labels), annotations=dict(annotations))
        return self._publish(publication)

    def _health_step(self, stage: str, step: Callable[[HealthWatch], Any]) -> Any:
        """Run one step of the health checks; a bug there never costs the labels."""
        if self._health is None:
            return None
        try:
            return step(self._health)
        except Exception as exc:
            self._log.error(
                f"GPU health {stage} failed", reason=_internal_reason(exc), exc_info=exc
            )
            return None

    def _options_for(self, facts: NodeFacts) -> LabelOptions:
        """The options of this cycle: the agent's, in the label mode decided for it."""
        if self._label_mode is None:
            return self.options
        mode = self._label_mode.mode(facts)
        return self.options if mode == self.options.mode else replace(self.options, mode=mode)

    def _labels_of(
        self, facts: NodeFacts, health_labels: Mapping[str, str], options: LabelOptions
    ) -> tuple[LabelSet, Mapping[str, str]]:
        last = self._last_computed
        # The reader hands back the same objects for what it did not re-read, so this
        # comparison is mostly identity checks.
        if (
            last is not None
            and last[0] == facts
            and last[1] == health_labels
            and last[2] == options
        ):
            return last[3], last[4]
        self._topology_withheld = False
        label_set, annotations = compute_labels(
            facts, options, derive=self._derive_or_withhold, health_labels=health_labels
        )
        # A withheld topology is retried (and counted) every cycle, not remembered.
        self._last_computed = (
            None
            if self._topology_withheld
            else (facts, health_labels, options, label_set, annotations)
        )
        return label_set, annotations

    def _derive_or_withhold(self, facts: NodeFacts) -> Derived:
        """The topology part of a cycle. When it fails, only the topology labels and the
        matrix annotation are withheld: the GFD-compatible labels are still published."""
        try:
            return self._derive(facts)
        except Exception as exc:  # whatever the builder raised
            self._topology_withheld = True
            self._telemetry.topology_failed()
            reason = f"{type(exc).__name__}: {exc}"
            if ("topology", reason) not in self._warned:
                self._warned.add(("topology", reason))
                self._log.error("topology labels withheld: the topology failed", reason=reason)
            return Derived(labels={}, annotations={})

    def _read_failed(self, exc: GfdError) -> CycleOutcome:
        """Nothing is published after a failed read: every sink keeps its last good labels."""
        init_failure = isinstance(exc, NvmlNotReady) or (
            isinstance(exc, NvmlError) and exc.call == "nvmlInit"
        )
        if isinstance(exc, NvmlError):
            self._telemetry.nvml_up(not init_failure)
        reason = str(exc)
        if isinstance(exc, NvmlError) and not isinstance(exc, NvmlNotReady):
            reason += "; keeping the last published labels"
        return CycleOutcome(
            ok=False, reason=reason, kind=error_kind(exc), init_failure=init_failure
        )

    def _publish_without_nvml(
        self, failed: CycleOutcome, read: Callable[[], NodeFacts]
    ) -> CycleOutcome:
        """NVML never came up in this process: label the node as one without GPUs.

        That is the reference's ``--fail-on-init-error=false``. The cycle still counts as
        failed (NVML is down, retried with backoff); once any labels are out, a later
        init failure keeps them instead of publishing this again.
        """
        label_set = build_labels(read(), self.options)
        published = self._publish(Publication(labels=dict(label_set.labels), annotations={}))
        if not published.ok:
            return replace(failed, reason=f"{failed.reason}; {published.reason}")
        return replace(
            failed,
            reason=f"{failed.reason}; labelled the node without GPUs until NVML starts",
            labels=published.labels,
            wrote=published.wrote,
            published_without_nvml=True,
        )

    def _publish(self, publication: Publication) -> CycleOutcome:
        wrote: list[str] = []
        failures: list[str] = []
        kind = ""
        unexpected: BaseException | None = None
        for sink in self.sinks:
            try:
                if sink.publish(publication):
                    wrote.append(sink.name)
            except SinkError as exc:
                failures.append(f"{sink.name}: {exc}")
                # A permanent failure of any sink outranks a passing one of another,
                # and an internal one; an internal one outranks a passing one.
                if error_kind(exc) == "sink-permanent" or kind in ("", "sink"):
                    kind = error_kind(exc)
            except Exception as exc:
                # A bug (or a library raising what it should not) in one sink: the
                # others still publish, and the traceback goes to the log.
                failures.append(f"{sink.name}: {_internal_reason(exc)}")
                unexpected = unexpected or exc
                if kind != "sink-permanent":
                    kind = "internal"
        if wrote:
            self._log.info("labels published", sinks=wrote, labels=len(publication.labels))
        if failures:
            return CycleOutcome(
                ok=False,
                reason="; ".join(failures),
                kind=kind,
                labels=publication.labels,
                wrote=tuple(wrote),
                error=unexpected,
            )
        self._published = True
        return CycleOutcome(ok=True, labels=publication.labels, wrote=tuple(wrote))

    def _report_drops(self, label_set: LabelSet) -> None:
        """Warn once per key about labels dropped as invalid or withheld for unreadable facts."""
        for key, why in label_set.dropped:
            if ("dropped", key) not in self._warned:
                self._warned.add(("dropped", key))
                self._log.warning("label dropped: not valid for Kubernetes", key=key, problem=why)
        for key, why in label_set.withheld:
            if ("withheld", key) not in self._warned:
                self._warned.add(("withheld", key))
                self._log.warning(
                    "label withheld: its facts could not be read", key=key, reason=why
                )

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _internal_reason(exc: BaseException) -> str:
    return shorten(f"internal error: {type(exc).__name__}: {exc}")


def _internal_failure(stage: str, exc: BaseException) -> CycleOutcome:
    """A cycle failed by an exception gfd does not know: a bug, never a reason to exit."""
    return CycleOutcome(
        ok=False,
        reason=f"{_internal_reason(exc)} while {stage}; keeping the last published labels",
        kind="internal",
        error=exc,
    )
