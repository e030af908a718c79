"""gfd -> node-feature-discovery -> Node labels, on the real NFD (the nfd oracle) and the real
kube-apiserver: what each of gfd's NFD sinks puts on a Node, and how fast.

One pipeline serves the module: a Node, a features.d, nfd-worker with NFD's default sleep
interval of 60 s (so a change whose inotify event the worker drops shows up a minute late,
far past every bound here) and nfd-master. Each case starts from a Node without gfd's
labels. The expectations are NFD's: the labels of the file (or of the NodeFeature), no
more and no less, within 3 s; a file over 64 KiB skipped whole.

The latencies are printed (``pytest -s -k nfd_pipeline``) and summarised in docs/sinks.md.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator

import pytest

from gfd.agent import compute_labels
from gfd.base.errors import SinkPermanentError
from gfd.config import SharedResource, Sharing
from gfd.facts import Gpu, VgpuInfo
from gfd.labels import LabelOptions
from gfd.sim import PROFILES_DIR
from gfd.sinks import Publication
from gfd.sinks.featurefile import NFD_MAX_FILE_BYTES, FeatureFileSink, render_feature_file
from gfd.sinks.nodefeature import NodeFeatureSink, nodefeature_name
from tests.controlplane import ControlPlane
from tests.deploy.manifests import NAMESPACE
from tests.factories import make_facts
from tests.host import gfd_main
from tests.mig_factories import A100_SHAPES, H200, H200_SHAPES, a100, fabric, h200, mig
from tests.realkube.cluster import GfdCluster
from tests.realkube.nfd_pipeline import NFD_FEATURE_LABELS, NfdPipeline
from tests.reliability.agent_process import expected_labels

pytestmark = [pytest.mark.oracle("kube"), pytest.mark.oracle("nfd")]

#: The bound every change must meet, from gfd's write to the label on the Node.
BOUND = 3.0
PROFILES = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
LATENCIES: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def nfd(kube_module: GfdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NfdPipeline]:
    pipeline = NfdPipeline(kube_module, tmp_path_factory.mktemp("nfd"), sleep_interval="60s")
    pipeline.start()
    yield pipeline
    pipeline.stop()
    if LATENCIES:
        print("\nNFD pipeline latencies (s, gfd's write -> label on the Node):")
        for case, values in LATENCIES.items():
            print(f"  {case}: n={len(values)} min={min(values):.2f} max={max(values):.2f}")


@pytest.fixture(scope="module")
def kube_module(control_plane: ControlPlane) -> GfdCluster:
    return GfdCluster(control_plane, control_plane.workdir / "gfd")


@pytest.fixture
def pipeline(nfd: NfdPipeline) -> Iterator[NfdPipeline]:
    """The module's pipeline, its Node without gfd's labels before and after the case."""
    nfd.clear()
    yield nfd
    nfd.clear()


def write_profile(pipeline: NfdPipeline, profile: str, *extra: str) -> None:
    """gfd itself, once (``--oneshot``), on a simulated ``profile``: the feature file."""
    code = gfd_main(
        [
            "--simulate", profile, "--oneshot", "--no-timestamp", "--log-level", "error",
            "--output-file", str(pipeline.features / "gfd"), *extra,
        ],
        env={},
        stdout=io.StringIO(),
    )  # fmt: skip
    assert code == 0


def record(case: str, latency: float) -> float:
    LATENCIES.setdefault(case, []).append(latency)
    return latency


@pytest.fixture(scope="module")
def profile_labels() -> dict[str, dict[str, str]]:
    return {profile: expected_labels(profile) for profile in PROFILES}


@pytest.mark.parametrize("profile", PROFILES)
def test_each_profile_ends_as_exactly_gfd_s_labels(
    nfd: NfdPipeline, profile_labels: dict[str, dict[str, str]], profile: str
) -> None:
    # One profile after the other in one file, as a node whose hardware changes: each
    # ends as exactly its own labels, none of the previous profile's left over. (The
    # first starts on a fresh Node: the first labels of a new node are not late.)
    pipeline = nfd
    expected = profile_labels[profile]
    changes = pipeline.published() != expected  # two profiles can label alike
    started = time.monotonic()
    write_profile(pipeline, profile)
    latency = pipeline.wait_for(expected, started, BOUND)
    if changes:
        assert record("each profile in turn", latency) < BOUND
    labels = pipeline.kube.labels(pipeline.node)
    assert not [k for k in labels if "node.kubernetes.io/" in k and k not in pipeline.baseline]
    annotation = pipeline.kube.annotations(pipeline.node)[NFD_FEATURE_LABELS]
    assert annotation.split(",") == sorted(expected), "nfd-master owns exactly gfd's keys"


def test_ten_successive_hardware_changes_each_reach_the_node_within_3_s(
    pipeline: NfdPipeline, profile_labels: dict[str, dict[str, str]]
) -> None:
    previous = 0.0
    for change in range(10):
        profile = ("dgx-h100", "hgx-h200")[change % 2]
        # A second apart or more; no later than that either, so every change meets the
        # worker's rate limit as closely as gfd allows.
        time.sleep(max(0.0, previous + 1.0 - time.monotonic()))
        started = previous = time.monotonic()
        write_profile(pipeline, profile)
        latency = pipeline.wait_for(profile_labels[profile], started, BOUND)
        assert record("successive changes, >= 1 s apart", latency) < BOUND


def test_a_change_under_a_second_after_the_previous_reaches_the_node_within_3_s(
    pipeline: NfdPipeline, profile_labels: dict[str, dict[str, str]]
) -> None:
    for pause in (0.1, 0.5, 0.9):
        write_profile(pipeline, "dgx-a100")
        time.sleep(pause)
        started = time.monotonic()
        write_profile(pipeline, "t4-single")
        latency = pipeline.wait_for(profile_labels["t4-single"], started, BOUND)
        assert record("change under 1 s after the previous", latency) < BOUND


def largest_machine() -> tuple[dict[str, str], int]:
    """The most labels gfd can give one node: eight GPUs of two MIG-capable models, every
    MIG profile of each (compute-instance splits too) under the mixed strategy, time-sliced
    MIG devices, a vGPU guest and a fabric clique; returns the labels and the file size."""
    a100_devices = [mig(shape, i) for i, shape in enumerate(A100_SHAPES.values())]
    split = [mig(A100_SHAPES["7g.40gb"], 0, ci_slices=c) for c in (1, 2, 3, 4)]
    h200_devices = [mig(s, i, model=H200) for i, s in enumerate(H200_SHAPES.values())]
    h200_split = [mig(H200_SHAPES["4g.71gb"], 0, model=H200, ci_slices=c) for c in (1, 2)]
    clique = fabric("f" * 8 + "-0000-0000-0000-" + "1" * 12, 7)
    gpus = [
        a100(0, *a100_devices[:3]),
        a100(1, *a100_devices[3:]),
        a100(2, *split[:2]),
        a100(3, *split[2:]),
        h200(4, *h200_devices[:3], fabric=clique),
        h200(5, *h200_devices[3:], fabric=clique),
        h200(6, *h200_split, fabric=clique),
        h200(7, fabric=clique),
    ]
    facts = make_facts(gpus, vgpu=VgpuInfo(True, "550.54.16", "r550_00"))
    names = sorted({d for g in gpus for d in _mig_resources(g)})
    sharing = Sharing(
        strategy="time-slicing",
        resources=tuple(SharedResource(name, 4) for name in ["nvidia.com/gpu", *names]),
    )
    label_set, _ = compute_labels(
        facts, LabelOptions(timestamp=1_800_000_000, mig_strategy="mixed", sharing=sharing)
    )
    labels = dict(label_set.labels)
    return labels, len(render_feature_file(labels, None))


def _mig_resources(gpu: Gpu) -> list[str]:
    names = []
    for device in gpu.mig_devices:
        memory_gb = (device.gi_memory_mib + 1023) // 1024
        names.append(f"nvidia.com/mig-{device.gi_slice_count}g.{memory_gb}gb")
    return names


def test_the_largest_machine_is_well_under_nfd_s_limit_and_reaches_the_node_whole(
    pipeline: NfdPipeline,
) -> None:
    labels, size = largest_machine()
    families = {key.removeprefix("nvidia.com/").split(".")[0].split("-")[0] for key in labels}
    assert {"cuda", "gfd", "gpu", "mig", "mps", "vgpu"} <= families, families
    assert size < NFD_MAX_FILE_BYTES // 4, f"{size} bytes"
    started = time.monotonic()
    FeatureFileSink(pipeline.features / "gfd").publish(Publication(labels))
    assert pipeline.wait_for(labels, started, BOUND) < BOUND


def test_a_file_nfd_would_skip_whole_is_refused_and_the_node_keeps_its_labels(
    pipeline: NfdPipeline, profile_labels: dict[str, dict[str, str]]
) -> None:
    output = pipeline.features / "gfd"
    started = time.monotonic()
    write_profile(pipeline, "dgx-h100")
    pipeline.wait_for(profile_labels["dgx-h100"], started, BOUND)
    before = output.read_bytes()
    huge = {f"nvidia.com/gpu.test-{i:05d}": "x" * 40 for i in range(1300)}
    content = render_feature_file(huge, None)
    assert len(content) > NFD_MAX_FILE_BYTES
    with pytest.raises(SinkPermanentError) as refused:
        FeatureFileSink(output).publish(Publication(huge))
    message = str(refused.value)
    assert f"{len(content)} bytes is over NFD's limit of 65536" in message
    assert "skip the whole file" in message
    assert output.read_bytes() == before
    # What gfd refused is what NFD would have done with it: the same file, put in place
    # as gfd puts its own, is skipped whole and every label of it leaves the Node.
    staged = pipeline.features / ".gfd.staging" / "oversized"
    staged.write_bytes(content)
    pipeline.quiet()
    staged.rename(output)
    pipeline.wait_for({}, time.monotonic(), BOUND)


def test_the_nodefeature_sink_becomes_exactly_its_labels_and_leaves_with_them(
    pipeline: NfdPipeline, profile_labels: dict[str, dict[str, str]]
) -> None:
    kube = pipeline.kube
    pod = kube.gfd_pod(pipeline.node)
    client = kube.client(pod.kubeconfig)
    path = (
        f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures/"
        f"{nodefeature_name(pipeline.node)}"
    )
    try:
        sink = NodeFeatureSink(
            client=client,
            node_name=pipeline.node,
            namespace=NAMESPACE,
            pod_name=pod.name,
            stop=threading.Event(),
        )
        for profile in ("dgx-h100", "hgx-h200"):
            started = time.monotonic()
            assert sink.publish(Publication(profile_labels[profile])) is True
            latency = pipeline.wait_for(profile_labels[profile], started, BOUND)
            assert record("NodeFeature sink", latency) < BOUND
        # gfd's labels removed from its object: removed from the Node.
        started = time.monotonic()
        assert sink.publish(Publication({})) is True
        assert record("NodeFeature sink", pipeline.wait_for({}, started, BOUND)) < BOUND
        assert sink.publish(Publication(profile_labels["dgx-h100"])) is True
        pipeline.wait_for(profile_labels["dgx-h100"], time.monotonic(), BOUND)
        # The object removed (gfd's pod gone, say): so are its labels.
        started = time.monotonic()
        kube.admin.delete(path)
        assert record("NodeFeature sink", pipeline.wait_for({}, started, BOUND)) < BOUND
    finally:
        client.close()
        kube.admin.delete(path)


def test_the_feature_file_and_the_node_sink_side_by_side_do_not_fight(
    pipeline: NfdPipeline, profile_labels: dict[str, dict[str, str]]
) -> None:
    kube = pipeline.kube
    pod = kube.gfd_pod(pipeline.node)
    expected = profile_labels["dgx-h100"]
    argv = ["--patch-node", "--kubeconfig", str(pod.kubeconfig), "--node-name", pipeline.node]
    started = time.monotonic()
    write_profile(pipeline, "dgx-h100", *argv)
    # The node sink is first on the Node; nfd-master then adopts the same keys.
    while set(kube.annotations(pipeline.node).get(NFD_FEATURE_LABELS, "").split(",")) != set(
        expected
    ):
        assert time.monotonic() - started < BOUND, "nfd-master never took the file's keys"
        time.sleep(0.02)
    versions = []
    for _cycle in range(20):
        write_profile(pipeline, "dgx-h100", *argv)
        metadata = kube.node_metadata(pipeline.node)
        # Never a key of the other missing, never a value changed back and forth.
        assert pipeline.published() == expected
        assert set(metadata["annotations"][NFD_FEATURE_LABELS].split(",")) == set(expected)
        versions.append(metadata["resourceVersion"])
        time.sleep(0.1)
    # Once settled, neither writer touches the Node again: nobody undoes the other.
    assert len(set(versions[2:])) == 1, versions
    assert "nvidia.com/gpu.topology" in kube.annotations(pipeline.node)
