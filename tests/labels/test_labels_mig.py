"""MIG labels: every strategy on every layout, whole label maps compared."""

from __future__ import annotations

import pytest

from gfd.facts import Gpu, NodeFacts
from gfd.labels import LabelOptions, build_labels
from gfd.labels.mig import mig_labels, profile_memory_gb, profile_name
from gfd.nvml.reader import read_facts
from gfd.sim import simulate
from tests.factories import MIB, NODE_LABELS, make_facts, make_gpu
from tests.mig_factories import (
    A100_MEMORY,
    A100_SHAPES,
    H200,
    H200_MEMORY,
    H200_SHAPES,
    a100,
    a100_split,
    h200,
    mig,
)

P = "nvidia.com/"

BASE = {**NODE_LABELS, f"{P}mps.capable": "false"}


def a100_full(count: int, replicas: int) -> dict[str, str]:
    return {
        f"{P}gpu.product": "NVIDIA-A100-SXM4-40GB",
        f"{P}gpu.count": str(count),
        f"{P}gpu.replicas": str(replicas),
        f"{P}gpu.sharing-strategy": "none",
        f"{P}gpu.memory": "40960",
        f"{P}gpu.compute.major": "8",
        f"{P}gpu.compute.minor": "0",
        f"{P}gpu.family": "ampere",
    }


def h200_full(count: int, replicas: int) -> dict[str, str]:
    return {
        f"{P}gpu.product": "NVIDIA-H200",
        f"{P}gpu.count": str(count),
        f"{P}gpu.replicas": str(replicas),
        f"{P}gpu.sharing-strategy": "none",
        f"{P}gpu.memory": "143771",
        f"{P}gpu.compute.major": "9",
        f"{P}gpu.compute.minor": "0",
        f"{P}gpu.family": "hopper",
    }


def resource(
    name: str,
    product: str,
    count: int,
    memory: int,
    sms: int,
    gi: int,
    ci: int,
    engines: tuple[int, int, int, int, int],
    replicas: int = 1,
    strategy: str = "none",
) -> dict[str, str]:
    """The labels of one MIG resource (``gpu`` under single, ``mig-<profile>`` under mixed)."""
    copy, decoder, encoder, jpeg, ofa = engines
    values = {
        "product": product,
        "count": str(count),
        "replicas": str(replicas),
        "sharing-strategy": strategy,
        "memory": str(memory),
        "multiprocessors": str(sms),
        "slices.gi": str(gi),
        "slices.ci": str(ci),
        "engines.copy": str(copy),
        "engines.decoder": str(decoder),
        "engines.encoder": str(encoder),
        "engines.jpeg": str(jpeg),
        "engines.ofa": str(ofa),
    }
    return {f"{P}{name}.{k}": v for k, v in values.items()}


def invalid(model: str = "NVIDIA-A100-SXM4-40GB") -> dict[str, str]:
    return {
        f"{P}gpu.product": f"{model}-MIG-INVALID",
        f"{P}gpu.count": "0",
        f"{P}gpu.replicas": "0",
        f"{P}gpu.sharing-strategy": "",
        f"{P}gpu.memory": "0",
    }


A100_1G = ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 4864, 14, 1, 1, (1, 0, 0, 0, 0))
A100_2G = ("NVIDIA-A100-SXM4-40GB-MIG-2g.10gb", 9856, 28, 2, 2, (2, 1, 0, 0, 0))
A100_3G = ("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", 19968, 42, 3, 3, (3, 2, 0, 0, 0))
A100_1G_ME = ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me", 4864, 14, 1, 1, (1, 1, 0, 1, 1))
A100_1C3G = ("NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb", 19968, 14, 3, 1, (3, 2, 0, 0, 0))


def res(
    name: str, shape: tuple[str, int, int, int, int, tuple[int, ...]], count: int
) -> dict[str, str]:
    product, memory, sms, gi, ci, engines = shape
    return resource(name, product, count, memory, sms, gi, ci, engines)  # type: ignore[arg-type]


