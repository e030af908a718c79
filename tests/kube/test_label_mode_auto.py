"""``--label-mode auto`` end to end: gfd as its assembly builds it for ``gfd --patch-node
--label-mode auto`` (the node sink, the health checks and the label mode sharing one read of
the Node and one watch of the DRA driver's slices), on a simulated HGX H200 with MIG, against
the API server emulator.

The kubelet's ``allocatable`` and the DRA driver's ResourceSlices are arranged in the
emulator as they appear on a node with NVIDIA's device plugin (``nvidia.com/gpu``) and on one
whose GPUs NVIDIA's DRA driver (``gpu.nvidia.com``) publishes. The two label sets are the
ones ``gfd labels --label-mode device-plugin|hardware`` prints for the same facts
(``tests/labels/test_label_modes.py`` holds them to the reference and to each other).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gfd.agent import Agent, LoopControl, compute_labels
from gfd.app.health_setup import HealthSetup
from gfd.app.label_mode import label_options
from gfd.app.metrics_endpoint import MetricsEndpoint
from gfd.app.node_reader import facts_source
from gfd.app.run import AgentAssembly
from gfd.app.sinks import SinkFactory
from gfd.base.logs import get_logger
from gfd.cli import parse_command_line
from gfd.config import resolve_settings
from gfd.config.host import HostPaths
from gfd.facts import NodeFacts
from gfd.health.dra_node import DRA_DRIVER
from gfd.sinks.node import OWNERSHIP_ANNOTATION
from tests.emulator import ApiServerEmulator
from tests.emulator.server import Fault
from tests.kube_fixtures import NODE

PROFILE = "hgx-h200-mig"
#: Other writers' labels on the node: the GPU Operator's, another team's, and one in gfd's
#: own families that gfd never wrote. No mode switch may touch them.
FOREIGN = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/gpu.deploy.dcgm": "true",
    "example.com/team": "ml",
}
PLUGIN_ALLOCATABLE = {"cpu": "224", "memory": "2Ti", "nvidia.com/gpu": "8"}
DRA_ALLOCATABLE = {"cpu": "224", "memory": "2Ti"}


@pytest.fixture
def node_labels() -> Mapping[str, str]:
    return FOREIGN


@dataclass
class Gfd:
    agent: Agent
    facts: NodeFacts
    emulator: ApiServerEmulator

    def label_set(self, mode: str) -> dict[str, str]:
        """What ``gfd labels --label-mode MODE`` prints for the node's facts."""
        labels, _ = compute_labels(self.facts, label_options_for(mode))
        return dict(labels.labels)

    def node_labels(self) -> dict[str, str]:
        return self.emulator.node_labels(NODE)

    def owned(self) -> set[str]:
        listed = self.emulator.node_annotations(NODE).get(OWNERSHIP_ANNOTATION, "")
        return set(filter(None, listed.split(",")))


def label_options_for(mode: str) -> Any:
    _, explicit = parse_command_line(["--label-mode", mode])
    return label_options(resolve_settings(explicit, {}), with_timestamp=False)


@contextmanager
def gfd_auto(emulator: ApiServerEmulator, kubeconfig: Path, tmp_path: Path) -> Iterator[Gfd]:
    """The agent of ``gfd --simulate hgx-h200-mig --patch-node --label-mode auto``, as
    :class:`gfd.app.run.AgentAssembly` makes it (no loop: the test turns the cycles)."""
    argv = [
        "--simulate",
        PROFILE,
        "--patch-node",
        "--no-output-file",
        "--no-timestamp",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        NODE,
        "--label-mode",
        "auto",
    ]
    _, explicit = parse_command_line(argv)
    settings = resolve_settings(
        explicit, {}, host=HostPaths(service_account_dir=str(tmp_path / "no-namespace"))
    )
    control = LoopControl()
    factory = SinkFactory(control.stop)
    health = HealthSetup(control.stop)
    endpoint = MetricsEndpoint(get_logger())
    try:
        with facts_source(settings) as simulated:
            stdout = io.StringIO()
            assembly = AgentAssembly(
                control, factory, endpoint, health, lambda _: simulated, stdout, get_logger()
            )
            built = factory.build(settings, stdout)
            factory.adopt(built)
            yield Gfd(assembly.agent_for(settings, built), simulated(), emulator)
    finally:
        health.close()
        factory.close()
        endpoint.close()


