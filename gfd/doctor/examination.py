"""What the doctor's checks look at, found out once and shared down the chain.

This module owns the :class:`Examination`: the settings a ``gfd`` run would use, and,
each worked out the first time a check asks and kept for the others, where NVML is
looked up (:class:`DriverRootLookup`), what NVML read (:class:`NvmlReading`), the health
checks' state this cycle (:class:`HealthOutcome`), the labels and the publication of this
cycle, the way to the API server (:class:`~gfd.doctor.api.DoctorApi`) and this node's
Node object (:class:`NodeRead`). A later link of the chain thus sees exactly what an
earlier one reported, and nothing is read twice. :func:`examine_node` opens one (on the
simulator under ``--simulate``) and closes what it opened.

What reaches outside the process is a parameter: the driver root looked at by default,
the environment (whether this is a pod), how the Kubernetes client is made, the clocks,
and the mount test of the feature file's folder.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.app.node_reader import NodeReader, facts_source
from gfd.app.sinks import SINK_KINDS
from gfd.base.errors import GfdError, NvmlError, NvmlNotReady
from gfd.base.frozen import frozen_dataclass
from gfd.config import Settings
from gfd.doctor.api import DoctorApi, NoCluster, connect
from gfd.kube_api import KubeApiError, KubeApiPermanentError, path_segment

if TYPE_CHECKING:
    from gfd.facts import NodeFacts
    from gfd.health.check import Verdict
    from gfd.health.condition import HealthState
    from gfd.kube_api import KubeClient
    from gfd.labels import LabelSet
    from gfd.sinks import Publication


@frozen_dataclass
class DriverRootLookup:
    """Where NVML is looked up, as ``--driver-root-ctr-path`` and the default root decide
    (:func:`gfd.nvml.driver_root.nvml_library_path`), and what was found."""

    #: The driver root in use; None: none (the dynamic linker's search, or the simulator).
    root: Path | None
    #: How it was chosen, in words.
    chosen: str
    #: The library found under ``root``.
    library: Path | None = None
    #: Why none was found under ``root``.
    error: GfdError | None = None


@frozen_dataclass
class NvmlReading:
    """What one read of NVML gave: the facts, or the error that stopped it."""

    facts: NodeFacts | None
    error: GfdError | None
    #: The file of the NVML library that was loaded (None: none could be).
    library: str | None
    #: Where it was looked for: the simulator, a driver root, the dynamic linker.
    source: str

    @property
    def init_failure(self) -> bool:
        """NVML could not start at all (the agent's ``--fail-on-init-error`` case)."""
        error = self.error
        return isinstance(error, NvmlNotReady) or (
            isinstance(error, NvmlError) and error.call == "nvmlInit"
        )


@frozen_dataclass
class HealthOutcome:
    """The health checks of this configuration on this cycle's facts."""

    #: The checks that ran (those that need the Node are the device-plugin line's).
    checks: tuple[str, ...]
    verdict: Verdict | None
    #: What the ``GPUHealthy`` condition and ``--health-label`` would say; None: undecided.
    state: HealthState | None


@frozen_dataclass
class FeatureFileRead:
    """gfd's feature file as NFD's worker would read it now."""

    path: Path
    #: Its labels (None: absent or unreadable, ``why`` says which).
    labels: Mapping[str, str] | None
    #: Seconds since it was last written.
    age: float | None = None
    why: str | None = None


def parse_feature_file(text: str) -> dict[str, str]:
    """The labels of a feature file as NFD's local source reads them: trimmed lines, ``#``
    lines skipped (directives too: an expiry is NFD's to apply), ``key=value`` split on
    the first ``=``, a bare key meaning ``true``."""
    labels: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        labels[key] = value if equals else "true"
    return labels


@frozen_dataclass
class NodeRead:
    """This node's Node object, or why it could not be read."""

    node: Mapping[str, Any] | None
    #: Why not (None when read).
    why: str | None = None
    #: The HTTP status of a refused read (403, 404), None otherwise.
    status: int | None = None


def sink_flags(settings: Settings, targets: Mapping[str, bool]) -> tuple[str, ...]:
    """The flags that turn each sink named in ``targets`` (``feature-file``, ``node``,
    ``nodefeature``: :data:`~gfd.app.sinks.SINK_KINDS`' names) on or off as it says, each
    only where ``settings`` do not already have it so: what a fix names to change the
    outcome for this configuration, never a flag it already has.

    A flag is written with ``=`` (``--use-node-feature-api=false``, ``--output-file=PATH``),
    as gfd's command line takes it."""
    wanted = {kind.name for kind in SINK_KINDS if kind.wanted(settings)}
    flags: list[str] = []
    for name, on in targets.items():
        if (name in wanted) == on:
            continue
        if name == "node":
            flags.append("--patch-node" if on else "--patch-node=false")
        elif name == "nodefeature":
            flags.append("--use-node-feature-api" if on else "--use-node-feature-api=false")
        elif name == "feature-file" and not on:
            flags.append("--no-output-file")
        elif name == "feature-file":
            if settings.no_output_file:
                flags.append("--no-output-file=false")
            if settings.output_file in ("", "-"):
                # NFD's features.d, where gfd writes by default.
                flags.append(f"--output-file={settings.host.feature_file}")
        else:
            raise ValueError(f"no flag turns the {name} sink {'on' if on else 'off'}")
    return tuple(flags)


class _VerdictRecorder:
    """Takes the verdict the health reporter hands its telemetry."""

    def __init__(self) -> None:
        self.verdict: Verdict | None = None

    def health_checked(self, verdict: Verdict, state: HealthState | None) -> None:
        self.verdict = verdict


class Examination:
    """What the doctor's checks look at (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        reader: NodeReader | None,
        driver_root: DriverRootLookup,
        environment: Mapping[str, str],
        connect_kubernetes: Callable[..., KubeClient] | None = None,
        wall_clock: Callable[[], float] = time.time,
        is_mount: Callable[[str], bool] = os.path.ismount,
        log: Any = None,
    ) -> None:
        self.settings = settings
        self.reader = reader
        self.driver_root = driver_root
        self.environment = environment
        self.wall_clock = wall_clock
        self.is_mount = is_mount
        self._connect_kubernetes = connect_kubernetes
        if log is None:
            from gfd.base.logs import get_logger

            log = get_logger()
        self.log = log

    # ------------------------------------------------------------------ the node

    @property
    def simulated(self) -> bool:
        return bool(self.settings.simulate)

    @cached_property
    def wanted_sinks(self) -> tuple[str, ...]:
        """The names of the sinks a run with these settings publishes to, in order."""
        return tuple(kind.name for kind in SINK_KINDS if kind.wanted(self.settings))

    @cached_property
    def kubernetes_sinks(self) -> tuple[str, ...]:
        """Of :attr:`wanted_sinks`, those that publish through the API server."""
        wanted = set(self.wanted_sinks)
        return tuple(kind.name for kind in SINK_KINDS if kind.kubernetes and kind.name in wanted)

    @cached_property
    def nvml(self) -> NvmlReading:
        """One read of the facts, as the agent's first cycle makes it."""
        from gfd.nvml.library import loaded_library_file

        lookup = self.driver_root
        if self.simulated:
            source = f"the simulator, --simulate {self.settings.simulate}"
        elif lookup.root is not None:
            source = f"the driver root {lookup.root}"
        else:
            source = "the dynamic linker's search for libnvidia-ml.so.1"
        if self.reader is None:
            return NvmlReading(None, lookup.error, None, source)
        try:
            facts = self.reader()
        except GfdError as exc:
            # A library that failed to load left pynvml holding whatever it held before.
            failed_to_load = isinstance(exc, NvmlError) and exc.call == "load"
            return NvmlReading(None, exc, None if failed_to_load else loaded_library_file(), source)
        return NvmlReading(facts, None, loaded_library_file(), source)

    @cached_property
    def facts_to_label(self) -> NodeFacts | None:
        """The facts a cycle labels: those read, or, when NVML cannot start and
        ``--fail-on-init-error=false`` lets the agent go on, a node's without GPUs."""
        reading = self.nvml
        if reading.facts is not None:
            return reading.facts
        if reading.init_failure and not self.settings.fail_on_init_error:
            if self.reader is not None:
                return self.reader.without_nvml()
            from gfd.nvml.reader import read_facts_without_nvml

            return read_facts_without_nvml(
                sysfs_root=Path(self.settings.sysfs_root),
                machine_type_file=Path(self.settings.machine_type_file),
            )
        return None

    @cached_property
    def health(self) -> HealthOutcome:
        """The health checks a run enables, on this cycle's facts, through the reporter the
        agent uses (it adopts the Node's condition while the checks cannot decide). The
        checks that need the Node (the device plugin's) are left to the ``device-plugin``
        line, which judges them without their grace period."""
        from gfd.health import API_CHECKS, EventRules, HealthMonitor, HealthReporter

        settings = self.settings
        checks = tuple(name for name in settings.health_checks if name not in API_CHECKS)
        if not settings.health_checks:
            return HealthOutcome((), None, None)
        sysfs_root = self.reader.sysfs_root if self.reader else Path(settings.sysfs_root)
        monitor = HealthMonitor(
            sysfs_root=sysfs_root,
            checks=checks,
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            grace_period=settings.health_grace_period or 0.0,
            log=self.log,
            # A doctor's run receives no Xid: the xid check says it cannot decide.
            events=EventRules(
                ignored_xids=frozenset(settings.health_ignored_xids),
                fatal_xids=frozenset(settings.health_fatal_xids),
                hold=settings.health_event_hold,
            ),
        )
        recorder = _VerdictRecorder()
        # As the agent's reporter: the Node (and the condition on it) only with the node sink.
        node = self.node.node if "node" in self.wanted_sinks else None
        reporter = HealthReporter(
            monitor,
            log=self.log,
            label=settings.health_label,
            read_node=(lambda: node) if node is not None else None,
            telemetry=recorder,
        )
        reading = self.nvml
        reporter.observe(reading.facts, reading.error)
        return HealthOutcome(monitor.checks, recorder.verdict, reporter.state)

    @cached_property
    def labels(self) -> tuple[LabelSet, Mapping[str, str]] | None:
        """This cycle's labels and node annotations, as the agent computes them; None when
        there are no facts to label."""
        from gfd.agent import compute_labels
        from gfd.app.label_mode import label_options
        from gfd.health.condition import HEALTH_LABEL
        from gfd.labels import build_labels

        facts = self.facts_to_label
        if facts is None:
            return None
        options = label_options(self.settings, with_timestamp=True)
        if self.nvml.facts is None:
            # The agent's labels of a node whose NVML cannot start: no topology, no health.
            return build_labels(facts, options), {}
        state = self.health.state
        health_labels = (
            {HEALTH_LABEL: state.label_value}
            if self.settings.health_label and state is not None
            else {}
        )
        return compute_labels(facts, options, health_labels=health_labels)

    @cached_property
    def publication(self) -> Publication | None:
        """What this cycle would hand every sink."""
        from gfd.sinks import Publication

        computed = self.labels
        if computed is None:
            return None
        label_set, annotations = computed
        return Publication(labels=dict(label_set.labels), annotations=dict(annotations))

    @cached_property
    def feature_file(self) -> FeatureFileRead:
        """gfd's feature file (``--output-file``) as it is now on disk."""
        from gfd.base.inputs import InputRejected, read_bounded
        from gfd.sinks.featurefile import NFD_MAX_FILE_BYTES

        path = Path(self.settings.output_file)
        try:
            text = read_bounded(path, NFD_MAX_FILE_BYTES).decode("utf-8", "replace")
            written = os.stat(path).st_mtime
        except FileNotFoundError:
            return FeatureFileRead(path, None, why=f"{path} does not exist")
        except OSError as exc:
            return FeatureFileRead(path, None, why=f"{path}: {exc.strerror}")
        except InputRejected as exc:
            return FeatureFileRead(path, None, why=f"{path} {exc}")
        age = max(0.0, self.wall_clock() - written)
        return FeatureFileRead(path, parse_feature_file(text), age=age)

    # --------------------------------------------------------------- the cluster

    @cached_property
    def api(self) -> DoctorApi | NoCluster:
        """The way to the API server, or why there is none."""
        if self._connect_kubernetes is None:
            from gfd.kube_api import connect_kubernetes

            self._connect_kubernetes = connect_kubernetes
        try:
            return connect(
                self.settings.kubeconfig,
                self.environment,
                connect_kubernetes=functools.partial(
                    self._connect_kubernetes,
                    in_cluster_token_path=self.settings.host.token_file,
                    in_cluster_ca_path=self.settings.host.ca_file,
                ),
            )
        except NoCluster as exc:
            return exc

    @cached_property
    def node(self) -> NodeRead:
        """This node's Node object, read fresh (not from the API server's cache)."""
        api = self.api
        if isinstance(api, NoCluster):
            return NodeRead(None, f"no way to the API server ({api})")
        name = self.settings.node_name
        if not name:
            return NodeRead(None, "no node name (--node-name or NODE_NAME)")
        try:
            response = api.request("GET", f"/api/v1/nodes/{path_segment(name)}")
            return NodeRead(response.json_object(f"node {name}"))
        except KubeApiPermanentError as exc:
            if exc.status == 404:
                return NodeRead(None, f"the API server has no node {name!r}", 404)
            return NodeRead(None, str(exc), exc.status)
        except (KubeApiError, GfdError) as exc:
            return NodeRead(None, str(exc))

    def close(self) -> None:
        if isinstance(self.__dict__.get("api"), DoctorApi):
            self.api.close()  # type: ignore[union-attr]


def look_up_driver_root(settings: Settings, default_root: Path) -> DriverRootLookup:
    """Where this configuration loads NVML from, and whether the library is there."""
    from gfd.nvml.driver_root import nvml_library_path

    configured = settings.driver_root_ctr_path
    if settings.simulate:
        return DriverRootLookup(None, "not used under --simulate")
    if configured is None:
        if not default_root.is_dir():
            return DriverRootLookup(
                None, f"no --driver-root-ctr-path, and {default_root} is not mounted"
            )
        chosen = f"{default_root} (mounted; the default driver root)"
        root = default_root
    elif configured in ("", "/") or os.path.realpath(configured) == "/":
        return DriverRootLookup(None, f"--driver-root-ctr-path {configured!r}: the host's own")
    else:
        chosen = f"--driver-root-ctr-path {configured}"
        root = Path(configured)
    try:
        library = nvml_library_path(configured, default_root=default_root)
    except NvmlError as exc:
        return DriverRootLookup(root, chosen, error=exc)
    return DriverRootLookup(root, chosen, library=library)


@contextlib.contextmanager
def examine_node(
    settings: Settings,
    *,
    environment: Mapping[str, str],
    default_driver_root: Path | None = None,
    connect_kubernetes: Callable[..., KubeClient] | None = None,
    wall_clock: Callable[[], float] = time.time,
    is_mount: Callable[[str], bool] = os.path.ismount,
    log: Any = None,
) -> Iterator[Examination]:
    """An :class:`Examination` of this node as ``settings`` would run gfd on it, on the
    simulator under ``--simulate``; what it opened is closed on the way out."""
    lookup = look_up_driver_root(
        settings,
        Path(settings.host.driver_root) if default_driver_root is None else default_driver_root,
    )
    with contextlib.ExitStack() as opened:
        reader: NodeReader | None
        if settings.simulate:
            reader = opened.enter_context(facts_source(settings))
        elif lookup.error is None:
            reader = NodeReader(
                sysfs_root=Path(settings.sysfs_root),
                machine_type_file=Path(settings.machine_type_file),
                library_path=lookup.library,
            )
            opened.callback(reader.close)
        else:
            reader = None
        examination = Examination(
            settings,
            reader=reader,
            driver_root=lookup,
            environment=environment,
            connect_kubernetes=connect_kubernetes,
            wall_clock=wall_clock,
            is_mount=is_mount,
            log=log,
        )
        opened.callback(examination.close)
        yield examination