SEVEN_1G = ("1g.5gb",) * 7
MIXED_LAYOUT = ("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb")

CASES: list[tuple[str, list[Gpu], str, dict[str, str]]] = [
    (
        "none: MIG-enabled GPUs are full GPUs with replicas 0",
        [a100_split(0, *SEVEN_1G), a100_split(1, *SEVEN_1G)],
        "none",
        {**BASE, **a100_full(2, replicas=0)},
    ),
    (
        "single: 7x1g.5gb on two GPUs",
        [a100_split(0, *SEVEN_1G), a100_split(1, *SEVEN_1G)],
        "single",
        {**BASE, **a100_full(2, 0), **res("gpu", A100_1G, 14), f"{P}mig.strategy": "single"},
    ),
    (
        "single: media extensions become .me",
        [a100_split(0, *("1g.5gb+me",) * 7)],
        "single",
        {**BASE, **a100_full(1, 0), **res("gpu", A100_1G_ME, 7), f"{P}mig.strategy": "single"},
    ),
    (
        "single: compute instance smaller than its GPU instance",
        [a100_split(0, "3g.20gb", "3g.20gb", ci_slices=1)],
        "single",
        {**BASE, **a100_full(1, 0), **res("gpu", A100_1C3G, 2), f"{P}mig.strategy": "single"},
    ),
    (
        "single: no MIG-enabled GPU is the none layout plus the strategy",
        [a100(0), a100(1)],
        "single",
        {**BASE, **a100_full(2, 1), f"{P}mig.strategy": "single"},
    ),
    (
        "single invalid: a MIG-enabled GPU without MIG devices",
        [a100_split(0, *SEVEN_1G), a100(1, mig_enabled=True)],
        "single",
        {**BASE, **a100_full(2, 0), **invalid(), f"{P}mig.strategy": "single"},
    ),
    (
        "single invalid: MIG enabled on one GPU, disabled on another",
        [a100_split(0, *SEVEN_1G), a100(1)],
        "single",
        {**BASE, **a100_full(2, 1), **invalid(), f"{P}mig.strategy": "single"},
    ),
    (
        "single invalid: MIG-enabled A100 next to a GPU that cannot do MIG",
        [a100_split(0, *SEVEN_1G), a100(1, mig_enabled=None)],
        "single",
        {**BASE, **a100_full(2, 1), **invalid(), f"{P}mig.strategy": "single"},
    ),
    (
        "single invalid: more than one profile on one GPU",
        [a100_split(0, *MIXED_LAYOUT), a100_split(1, *MIXED_LAYOUT)],
        "single",
        {**BASE, **a100_full(2, 0), **invalid(), f"{P}mig.strategy": "single"},
    ),
    (
        "single invalid: one profile per GPU, but different ones",
        [a100_split(0, *SEVEN_1G), a100_split(1, "2g.10gb", "2g.10gb", "2g.10gb")],
        "single",
        {**BASE, **a100_full(2, 0), **invalid(), f"{P}mig.strategy": "single"},
    ),
    (
        "mixed: one family per profile, full-GPU keys stay",
        [a100_split(0, *MIXED_LAYOUT), a100_split(1, *MIXED_LAYOUT)],
        "mixed",
        {
            **BASE,
            **a100_full(2, 0),
            **res("mig-3g.20gb", A100_3G, 2),
            **res("mig-2g.10gb", A100_2G, 2),
            **res("mig-1g.5gb", A100_1G, 4),
            f"{P}mig.strategy": "mixed",
        },
    ),
    (
        "mixed: MIG-enabled GPUs without MIG devices are ignored, MIG-disabled ones stay full",
        [a100_split(0, "1g.5gb+me", "1g.5gb"), a100(1, mig_enabled=True), a100(2)],
        "mixed",
        {
            **BASE,
            **a100_full(3, 1),
            **res("mig-1g.5gb.me", A100_1G_ME, 1),
            **res("mig-1g.5gb", A100_1G, 1),
            f"{P}mig.strategy": "mixed",
        },
    ),
    (
        "mixed: 1c.3g.20gb",
        [a100_split(0, "3g.20gb", ci_slices=1)],
        "mixed",
        {
            **BASE,
            **a100_full(1, 0),
            **res("mig-1c.3g.20gb", A100_1C3G, 1),
            f"{P}mig.strategy": "mixed",
        },
    ),
    (
        "mixed: no MIG devices at all is the none layout plus the strategy",
        [a100(0), a100(1)],
        "mixed",
        {**BASE, **a100_full(2, 1), f"{P}mig.strategy": "mixed"},
    ),
]