def publish_dra_slices(emulator: ApiServerEmulator, facts: NodeFacts, generation: int = 1) -> None:
    """The driver's slice for the node: each MIG device by UUID, each GPU without MIG."""
    devices: list[dict[str, Any]] = []
    for gpu in facts.gpus:
        if not gpu.mig_mode_current:
            attributes = {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid}}
            devices.append({"name": f"gpu-{gpu.index}", "attributes": attributes})
            continue
        for mig in gpu.mig_devices:
            attributes = {
                "type": {"string": "mig"},
                "uuid": {"string": mig.uuid},
                "parentUUID": {"string": gpu.uuid},
            }
            devices.append({"name": f"gpu-{gpu.index}-mig-{mig.index}", "attributes": attributes})
    emulator.add_resource_slice(
        f"{NODE}-gpus-{generation}",
        node_name=NODE,
        driver=DRA_DRIVER,
        devices=devices,
        generation=generation,
    )


def test_a_node_with_the_device_plugin_gets_todays_set(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: Any, tmp_path: Path
) -> None:
    emulator.set_node_status(NODE, allocatable=PLUGIN_ALLOCATABLE)
    with gfd_auto(emulator, kubeconfig, tmp_path) as gfd:
        publish_dra_slices(emulator, gfd.facts)  # a driver beside the plugin changes nothing
        assert gfd.agent.cycle().ok
        assert gfd.node_labels() == {**FOREIGN, **gfd.label_set("device-plugin")}
    # The plugin's resources are advertised: the slices were never listed.
    assert emulator.count(path_contains="resourceslices") == 0


def test_a_node_whose_gpus_the_dra_driver_publishes_gets_the_hardware_set(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: Any, tmp_path: Path
) -> None:
    emulator.set_node_status(NODE, allocatable=DRA_ALLOCATABLE)
    with gfd_auto(emulator, kubeconfig, tmp_path) as gfd:
        publish_dra_slices(emulator, gfd.facts)
        emulator.clear_log()
        assert gfd.agent.cycle().ok
        hardware = gfd.label_set("hardware")
        assert gfd.node_labels() == {**FOREIGN, **hardware}
        assert gfd.owned() == set(hardware)
        # The first cycle of a DRA node: one Node read (shared by the health checks, the
        # label mode and the node sink), one slice list (shared by the device-plugin check
        # and the label mode), one write.
        assert emulator.count(path_contains=f"/nodes/{NODE}", writes=False) == 1
        assert emulator.count(path_contains="resourceslices") == 1


def test_switching_removes_exactly_the_keys_the_new_mode_does_not_publish(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: Any, tmp_path: Path
) -> None:
    emulator.set_node_status(NODE, allocatable=PLUGIN_ALLOCATABLE)
    with gfd_auto(emulator, kubeconfig, tmp_path) as gfd:
        plugin, hardware = gfd.label_set("device-plugin"), gfd.label_set("hardware")
        assert gfd.agent.cycle().ok
        assert gfd.node_labels() == {**FOREIGN, **plugin}

        # The device plugin goes, the DRA driver comes: the kubelet's allocatable changes,
        # so the slices are read at once, and the node is relabelled in that cycle.
        emulator.set_node_status(NODE, allocatable=DRA_ALLOCATABLE)
        publish_dra_slices(emulator, gfd.facts)
        assert gfd.agent.cycle().ok
        after = gfd.node_labels()
        assert set(plugin) - set(after) == set(plugin) - set(hardware)
        assert set(plugin) - set(hardware) == {
            "nvidia.com/gpu.replicas",
            "nvidia.com/gpu.sharing-strategy",
            "nvidia.com/mps.capable",
        }
        assert after == {**FOREIGN, **hardware}
        assert gfd.owned() == set(hardware)

        # And back: the plugin registers again (the driver's slices may linger).
        emulator.set_node_status(NODE, allocatable=PLUGIN_ALLOCATABLE)
        assert gfd.agent.cycle().ok
        back = gfd.node_labels()
        assert set(hardware) - set(back) == set(hardware) - set(plugin)
        assert back == {**FOREIGN, **plugin}
        assert gfd.owned() == set(plugin)


