"""The GPU health checks of the running configuration, and what they remember across reloads.

Which checks run, and with what, follows from the settings and the sinks: the checks that
read the Node need the node sink (and the device-plugin check reads the DRA driver's
ResourceSlices through its client), and the ``GPUHealthy`` condition and the health taint
are written through the node sink's client. The ``xid`` check's events come from one
:class:`~gfd.nvml.xid_events.XidWatcher` per run, made when a periodic run enables the
check (a one-shot run ends before any Xid could arrive) and started by the check's first
drain, kept across reloads that keep the check, and closed by a reload that drops it and
when the run ends.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gfd.app.node_reader import NodeReader
from gfd.app.sinks import SinkSet
from gfd.config import Settings
from gfd.config.values import XID_CHECK

if TYPE_CHECKING:
    from gfd.health import HealthReporter
    from gfd.nvml.xid_events import XidWatcher
    from gfd.sinks.node import NodeSink


class HealthSetup:
    """The GPU health checks of the running configuration.

    What the checks remember (NVLinks seen up, a grace period running, Xids held, the
    state reported) outlives a reload: each configuration's reporter starts from the
    last. :meth:`close` stops the Xid watcher; the run calls it when it ends.
    """

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._last: HealthReporter | None = None
        self._xid_watcher: XidWatcher | None = None

    def reporter(
        self, settings: Settings, built: SinkSet, read: NodeReader, log: Any, telemetry: Any
    ) -> HealthReporter | None:
        """The reporter for ``settings``, or None when no check is asked for."""
        if not settings.health_checks:
            self._last = None
            self.close()
            return None
        from gfd.health import API_CHECKS, EventRules, HealthMonitor, HealthReporter

        # Found by name: importing NodeSink to test the class would load the Kubernetes
        # client for runs that have no Kubernetes sink.
        node_sink = cast(
            "NodeSink | None", next((sink for sink in built.sinks if sink.name == "node"), None)
        )
        checks = settings.health_checks
        if node_sink is None:
            # Without the node sink there is no Node to read: the API checks cannot run.
            checks = tuple(check for check in checks if check not in API_CHECKS)
        previous = self._last
        slices = None
        if node_sink is not None and built.client is not None:
            from gfd.health.resource_slices import ResourceSliceReader

            slices = ResourceSliceReader(
                client=built.client, node_name=node_sink.node_name, stop=self._stop
            ).list
        monitor = HealthMonitor(
            sysfs_root=read.sysfs_root,
            checks=checks,
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            grace_period=settings.health_grace_period or 0.0,
            log=log,
            previous=previous.monitor if previous is not None else None,
            resource_slices=slices,
            resource_slice_interval=settings.health_resource_slice_interval,
            events=EventRules(
                xid_events=self._xid_events(settings, checks, read, telemetry),
                ignored_xids=frozenset(settings.health_ignored_xids),
                fatal_xids=frozenset(settings.health_fatal_xids),
                hold=settings.health_event_hold,
            ),
            one_shot=settings.oneshot,
        )
        read_node = writer = None
        if node_sink is not None:
            from gfd.health.condition import ConditionWriter, NodeConditionWriter, node_reader
            from gfd.health.taint import HealthOutputs, NodeTaintWriter

            read_node = node_reader(node_sink)
            assert built.client is not None, "the node sink was built with the client"
            writers: list[ConditionWriter] = []
            if settings.health_condition:
                writers.append(
                    NodeConditionWriter(client=built.client, node_sink=node_sink, stop=self._stop)
                )
            # Even with --health-taint off: a taint gfd added earlier is removed.
            effect = settings.health_taint_effect if settings.health_taint else None
            writers.append(
                NodeTaintWriter(
                    client=built.client, node_sink=node_sink, stop=self._stop, effect=effect
                )
            )
            writer = HealthOutputs(writers)
        self._last = HealthReporter(
            monitor,
            log=log,
            label=settings.health_label,
            read_node=read_node,
            writer=writer,
            telemetry=telemetry,
            previous=previous,
        )
        return self._last

    def close(self) -> None:
        """Stop the Xid watcher, if one runs (within its wait length, half a second)."""
        watcher, self._xid_watcher = self._xid_watcher, None
        if watcher is not None:
            watcher.close()

    def _xid_events(
        self,
        settings: Settings,
        checks: tuple[str, ...],
        read: NodeReader,
        telemetry: Any,
    ) -> XidWatcher | None:
        """The run's Xid watcher (made once, kept across reloads); None where the xid check
        does not run or the run is one-shot (the check then says it cannot decide)."""
        if XID_CHECK not in checks or settings.oneshot:
            self.close()
            return None
        watcher = self._xid_watcher
        if watcher is None:
            from gfd.nvml.xid_events import XidWatcher

            # Not started here: the check's first drain starts it, after the first cycle's
            # read, so that NVML is first asked by the reader (whose failure to start is
            # the one the run acts on), and a watcher that cannot start tries again at
            # each drain while the check says why it cannot decide.
            watcher = self._xid_watcher = XidWatcher(library_path=partial(_nvml_library, read))
        # The metrics may have been switched on or off by this reload.
        watcher.on_event = telemetry.xid_error if telemetry is not None else None
        return watcher


def _nvml_library(read: NodeReader) -> Path | None:
    """The NVML library ``read`` loads, looked up as it does at each start: the watcher
    must share it, since pynvml holds one library per process."""
    from gfd.nvml.driver_root import nvml_library_path

    return read.library_path or nvml_library_path(read.driver_root)
