"""The sinks a configuration asks for: the registry of sink kinds, and the factory that
builds them around one Kubernetes client per process.

Adding a sink is its class in a new file under ``gfd/sinks/`` and one :class:`SinkKind`
in :data:`SINK_KINDS`: when the settings want it, and a builder that imports the sink's
module and makes it from the settings. A builder imports its module when it runs, so a
run pays only for the sinks it uses (a feature-file run never loads the Kubernetes
client).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

from gfd.base.errors import ConfigError
from gfd.base.frozen import frozen_dataclass
from gfd.config import Settings

if TYPE_CHECKING:
    from gfd.kube_api import KubeClient
    from gfd.sinks import Sink
    from gfd.sinks.node import NodeSink


@frozen_dataclass
class SinkContext:
    """What a sink's builder may use besides the settings."""

    #: Where the stdout sink prints (the process's stdout, or a test's buffer).
    stdout: TextIO
    #: Set by a stop signal: a sink that waits (NFD's tick, a retry) stops waiting.
    stop: threading.Event
    #: The shared Kubernetes client; only a kind with ``kubernetes=True`` is given one.
    client: KubeClient | None = None


@frozen_dataclass
class SinkKind:
    """One kind of sink the configuration can ask for."""

    #: The sink's own ``name`` (logs and metrics call it so).
    name: str
    wanted: Callable[[Settings], bool]
    build: Callable[[Settings, SinkContext], Sink]
    #: Publishes through the Kubernetes API: built with the process's one client.
    kubernetes: bool = False


def _output_file_is_stdout(settings: Settings) -> bool:
    # As in the reference, an output file of "-" or "" means stdout.
    return settings.output_file in ("", "-")


def _stdout_sink(settings: Settings, context: SinkContext) -> Sink:
    from gfd.sinks.featurefile import StdoutSink

    return StdoutSink(context.stdout)


def _feature_file_sink(settings: Settings, context: SinkContext) -> Sink:
    from gfd.sinks.featurefile import FeatureFileSink

    expiry = (
        dt.timedelta(seconds=settings.output_file_expiry) if settings.output_file_expiry else None
    )
    # A SIGTERM ends the wait for NFD's next tick at once (the file is written).
    return FeatureFileSink(Path(settings.output_file), expiry=expiry, wait=context.stop.wait)


def _node_sink(settings: Settings, context: SinkContext) -> Sink:
    from gfd.sinks.node import NodeSink

    assert context.client is not None, "a Kubernetes sink is built with the client"
    return NodeSink(
        client=context.client,
        node_name=settings.node_name or "",
        stop=context.stop,
        timestamp_annotation=settings.timestamp_annotation,
    )


def _node_feature_sink(settings: Settings, context: SinkContext) -> Sink:
    from gfd.sinks.nodefeature import NodeFeatureSink

    assert context.client is not None, "a Kubernetes sink is built with the client"
    return NodeFeatureSink(
        client=context.client,
        node_name=settings.node_name or "",
        namespace=settings.namespace or "",
        pod_name=settings.pod_name,
        stop=context.stop,
    )


#: Every kind of sink, in the order a cycle publishes to them.
SINK_KINDS: tuple[SinkKind, ...] = (
    SinkKind(
        "stdout",
        lambda s: s.print_labels or (_output_file_is_stdout(s) and not s.no_output_file),
        _stdout_sink,
    ),
    SinkKind(
        "feature-file",
        lambda s: not s.no_output_file and not _output_file_is_stdout(s),
        _feature_file_sink,
    ),
    SinkKind("node", lambda s: s.patch_node, _node_sink, kubernetes=True),
    SinkKind("nodefeature", lambda s: s.use_node_feature_api, _node_feature_sink, kubernetes=True),
)


@dataclass
class SinkSet:
    """The sinks one configuration publishes to, and the Kubernetes client they share."""

    sinks: list[Sink]
    client: KubeClient | None = None
    kubeconfig: str | None = None

    @property
    def node_sink(self) -> NodeSink | None:
        """The node sink, when the configuration has one (the Node's reads go through it)."""
        # Found by name: importing NodeSink to test the class would load the Kubernetes
        # client for runs that have no Kubernetes sink.
        found = next((sink for sink in self.sinks if sink.name == "node"), None)
        return cast("NodeSink | None", found)


class SinkFactory:
    """Builds the sinks a Settings asks for; keeps one Kubernetes client per process.

    Building never disturbs what runs: a reload builds the new set beside the old
    one and :meth:`adopt` s it only once everything else of the reload worked, or
    :meth:`discard` s it, so a refused reload leaves the old sinks and client alive.
    """

    def __init__(
        self, stop: threading.Event, *, give_up_by: tuple[float, str] | None = None
    ) -> None:
        self._stop = stop
        self._kube: KubeClient | None = None
        self._kubeconfig: str | None = None
        #: (monotonic clock value, why) by which the client gives up every operation:
        #: a one-shot run's bound (gfd.app.deadline); None: each operation's own deadline.
        self._give_up_by = give_up_by

    def _client(self, settings: Settings) -> tuple[KubeClient, bool]:
        """The client for ``settings`` and whether it is a new one."""
        if self._kube is not None and self._kubeconfig == settings.kubeconfig:
            return self._kube, False
        from gfd.kube_api import connect_kubernetes

        client = connect_kubernetes(
            kubeconfig=settings.kubeconfig,
            in_cluster_token_path=settings.host.token_file,
            in_cluster_ca_path=settings.host.ca_file,
        )
        if self._give_up_by is not None:
            client.give_up_by(*self._give_up_by)
        return client, True

    def adopt(self, built: SinkSet) -> None:
        """``built`` is now what runs: close the client it replaced."""
        if built.client is not None and built.client is not self._kube:
            self.close()
            self._kube, self._kubeconfig = built.client, built.kubeconfig

    def discard(self, built: SinkSet) -> None:
        """``built`` will never run: close its client if it made a new one."""
        if built.client is not None and built.client is not self._kube:
            built.client.close()

    def close(self) -> None:
        """Close the Kubernetes client, if one was made (on reload to another kubeconfig, on exit)."""
        if self._kube is not None:
            self._kube.close()
            self._kube = None

    def build(self, settings: Settings, stdout: TextIO) -> SinkSet:
        """The sinks ``settings`` want, in :data:`SINK_KINDS` order.

        The client is made (or the running one taken) just before the first sink that
        needs it: a file sink that cannot be made fails before any connection.
        """
        wanted = [kind for kind in SINK_KINDS if kind.wanted(settings)]
        if not wanted:
            raise ConfigError(
                "nothing to publish to: --no-output-file without --patch-node, "
                "--use-node-feature-api or --print-labels"
            )
        built = SinkSet([])
        made: KubeClient | None = None
        try:
            for kind in wanted:
                if kind.kubernetes and built.client is None:
                    built.client, new = self._client(settings)
                    built.kubeconfig = settings.kubeconfig
                    made = built.client if new else None
                context = SinkContext(stdout, self._stop, built.client if kind.kubernetes else None)
                built.sinks.append(kind.build(settings, context))
        except BaseException:
            if made is not None:
                made.close()
            raise
        return built