def test_api_errors_never_flip_the_mode(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: Any, tmp_path: Path
) -> None:
    emulator.set_node_status(NODE, allocatable=DRA_ALLOCATABLE)
    with gfd_auto(emulator, kubeconfig, tmp_path) as gfd:
        publish_dra_slices(emulator, gfd.facts)
        assert gfd.agent.cycle().ok
        settled = gfd.node_labels()
        # The slices cannot be read (an RBAC change, an API server that stops serving
        # resource.k8s.io) just when a changed allocatable makes them due.
        emulator.inject(Fault(status=403, path_contains="resourceslices", times=None))
        emulator.set_node_status(NODE, allocatable={**DRA_ALLOCATABLE, "cpu": "223"})
        emulator.clear_log()
        for _ in range(3):
            assert gfd.agent.cycle().ok
        assert emulator.count(path_contains="resourceslices") == 1
        assert emulator.count(writes=True, path_contains=f"/nodes/{NODE}") == 0
        assert gfd.node_labels() == settled
        # A cycle whose Node read fails publishes nothing; the next one, the same set.
        emulator.clear_faults()
        emulator.inject(Fault(status=403, method="GET", path_contains=f"/nodes/{NODE}"))
        assert not gfd.agent.cycle().ok
        assert gfd.agent.cycle().ok
        assert gfd.node_labels() == settled


def test_the_driver_republishing_its_slices_does_not_relabel_the_node(
    emulator: ApiServerEmulator, kubeconfig: Path, cluster: Any, tmp_path: Path
) -> None:
    emulator.set_node_status(NODE, allocatable=DRA_ALLOCATABLE)
    with gfd_auto(emulator, kubeconfig, tmp_path) as gfd:
        publish_dra_slices(emulator, gfd.facts)
        assert gfd.agent.cycle().ok
        settled = gfd.node_labels()
        # The driver restarts: its slice is gone (the kubelet's allocatable changes as its
        # plugin re-registers, so the slices are read at once), then comes back.
        emulator.delete_object("resourceslices", f"{NODE}-gpus-1")
        emulator.set_node_status(NODE, allocatable={**DRA_ALLOCATABLE, "pods": "110"})
        emulator.clear_log()
        assert gfd.agent.cycle().ok
        assert emulator.count(path_contains="resourceslices") == 1
        assert gfd.node_labels() == settled
        publish_dra_slices(emulator, gfd.facts, generation=2)
        for _ in range(5):
            assert gfd.agent.cycle().ok
        assert gfd.node_labels() == settled
        assert emulator.count(writes=True, path_contains=f"/nodes/{NODE}") == 0


def test_without_the_node_sink_auto_labels_as_device_plugin(tmp_path: Path) -> None:
    # gfd --label-mode auto --output-file F: no Node, no slices; the device-plugin set.
    features = tmp_path / "gfd"
    argv = ["--simulate", "t4-single", "--label-mode", "auto", "--output-file", str(features)]
    _, explicit = parse_command_line([*argv, "--no-timestamp"])
    settings = resolve_settings(
        explicit, {}, host=HostPaths(service_account_dir=str(tmp_path / "no-namespace"))
    )
    control = LoopControl()
    factory = SinkFactory(control.stop)
    health = HealthSetup(control.stop)
    endpoint = MetricsEndpoint(get_logger())
    try:
        with facts_source(settings) as simulated:
            stdout = io.StringIO()
            assembly = AgentAssembly(
                control, factory, endpoint, health, lambda _: simulated, stdout, get_logger()
            )
            built = factory.build(settings, stdout)
            factory.adopt(built)
            assert assembly.agent_for(settings, built).cycle().ok
            labels, _ = compute_labels(simulated(), label_options_for("device-plugin"))
    finally:
        health.close()
        factory.close()
        endpoint.close()
    written = dict(
        line.split("=", 1) for line in features.read_text().splitlines() if not line.startswith("#")
    )
    assert written == dict(labels.labels)