@pytest.mark.parametrize(
    ("gpus", "strategy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_mig_strategy_whole_map(gpus: list[Gpu], strategy: str, expected: dict[str, str]) -> None:
    label_set = build_labels(make_facts(gpus), LabelOptions(mig_strategy=strategy))
    assert dict(label_set.labels) == expected
    assert label_set.dropped == ()


def h200_node(*profiles: str) -> NodeFacts:
    gpus = [
        h200(i, *(mig(H200_SHAPES[p], j, model=H200) for j, p in enumerate(profiles)))
        for i in range(2)
    ]
    return make_facts(gpus)


def test_h200_single_uses_the_h200_profile_names() -> None:
    labels = dict(
        build_labels(h200_node(*("1g.18gb",) * 7), LabelOptions(mig_strategy="single")).labels
    )
    assert labels == {
        **BASE,
        **h200_full(2, 0),
        **resource("gpu", "NVIDIA-H200-MIG-1g.18gb", 14, 16384, 16, 1, 1, (1, 1, 0, 1, 0)),
        f"{P}mig.strategy": "single",
    }


def test_h200_mixed_every_profile() -> None:
    node = h200_node("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb")
    labels = dict(build_labels(node, LabelOptions(mig_strategy="mixed")).labels)
    assert labels == {
        **BASE,
        **h200_full(2, 0),
        **resource("mig-1g.18gb", "NVIDIA-H200-MIG-1g.18gb", 2, 16384, 16, 1, 1, (1, 1, 0, 1, 0)),
        **resource(
            "mig-1g.18gb.me", "NVIDIA-H200-MIG-1g.18gb.me", 2, 16384, 16, 1, 1, (1, 1, 0, 1, 1)
        ),
        **resource("mig-1g.35gb", "NVIDIA-H200-MIG-1g.35gb", 2, 33024, 16, 1, 1, (1, 1, 0, 1, 0)),
        **resource("mig-2g.35gb", "NVIDIA-H200-MIG-2g.35gb", 2, 33024, 32, 2, 2, (2, 2, 0, 2, 0)),
        **resource("mig-3g.71gb", "NVIDIA-H200-MIG-3g.71gb", 2, 71168, 60, 3, 3, (3, 3, 0, 3, 0)),
        f"{P}mig.strategy": "mixed",
    }


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_gpus_without_mig_support(strategy: str) -> None:
    t4 = make_gpu(
        0,
        name="Tesla T4",
        memory_total_bytes=15360 * MIB,
        compute_major=7,
        compute_minor=5,
        mig_mode_current=None,
        mig_mode_pending=None,
    )
    labels = dict(build_labels(make_facts([t4]), LabelOptions(mig_strategy=strategy)).labels)
    expected = {
        **BASE,
        f"{P}mig.capable": "false",
        f"{P}gpu.product": "Tesla-T4",
        f"{P}gpu.count": "1",
        f"{P}gpu.replicas": "1",
        f"{P}gpu.sharing-strategy": "none",
        f"{P}gpu.memory": "15360",
        f"{P}gpu.compute.major": "7",
        f"{P}gpu.compute.minor": "5",
        f"{P}gpu.family": "turing",
    }
    if strategy != "none":
        expected[f"{P}mig.strategy"] = strategy
    assert labels == expected


def test_invalid_single_names_the_first_mig_enabled_gpu_model() -> None:
    gpus = [h200(0), a100_split(1, *SEVEN_1G), a100_split(2, "7g.40gb")]
    labels = mig_labels(make_facts(gpus), "single")
    assert labels[f"{P}gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"


def test_no_gpus_no_mig_labels() -> None:
    assert mig_labels(make_facts([]), "mixed") == {}


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown MIG strategy 'some'"):
        mig_labels(make_facts(), "some")


@pytest.mark.parametrize(
    ("gi_mib", "gpu_bytes", "gb"),
    [
        (4864, A100_MEMORY, 5),
        (9856, A100_MEMORY, 10),
        (19968, A100_MEMORY, 20),
        (40192, A100_MEMORY, 40),
        (9856, 81920 * MIB, 10),
        (19968, 81920 * MIB, 20),
        (16384, H200_MEMORY, 18),
        (33024, H200_MEMORY, 35),
        # 70.5 before rounding: the reference rounds half away from zero, not to even.
        (71168, H200_MEMORY, 71),
        (9984, 81559 * MIB, 10),
        # Without the GPU's memory, the instance's own memory in GiB.
        (4864, None, 5),
        (16384, 0, 16),
    ],
)
def test_profile_memory_rounding(gi_mib: int, gpu_bytes: int | None, gb: int) -> None:
    assert profile_memory_gb(gi_mib, gpu_bytes) == gb


@pytest.mark.parametrize(
    ("shape", "ci_slices", "name"),
    [
        ("1g.5gb", None, "1g.5gb"),
        ("1g.5gb+me", None, "1g.5gb.me"),
        ("2g.10gb", 1, "1c.2g.10gb"),
        ("7g.40gb", None, "7g.40gb"),
        ("7g.40gb", 4, "4c.7g.40gb"),
        ("4g.20gb", None, "4g.20gb"),
    ],
)
def test_profile_names(shape: str, ci_slices: int | None, name: str) -> None:
    assert profile_name(mig(A100_SHAPES[shape], ci_slices=ci_slices), A100_MEMORY) == name


# --------------------------------------------------------------------------- simulated machines


def simulated_labels(profile: str, strategy: str) -> dict[str, str]:
    """Labels of a bundled profile read through the simulator and the real reader."""
    with simulate(profile) as machine:
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
    label_set = build_labels(facts, LabelOptions(mig_strategy=strategy))
    assert label_set.dropped == ()
    return dict(label_set.labels)


def node_base(driver: str, cuda: tuple[str, str], machine: str) -> dict[str, str]:
    major, minor, revision = driver.split(".")
    return {
        f"{P}cuda.driver-version.major": major,
        f"{P}cuda.driver-version.minor": minor,
        f"{P}cuda.driver-version.revision": revision,
        f"{P}cuda.driver-version.full": driver,
        f"{P}cuda.driver.major": major,
        f"{P}cuda.driver.minor": minor,
        f"{P}cuda.driver.rev": revision,
        f"{P}cuda.runtime-version.major": cuda[0],
        f"{P}cuda.runtime-version.minor": cuda[1],
        f"{P}cuda.runtime-version.full": ".".join(cuda),
        f"{P}cuda.runtime.major": cuda[0],
        f"{P}cuda.runtime.minor": cuda[1],
        f"{P}gpu.machine": machine,
        f"{P}gpu.mode": "compute",
        f"{P}mig.capable": "true",
        f"{P}mps.capable": "false",
        # Bare metal, config space read with privileges: no vGPU guest.
        f"{P}vgpu.present": "false",
    }


def pcie_reach(generation: int, width: int) -> dict[str, str]:
    """The PCIe link labels of GPUs whose links reach Gen``generation`` x``width``."""
    return {f"{P}gpu.pcie.generation": str(generation), f"{P}gpu.pcie.width": str(width)}


DGX_A100 = {
    **node_base("550.90.07", ("12", "4"), "DGXA100-920-23687-2530-000"),
    **a100_full(8, replicas=0),
    **pcie_reach(4, 16),  # A100 SXM4: PCIe Gen4 x16
}
HGX_H200 = {
    **node_base("580.105.08", ("13", "0"), "SYS-821GE-TNHR"),
    **h200_full(8, replicas=0),
    **pcie_reach(5, 16),  # H200 SXM: PCIe Gen5 x16
}
A100_4G = ("NVIDIA-A100-SXM4-40GB-MIG-4g.20gb", 19968, 56, 4, 4, (4, 2, 0, 0, 0))
A100_7G = ("NVIDIA-A100-SXM4-40GB-MIG-7g.40gb", 40192, 98, 7, 7, (7, 5, 0, 1, 1))


def h200_res(profile: str, count: int) -> dict[str, str]:
    shape = H200_SHAPES[profile]
    name = profile.replace("+", ".")
    engines = (shape.copy, shape.decoders, 0, shape.jpeg, shape.ofa)
    return resource(
        f"mig-{name}",
        f"NVIDIA-H200-MIG-{name}",
        count,
        shape.memory_mib,
        shape.multiprocessors,
        shape.slices,
        shape.slices,
        engines,
    )


SIMULATED: list[tuple[str, str, dict[str, str]]] = [
    ("dgx-a100-mig-single", "none", DGX_A100),
    (
        "dgx-a100-mig-single",
        "single",
        {**DGX_A100, **res("gpu", A100_1G, 56), f"{P}mig.strategy": "single"},
    ),
    (
        "dgx-a100-mig-single",
        "mixed",
        {**DGX_A100, **res("mig-1g.5gb", A100_1G, 56), f"{P}mig.strategy": "mixed"},
    ),
    ("dgx-a100-mig-mixed", "none", DGX_A100),
    ("dgx-a100-mig-mixed", "single", {**DGX_A100, **invalid(), f"{P}mig.strategy": "single"}),
    (
        "dgx-a100-mig-mixed",
        "mixed",
        {
            **DGX_A100,
            **res("mig-3g.20gb", A100_3G, 5),
            **res("mig-2g.10gb", A100_2G, 6),
            **res("mig-1g.5gb", A100_1G, 8),
            **res("mig-4g.20gb", A100_4G, 2),
            **res("mig-1g.5gb.me", A100_1G_ME, 2),
            **res("mig-7g.40gb", A100_7G, 1),
            **res("mig-1c.3g.20gb", A100_1C3G, 3),
            f"{P}mig.strategy": "mixed",
        },
    ),
    ("hgx-h200-mig", "none", HGX_H200),
    (
        "hgx-h200-mig",
        "single",
        {**HGX_H200, **invalid("NVIDIA-H200"), f"{P}mig.strategy": "single"},
    ),
    (
        "hgx-h200-mig",
        "mixed",
        {
            **HGX_H200,
            **h200_res("1g.18gb", 22),
            **h200_res("4g.71gb", 2),
            **h200_res("3g.71gb", 2),
            **h200_res("2g.35gb", 6),
            **h200_res("1g.35gb", 4),
            **h200_res("1g.18gb+me", 1),
            f"{P}mig.strategy": "mixed",
        },
    ),
]


@pytest.mark.parametrize(
    ("profile", "strategy", "expected"),
    SIMULATED,
    ids=[f"{profile}-{strategy}" for profile, strategy, _ in SIMULATED],
)
def test_simulated_mig_profiles_whole_map(
    profile: str, strategy: str, expected: dict[str, str]
) -> None:
    assert simulated_labels(profile, strategy) == expected
