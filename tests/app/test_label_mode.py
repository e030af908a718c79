"""``--label-mode auto`` around its decision: the one read of the Node a cycle shares, the
mode kept while a cycle cannot decide, the device-plugin set until the first decision, and
nothing to decide without the node sink.

The decision itself is :class:`gfd.health.dra_node.DraNodeWatch`'s (the device-plugin
check's too); here it is driven with Node bodies and ResourceSlices as the kubelet and
NVIDIA's DRA driver write them (docs/health.md, "DRA nodes"). End to end, on the API
server emulator: ``tests/kube/test_label_mode_auto.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gfd.app.label_mode import AutoLabelMode, CycleNodeRead, LabelModeSetup, label_options
from gfd.base.errors import SinkError
from gfd.config import Settings
from gfd.health.dra_node import DRA_DRIVER, DraNodeWatch
from tests.health.doubles import EIGHT, Log, node

PLUGIN_NODE = node({"cpu": "96", "nvidia.com/gpu": "8"})
BARE_NODE = node({"cpu": "96"})
DRA_SLICE = {
    "spec": {
        "driver": DRA_DRIVER,
        "nodeName": "gpu-node-1",
        "pool": {"name": "gpu-node-1", "generation": 1},
        "devices": [
            {
                "name": f"gpu-{g.index}",
                "attributes": {"type": {"string": "gpu"}, "uuid": {"string": g.uuid}},
            }
            for g in EIGHT.gpus
        ],
    }
}


class Api:
    """The Node and the slices, as the API server answers them this cycle."""

    def __init__(self, node: Mapping[str, Any], *slices: Mapping[str, Any]) -> None:
        self.node: Mapping[str, Any] | None = node
        self.slices: list[Mapping[str, Any]] = list(slices)
        self.node_error = False
        self.slices_error: SinkError | None = None
        self.node_reads = 0
        self.lists = 0

    def read_node(self) -> Mapping[str, Any] | None:
        self.node_reads += 1
        # Each read is a new object, as each answer of the API server is.
        return None if self.node_error or self.node is None else dict(self.node)

    def list_slices(self) -> list[Mapping[str, Any]]:
        self.lists += 1
        if self.slices_error is not None:
            raise self.slices_error
        return self.slices


def auto(api: Api, log: Log, previous: AutoLabelMode | None = None) -> AutoLabelMode:
    return AutoLabelMode(
        node=CycleNodeRead(api.read_node),
        dra_node=DraNodeWatch(api.list_slices, interval=1, log=log),
        mig_strategy="none",
        sharing=None,
        log=log,
        previous=previous,
    )


def test_a_node_with_the_device_plugin_is_labelled_as_today() -> None:
    api, log = Api(PLUGIN_NODE, DRA_SLICE), Log()
    assert auto(api, log).mode(EIGHT) == "device-plugin"
    # The plugin's resources are there: the slices are never read.
    assert api.lists == 0


def test_a_node_whose_gpus_the_dra_driver_publishes_gets_the_hardware_set() -> None:
    api, log = Api(BARE_NODE, DRA_SLICE), Log()
    choice = auto(api, log)
    assert choice.mode(EIGHT) == "hardware"
    [decided] = [fields for _, event, fields in log.lines if event == "label mode decided"]
    assert decided["mode"] == "hardware"
    assert decided["reason"] == (
        "the kubelet advertises no nvidia.com/gpu and gpu.nvidia.com publishes 8 devices "
        "in the node's ResourceSlices"
    )


def test_a_node_with_neither_decides_nothing() -> None:
    # A plugin not yet registered on a node without the driver: device-plugin, the default,
    # until the plugin's resources appear (then decided).
    api, log = Api(BARE_NODE), Log()
    choice = auto(api, log)
    assert choice.mode(EIGHT) == "device-plugin"
    assert choice.decided is None
    api.node = PLUGIN_NODE
    assert choice.mode(EIGHT) == "device-plugin"
    assert choice.decided == "device-plugin"


def test_slices_gone_for_a_while_do_not_relabel_a_dra_node() -> None:
    # The driver restarting: its slices are gone for a few cycles, no plugin came. The
    # hardware set stays; only the plugin's resources turn the node back.
    api, log = Api(BARE_NODE, DRA_SLICE), Log()
    choice = auto(api, log)
    assert choice.mode(EIGHT) == "hardware"
    api.slices = []
    assert [choice.mode(EIGHT) for _ in range(3)] == ["hardware"] * 3
    assert api.lists == 4  # read every cycle (interval 1): the absence was seen, not assumed
    api.slices = [DRA_SLICE]
    assert choice.mode(EIGHT) == "hardware"
    api.node = PLUGIN_NODE
    assert choice.mode(EIGHT) == "device-plugin"
    decided = [f["mode"] for _, event, f in log.lines if event == "label mode decided"]
    assert decided == ["hardware", "device-plugin"]


def test_a_transient_api_error_keeps_the_mode_decided_last() -> None:
    api, log = Api(BARE_NODE, DRA_SLICE), Log()
    choice = auto(api, log)
    assert choice.mode(EIGHT) == "hardware"
    api.slices_error = SinkError("resourceslices: 503 Service Unavailable")
    api.node = node({"cpu": "95"})  # a changed allocatable: the slices are read at once
    assert [choice.mode(EIGHT) for _ in range(3)] == ["hardware"] * 3
    api.node_error = True
    assert choice.mode(EIGHT) == "hardware"
    kept = [
        fields
        for _, event, fields in log.lines
        if event == "label mode auto not decided this cycle"
    ]
    # Said once per new reason, not once per cycle.
    assert [k["reason"] for k in kept] == [
        "the ResourceSlices could not be read: resourceslices: 503 Service Unavailable",
        "the Node could not be read",
    ]
    assert {k["consequence"] for k in kept} == {"keeping the mode decided last"}


def test_before_the_first_decision_the_device_plugin_set_stands() -> None:
    api, log = Api(BARE_NODE, DRA_SLICE), Log()
    api.slices_error = SinkError('resourceslices is forbidden: User "gfd" cannot list')
    choice = auto(api, log)
    assert choice.mode(EIGHT) == "device-plugin"
    assert choice.decided is None
    [kept] = [
        fields
        for _, event, fields in log.lines
        if event == "label mode auto not decided this cycle"
    ]
    assert kept["consequence"] == "labelling as device-plugin until it can be decided"
    api.slices_error = None
    assert choice.mode(EIGHT) == "hardware"


def test_a_reload_keeps_the_mode_decided_last() -> None:
    api, log = Api(BARE_NODE, DRA_SLICE), Log()
    first = auto(api, log)
    assert first.mode(EIGHT) == "hardware"
    api.node_error = True
    assert auto(api, log, previous=first).mode(EIGHT) == "hardware"


def test_the_health_checks_and_the_label_mode_share_one_read_and_one_list() -> None:
    # The reporter reads the Node, the device-plugin check asks the watch; the label mode
    # then takes both answers: one Node read and one slice list for the cycle.
    api, log = Api(BARE_NODE, DRA_SLICE), Log()
    read = CycleNodeRead(api.read_node)
    watch = DraNodeWatch(api.list_slices, interval=5, log=log)
    choice = AutoLabelMode(node=read, dra_node=watch, mig_strategy="none", sharing=None, log=log)
    for _ in range(10):
        seen = read.read()  # the health reporter
        assert seen is not None
        watch.observe(seen, {"nvidia.com/gpu": 8})  # the device-plugin check
        assert choice.mode(EIGHT) == "hardware"
    assert (api.node_reads, api.lists) == (10, 2)
    # Without the health checks, the label mode reads the Node itself, once a cycle.
    alone = auto(api, log)
    for _ in range(3):
        alone.mode(EIGHT)
    assert api.node_reads == 13


@pytest.mark.parametrize(
    ("mode", "options_mode"),
    [("device-plugin", "device-plugin"), ("hardware", "hardware"), ("auto", "device-plugin")],
)
def test_the_options_carry_a_fixed_mode_and_auto_starts_as_device_plugin(
    mode: str, options_mode: str
) -> None:
    assert label_options(Settings(label_mode=mode), with_timestamp=False).mode == options_mode


def test_auto_without_the_node_sink_labels_as_device_plugin_and_says_why() -> None:
    log = Log()
    assert (
        LabelModeSetup().choice(Settings(label_mode="auto"), node=None, dra_node=None, log=log)
        is None
    )
    [(level, _event, fields)] = log.lines
    assert level == "warning" and "--patch-node" in fields["reason"]
    assert (
        LabelModeSetup().choice(Settings(label_mode="hardware"), node=None, dra_node=None, log=log)
        is None
    )
