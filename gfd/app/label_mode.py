"""The label mode of each cycle: ``--label-mode`` as given, and ``auto`` decided per cycle.

``device-plugin`` and ``hardware`` are fixed for a configuration (:func:`label_options`).
``auto`` labels a node with the hardware set where NVIDIA's DRA driver hands out its GPUs,
and with the device plugin's set elsewhere. Whether it does is the one decision
:class:`gfd.health.dra_node.DraNodeWatch` makes (a device plugin resource missing from the
Node's allocatable, and ``gpu.nvidia.com`` ResourceSlices for the node), on the Node the
node sink reads and the slices the watch reads; the device-plugin health check asks the
same watch, so a cycle reads the Node once (:class:`CycleNodeRead`) and the slices at most
once. This module owns what ``auto`` does around that decision:

* **a switch needs evidence**: ``hardware`` when the DRA driver publishes slices for a node
  that lacks the device plugin's resources, ``device-plugin`` when the plugin's resources
  are there. A node with neither (the driver restarting and republishing its slices, a
  plugin not registered yet) decides nothing;
* **it keeps the last decided mode** when a cycle cannot decide (that, or the Node or the
  slices could not be read: a transient API error never flips the labels and back);
* **before the first decision** (and whenever it never can) it labels as
  ``device-plugin``, the default, and says so once;
* **without the node sink** (no ``--patch-node``: no Node to read, no client) it cannot
  decide at all: the configuration labels as ``device-plugin``, said once per (re)load;
* a reload keeps the mode decided last, so a SIGHUP never relabels the node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gfd.config import LABEL_MODE_AUTO, LABEL_MODE_DEVICE_PLUGIN, LABEL_MODE_HARDWARE, Settings
from gfd.labels import LabelOptions

if TYPE_CHECKING:
    from gfd.config import Sharing
    from gfd.facts import NodeFacts
    from gfd.health.dra_node import DraNodeWatch, GpuPublishers

#: Read the Node now; None when it could not be read (the node sink reports why).
ReadNode = Callable[[], "Mapping[str, Any] | None"]


def label_options(settings: Settings, *, with_timestamp: bool) -> LabelOptions:
    """The label options of ``settings``; the timestamp only where labels are published.

    Under ``--label-mode auto`` the mode here is ``device-plugin``, what a cycle labels
    as until :class:`AutoLabelMode` has decided (the agent asks it each cycle).
    """
    timestamp = int(time.time()) if with_timestamp and not settings.no_timestamp else None
    mode = settings.label_mode
    return LabelOptions(
        timestamp=timestamp,
        mig_strategy=settings.mig_strategy,
        sharing=settings.sharing,
        mode=LABEL_MODE_DEVICE_PLUGIN if mode == LABEL_MODE_AUTO else mode,
    )


class CycleNodeRead:
    """One read of the Node per cycle, for the health checks and the label mode.

    The health reporter reads first (:meth:`read`, the node sink's read-ahead, which the
    sink's publish then reuses); the label mode, asked after it in the same cycle, takes
    that read (:meth:`take`), or reads itself when the health checks did not (none
    enabled). So ``auto`` costs no Node read of its own.
    """

    def __init__(self, read: ReadNode) -> None:
        self._read = read
        self._node: Mapping[str, Any] | None = None
        self._fresh = False

    def read(self) -> Mapping[str, Any] | None:
        """Read the Node for this cycle (the first asker)."""
        self._node = self._read()
        self._fresh = True
        return self._node

    def take(self) -> Mapping[str, Any] | None:
        """This cycle's read, made now unless :meth:`read` made it since the last take."""
        if not self._fresh:
            self._node = self._read()
        self._fresh = False
        return self._node


class AutoLabelMode:
    """``--label-mode auto``: each cycle, hardware on a DRA node, device-plugin elsewhere.

    ``node``: the cycle's read of the Node; ``dra_node``: the configuration's watch (shared
    with the device-plugin check); ``mig_strategy`` and ``sharing``: what the device plugin
    is expected to advertise, as the check expects it. ``previous``: the last
    configuration's, whose decided mode this one starts from.
    """

    def __init__(
        self,
        *,
        node: CycleNodeRead,
        dra_node: DraNodeWatch,
        mig_strategy: str,
        sharing: Sharing | None,
        log: Any,
        previous: AutoLabelMode | None = None,
    ) -> None:
        self._node = node
        self._dra_node = dra_node
        self._mig_strategy = mig_strategy
        self._sharing = sharing
        self._log = log
        #: The mode last decided; None until the first cycle that could decide.
        self.decided: str | None = previous.decided if previous is not None else None
        #: Why the last undecided cycle could not decide (said once per new reason).
        self._undecided_because: str | None = None

    def mode(self, facts: NodeFacts) -> str:
        """This cycle's mode: decided when the Node and the slices give evidence, else the
        mode decided last (device-plugin before the first decision)."""
        from gfd.health.dra_node import DRA_DRIVER, expected_resources

        node = self._node.take()
        if node is None:
            return self._keep("the Node could not be read")
        expected = expected_resources(facts, self._mig_strategy, self._sharing)
        publishers = self._dra_node.answered(node, expected)
        if publishers is None:
            publishers = self._dra_node.observe(node, expected)
        if publishers.slices_error is not None:
            return self._keep(f"the ResourceSlices could not be read: {publishers.slices_error}")
        if publishers.dra_node:
            decided = LABEL_MODE_HARDWARE
        elif not publishers.plugin.missing:
            decided = LABEL_MODE_DEVICE_PLUGIN
        else:
            # Hardware labels are true on any node, the plugin's view is not true on a DRA
            # node: without evidence either way, nothing changes.
            return self._keep(
                f"the kubelet advertises no {', '.join(publishers.plugin.missing)} and "
                f"{DRA_DRIVER} publishes no ResourceSlice for the node"
            )
        self._undecided_because = None
        if decided != self.decided:
            self._log.info(
                "label mode decided",
                mode=decided,
                was=self.decided,
                reason=_why(publishers),
            )
            self.decided = decided
        return decided

    def _keep(self, reason: str) -> str:
        """The mode while this cycle cannot decide: the last decided, else device-plugin."""
        kept = self.decided or LABEL_MODE_DEVICE_PLUGIN
        if reason != self._undecided_because:
            self._undecided_because = reason
            self._log.warning(
                "label mode auto not decided this cycle",
                reason=reason,
                mode=kept,
                consequence="keeping the mode decided last"
                if self.decided is not None
                else "labelling as device-plugin until it can be decided",
            )
        return kept


def _why(publishers: GpuPublishers) -> str:
    from gfd.health.dra_node import DRA_DRIVER

    missing = publishers.plugin.missing
    if publishers.dra_node:
        devices = publishers.dra_devices or ()
        return (
            f"the kubelet advertises no {', '.join(missing)} and {DRA_DRIVER} publishes "
            f"{len(devices)} devices in the node's ResourceSlices"
        )
    return "the kubelet advertises the device plugin's resources"


class LabelModeSetup:
    """The label mode of each configuration, and the mode ``auto`` decided last."""

    def __init__(self) -> None:
        self._last: AutoLabelMode | None = None

    def choice(
        self,
        settings: Settings,
        *,
        node: CycleNodeRead | None,
        dra_node: DraNodeWatch | None,
        log: Any,
    ) -> AutoLabelMode | None:
        """What decides ``settings``' label mode each cycle: None for a fixed mode (the
        options' mode stands), and for ``auto`` without the node sink, which cannot decide
        (said once here); else the configuration's :class:`AutoLabelMode`."""
        if settings.label_mode != LABEL_MODE_AUTO:
            self._last = None
            return None
        if node is None or dra_node is None:
            self._last = None
            log.warning(
                "label mode auto cannot decide",
                reason="it reads the Node and the DRA driver's ResourceSlices through the "
                "node sink, which is off (--patch-node)",
                consequence="labelling as device-plugin; set --label-mode hardware on "
                "nodes whose GPUs the DRA driver hands out",
            )
            return None
        self._last = AutoLabelMode(
            node=node,
            dra_node=dra_node,
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            log=log,
            previous=self._last,
        )
        return self._last
