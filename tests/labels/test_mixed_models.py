"""Nodes with several GPU models: one deterministic model in ``gpu.*``, every model counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gfd.agent import Agent, compute_labels
from gfd.facts import Gpu
from gfd.labels import LabelOptions, build_labels
from gfd.labels.models import model_labels
from gfd.nvml.reader import read_facts
from gfd.sim import simulate
from gfd.sinks.featurefile import FeatureFileSink
from tests.factories import MIB, NODE_LABELS, make_facts, make_gpu

P = "nvidia.com/"

BASE = {**NODE_LABELS, f"{P}mps.capable": "false"}

A100 = {"name": "NVIDIA A100 80GB PCIe", "memory_total_bytes": 81920 * MIB, "compute_major": 8}
L4 = {
    "name": "NVIDIA L4",
    "memory_total_bytes": 23034 * MIB,
    "compute_major": 8,
    "compute_minor": 9,
}


def a100_labels(count: int) -> dict[str, str]:
    return {
        f"{P}gpu.product": "NVIDIA-A100-80GB-PCIe",
        f"{P}gpu.count": str(count),
        f"{P}gpu.replicas": "1",
        f"{P}gpu.sharing-strategy": "none",
        f"{P}gpu.memory": "81920",
        f"{P}gpu.compute.major": "8",
        f"{P}gpu.compute.minor": "0",
        f"{P}gpu.family": "ampere",
    }


def test_the_model_with_most_gpus_is_labelled_and_every_model_counted() -> None:
    gpus = [make_gpu(0), make_gpu(1, **A100), make_gpu(2, **A100), make_gpu(3), make_gpu(4, **A100)]
    assert dict(build_labels(make_facts(gpus), LabelOptions()).labels) == {
        **BASE,
        **a100_labels(3),
        f"{P}gpu.heterogeneous": "true",
        f"{P}gpu.count.NVIDIA-A100-80GB-PCIe": "3",
        f"{P}gpu.count.NVIDIA-H100-80GB-HBM3": "2",
    }


def test_a_tie_goes_to_the_model_of_the_lowest_gpu_index() -> None:
    gpus: list[Gpu] = [
        make_gpu(0, **L4),
        make_gpu(1),
        make_gpu(2, **L4),
        make_gpu(3),
        make_gpu(4, **A100),
    ]
    assert dict(build_labels(make_facts(gpus), LabelOptions()).labels) == {
        **BASE,
        f"{P}gpu.product": "NVIDIA-L4",
        f"{P}gpu.count": "2",
        f"{P}gpu.replicas": "1",
        f"{P}gpu.sharing-strategy": "none",
        f"{P}gpu.memory": "23034",
        f"{P}gpu.compute.major": "8",
        f"{P}gpu.compute.minor": "9",
        f"{P}gpu.family": "ada-lovelace",
        f"{P}gpu.heterogeneous": "true",
        f"{P}gpu.count.NVIDIA-L4": "2",
        f"{P}gpu.count.NVIDIA-H100-80GB-HBM3": "2",
        f"{P}gpu.count.NVIDIA-A100-80GB-PCIe": "1",
    }


def test_single_model_nodes_get_no_extra_keys() -> None:
    assert model_labels(make_facts([make_gpu(0), make_gpu(1)])) == {}
    assert model_labels(make_facts([])) == {}


def test_names_that_sanitise_alike_are_counted_together() -> None:
    gpus = [make_gpu(0, name="GPU (rev a)"), make_gpu(1, name="GPU rev a"), make_gpu(2, **L4)]
    assert model_labels(make_facts(gpus)) == {
        f"{P}gpu.heterogeneous": "true",
        f"{P}gpu.count.GPU-rev-a": "2",
        f"{P}gpu.count.NVIDIA-L4": "1",
    }


def test_mixed_profile_whole_map() -> None:
    with simulate("mixed-a100-h100") as machine:
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    labels = dict(build_labels(facts, LabelOptions()).labels)
    assert {k: v for k, v in labels.items() if k.startswith(f"{P}gpu.") and "count" in k} == {
        f"{P}gpu.count": "4",
        f"{P}gpu.count.NVIDIA-A100-80GB-PCIe": "4",
        f"{P}gpu.count.NVIDIA-H100-PCIe": "2",
    }
    assert labels[f"{P}gpu.product"] == "NVIDIA-A100-80GB-PCIe"
    assert labels[f"{P}gpu.heterogeneous"] == "true"


class _Log:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_labels_identical_across_100_cycles_on_mixed_a100_h100(tmp_path: Path) -> None:
    """Simulator, reader, topology, labels and the feature file, 100 times: nothing flaps."""
    feature_file = tmp_path / "gfd"
    with simulate("mixed-a100-h100") as machine:

        def read() -> Any:
            return read_facts(
                library_path=machine.library_path,
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
            )

        agent = Agent(
            read_facts=read,
            sinks=[FeatureFileSink(feature_file)],
            options=LabelOptions(timestamp=1764683580),
            log=_Log(),
        )
        outcomes = [agent.cycle() for _ in range(100)]
        expected, _ = compute_labels(read(), LabelOptions(timestamp=1764683580))
    assert all(o.ok for o in outcomes)
    assert [dict(o.labels) for o in outcomes] == [dict(expected.labels)] * 100
    # Only the first cycle writes: the file never changes afterwards.
    assert [o.wrote for o in outcomes] == [("feature-file",)] + [()] * 99
    assert expected.labels[f"{P}gpu.product"] == "NVIDIA-A100-80GB-PCIe"
    assert feature_file.read_text().count("nvidia.com/gpu.product=NVIDIA-A100-80GB-PCIe") == 1
