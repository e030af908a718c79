"""The GPU health checks of the running configuration, and what they remember across reloads.

Which checks run, and with what, follows from the settings and the sinks: the checks that
read the Node need the node sink, and the ``GPUHealthy`` condition and the health taint
are written through the node sink's client. Whether the DRA driver hands out the GPUs is
judged by one :class:`~gfd.health.dra_node.DraNodeWatch` per configuration (made here:
:meth:`HealthSetup.dra_node`, reading the driver's ResourceSlices through the node sink's
client), which the device-plugin check and ``--label-mode auto`` share. The ``xid`` check's events come from one
:class:`~gfd.nvml.xid_events.XidWatcher` per run, made when a periodic run enables the
check (a one-shot run ends before any Xid could arrive), kept across reloads that keep the
check, and closed by a reload that drops it and when the run ends. It starts when the
reader's NVML session starts (:meth:`gfd.app.node_reader.NodeReader.when_nvml_starts`):
after the reader's nvmlInit succeeded, so that the reader's failure to start is the one
the run acts on (``--fail-on-init-error``), and before the read asks any GPU, so that an
Xid during the first read reaches it. One that could not start then tries again at the
check's next drain after a read that worked.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.app.node_reader import NodeReader
from gfd.app.sinks import SinkSet
from gfd.base.errors import GfdError
from gfd.config import Settings
from gfd.config.values import XID_CHECK

if TYPE_CHECKING:
    from gfd.health import HealthReporter
    from gfd.health.dra_node import DraNodeWatch
    from gfd.nvml.xid_events import XidSource, XidWatcher
    from gfd.nvml.xid_feed import XidFeed


class HealthSetup:
    """The GPU health checks of the running configuration.

    What the checks remember (NVLinks seen up, a grace period running, Xids held, the
    state reported) outlives a reload: each configuration's reporter starts from the
    last. :meth:`close` stops the Xid watcher; the run calls it when it ends.
    """

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._last: HealthReporter | None = None
        self._last_dra_node: DraNodeWatch | None = None
        self._xid_watcher: XidWatcher | None = None
        #: The watcher joined with the kernel log, where the log is read.
        self._xid_feed: XidFeed | None = None
        #: The readers whose NVML sessions start the watcher (one per configuration's reader).
        self._starting_with: list[NodeReader] = []

    def dra_node(self, settings: Settings, built: SinkSet, log: Any) -> DraNodeWatch | None:
        """The configuration's :class:`~gfd.health.dra_node.DraNodeWatch`, taking over the
        last one's reads; None without the node sink (no Node to judge, no client)."""
        node_sink = built.node_sink
        if node_sink is None or built.client is None:
            self._last_dra_node = None
            return None
        from gfd.health.dra_node import DraNodeWatch
        from gfd.health.resource_slices import ResourceSliceReader

        slices = ResourceSliceReader(
            client=built.client, node_name=node_sink.node_name, stop=self._stop
        )
        self._last_dra_node = DraNodeWatch(
            slices.list,
            interval=settings.health_resource_slice_interval,
            log=log,
            previous=self._last_dra_node,
        )
        return self._last_dra_node

    def reporter(
        self,
        settings: Settings,
        built: SinkSet,
        read: NodeReader,
        log: Any,
        telemetry: Any,
        *,
        dra_node: DraNodeWatch | None = None,
        read_node: Callable[[], Mapping[str, Any] | None] | None = None,
    ) -> HealthReporter | None:
        """The reporter for ``settings``, or None when no check is asked for; ``dra_node``:
        the configuration's watch (:meth:`dra_node`); ``read_node``: the cycle's read of
        the Node, shared with the label mode (default: the node sink's read-ahead)."""
        if not settings.health_checks:
            self._last = None
            self.close()
            return None
        from gfd.health import API_CHECKS, EventRules, HealthMonitor, HealthReporter, PcieRules

        node_sink = built.node_sink
        checks = settings.health_checks
        if node_sink is None:
            # Without the node sink there is no Node to read: the API checks cannot run.
            checks = tuple(check for check in checks if check not in API_CHECKS)
        previous = self._last
        monitor = HealthMonitor(
            sysfs_root=read.sysfs_root,
            checks=checks,
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            grace_period=settings.health_grace_period or 0.0,
            log=log,
            previous=previous.monitor if previous is not None else None,
            dra_node=dra_node,
            events=EventRules(
                xid_events=self._xid_events(settings, checks, read, log, telemetry),
                ignored_xids=frozenset(settings.health_ignored_xids),
                fatal_xids=frozenset(settings.health_fatal_xids),
                hold=settings.health_event_hold,
                thresholds=settings.health_xid_threshold,
            ),
            pcie=PcieRules(
                replays_per_minute=settings.health_pcie_replay_rate,
                # A one-shot run reads once: it reports what that read shows.
                settle=0.0 if settings.oneshot else settings.health_grace_period or 0.0,
            ),
            one_shot=settings.oneshot,
        )
        writer = None
        if node_sink is None:
            read_node = None
        else:
            from gfd.health.condition import ConditionWriter, NodeConditionWriter, node_reader
            from gfd.health.taint import HealthOutputs, NodeTaintWriter

            read_node = read_node or node_reader(node_sink)
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
        """Stop the Xid watcher, if one runs (within its wait length, half a second), and
        close the kernel log."""
        watcher, self._xid_watcher = self._xid_watcher, None
        if watcher is not None:
            watcher.close()
        self._close_kernel_log()

    def _close_kernel_log(self) -> None:
        feed, self._xid_feed = self._xid_feed, None
        if feed is not None:
            feed.close()

    def _xid_events(
        self,
        settings: Settings,
        checks: tuple[str, ...],
        read: NodeReader,
        log: Any,
        telemetry: Any,
    ) -> XidSource | None:
        """The run's Xids: the watcher (made once, kept across reloads) joined with the
        kernel log where it is read (:class:`~gfd.nvml.xid_feed.XidFeed`); None where the
        xid check does not run, or in a one-shot run without a kernel log (the check then
        says it cannot decide)."""
        if XID_CHECK not in checks:
            self.close()
            return None
        on_event = telemetry.xid_error if telemetry is not None else None
        watcher = None if settings.oneshot else self._watcher(read, on_event)
        if watcher is None:
            self._close_watcher()
        path = kernel_log_path(settings)
        if path is None:
            self._close_kernel_log()
            return watcher
        feed = self._xid_feed
        if feed is None or feed.kernel.path != Path(path):
            from gfd.nvml.kernel_xids import KernelLog
            from gfd.nvml.xid_feed import XidFeed

            self._close_kernel_log()
            kernel = KernelLog(path)
            if not kernel.open():
                log.info(
                    "kernel log not read: Xids come from NVML's events alone, and those "
                    "logged before gfd started are not seen",
                    reason=kernel.error,
                )
            feed = self._xid_feed = XidFeed(watcher, kernel)
        # A reload keeps the log where it was read to: no Xid of it is handed on twice.
        feed.events = watcher
        feed.on_event = on_event
        return feed

    def _watcher(self, read: NodeReader, on_event: Any) -> XidWatcher:
        watcher = self._xid_watcher
        if watcher is None:
            from gfd.nvml.xid_events import XidWatcher

            # Not started here: the reader's next NVML session starts it (see the module).
            watcher = self._xid_watcher = XidWatcher(library_path=partial(_nvml_library, read))
        if not any(reader is read for reader in self._starting_with):
            self._starting_with.append(read)
            read.when_nvml_starts(self._start_watcher)
        # The metrics may have been switched on or off by this reload.
        watcher.on_event = on_event
        return watcher

    def _close_watcher(self) -> None:
        watcher, self._xid_watcher = self._xid_watcher, None
        if watcher is not None:
            watcher.close()

    def _start_watcher(self) -> None:
        """The reader's NVML session started (its library lock held): start the watcher
        of the running configuration, if it has one and it is not running."""
        watcher = self._xid_watcher
        if watcher is None or watcher.running:
            return
        # Why it failed is kept in start_error, which the xid check reports; the read goes on.
        with contextlib.suppress(GfdError):
            watcher.start_holding_lock()


def kernel_log_path(settings: Settings) -> str | None:
    """The kernel log the xid check reads: ``--health-kernel-log``, except that a simulated
    machine never reads the host's (``--simulate`` with the default ``/dev/kmsg``): its
    GPUs are not the host's; a test kernel log is given by its own path."""
    path = settings.health_kernel_log
    if settings.simulate and path == settings.host.kernel_log:
        return None
    return path


def _nvml_library(read: NodeReader) -> Path | None:
    """The NVML library ``read`` loads, looked up as it does at each start: the watcher
    must share it, since pynvml holds one library per process."""
    from gfd.nvml.driver_root import nvml_library_path

    return read.library_path or nvml_library_path(read.driver_root)
