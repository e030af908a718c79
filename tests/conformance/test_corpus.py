"""A fixed corpus of hostile and edge machines through the reference and gfd.

Product names with non-ASCII letters, parentheses, the longest name NVML can report, only
punctuation; long names with every MIG profile suffix of the A100 40GB and the H200;
driver versions of 1, 2, 3 and 4 parts; zero GPUs, one GPU, two models; a vGPU guest
and bare metal read with privileges, and a passthrough VM read without. Each case runs
both programs on the same simulated machine and is judged like the differential suite
(``tests/conformance/differences.py``). Besides, each case states what the reference does
with it, and the test checks that statement: where the reference emits a label Kubernetes
rejects, or refuses the machine, gfd's labels are all valid.

A 200-character product name cannot be served: NVML's name buffer holds 95 bytes
(``NVML_DEVICE_NAME_V2_BUFFER_SIZE``), so no real driver reports one and the simulator
refuses it. The 95-character name here is the longest a node can have; 200 characters
are covered by the pure label tests (``tests/labels/test_labels.py``).

The reference's side is its record (``tests/records/reference-gfd/corpus.json``) unless
``GFD_REFERENCE_BIN`` points at a build, which then runs live; gfd always runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from gfd.facts import GPU_VIRTUALIZATION_MODES, Gpu, NodeFacts, VgpuInfo
from tests.conformance.differences import invalid_labels, judge_case
from tests.conformance.reference import (
    MachineSpec,
    Pair,
    ReferenceSource,
    Run,
    facts_machine,
    reference_source,
    run_pairs,
    sharing_config,
)
from tests.factories import make_facts, make_gpu
from tests.mig_factories import A100_SHAPES, H200_SHAPES, a100, h200, mig

#: 60 characters once sanitised: with any MIG suffix it is over 63.
LONG_MODEL = "NVIDIA Extremely Long Experimental Accelerator Model 1234567"
#: 95 bytes, the most NVML's name buffer holds.
LONGEST_MODEL = ("NVIDIA " + "Accelerator " * 8)[:95]
assert len(LONGEST_MODEL.encode()) == 95


def _named(gpu: Gpu, name: str) -> Gpu:
    devices = tuple(replace(m, name=f"{name} MIG {m.index}") for m in gpu.mig_devices)
    return replace(gpu, name=name, mig_devices=devices)


def _bus(gpu: Gpu, index: int) -> Gpu:
    return replace(gpu, bus_id=f"00000000:{0x1B + index:02X}:00.0")


def long_a100_machine() -> NodeFacts:
    """Every A100 40GB profile, ``+me`` and a ``1c.`` compute instance, under a long name."""
    s = A100_SHAPES
    gpus = [
        a100(0, mig(s["1g.5gb"], 0), mig(s["1g.5gb+me"], 1), mig(s["2g.10gb"], 2), mig(s["3g.20gb"], 3)),
        a100(1, mig(s["4g.20gb"], 0)),
        a100(2, mig(s["7g.40gb"], 0)),
        a100(3, mig(s["3g.20gb"], 0, ci_slices=1)),
    ]  # fmt: skip
    return make_facts([_named(g, LONG_MODEL) for g in gpus], driver_version="550.163.01")


def long_h200_machine() -> NodeFacts:
    """Every H200 profile (``1g.18gb+me``, the double-memory ``1g.35gb``) under a long name."""
    s = H200_SHAPES
    model = "NVIDIA H200"
    gpus = [
        h200(0, mig(s["1g.18gb"], 0, model=model), mig(s["1g.18gb+me"], 1, model=model),
             mig(s["1g.35gb"], 2, model=model), mig(s["2g.35gb"], 3, model=model)),
        h200(1, mig(s["3g.71gb"], 0, model=model)),
        h200(2, mig(s["4g.71gb"], 0, model=model)),
    ]  # fmt: skip
    return make_facts([_named(g, LONG_MODEL) for g in gpus], driver_version="570.172.08")


def one_gpu(name: str, **fields: object) -> NodeFacts:
    return make_facts([make_gpu(0, name=name)], **fields)  # type: ignore[arg-type]


#: Machine key → how to build its facts.
MACHINES: dict[str, Callable[[], NodeFacts]] = {
    "unicode-name": lambda: one_gpu("NVIDIA Ünïcødé GPU ✓"),
    "parentheses-name": lambda: one_gpu("NVIDIA TITAN X (Pascal)"),
    "longest-name": lambda: make_facts([make_gpu(i, name=LONGEST_MODEL) for i in range(2)]),
    "punctuation-name": lambda: one_gpu("(((  ))) !! ??"),
    "dashes-name": lambda: one_gpu("--- ... ___"),
    "non-ascii-name": lambda: one_gpu("✓✓✓ ÄÖÜ"),
    "long-a100-mig": long_a100_machine,
    "long-h200-mig": long_h200_machine,
    "driver-2-parts": lambda: one_gpu("NVIDIA L4", driver_version="535.54"),
    "driver-3-parts": lambda: one_gpu("NVIDIA L4", driver_version="535.261.03"),
    "driver-4-parts": lambda: one_gpu("NVIDIA L4", driver_version="550.54.15.1"),
    "driver-1-part": lambda: one_gpu("NVIDIA L4", driver_version="550"),
    "zero-gpus": lambda: make_facts([]),
    # Privileged reads (full config space): a vGPU guest, and bare metal.
    "vgpu-guest": lambda: make_facts(
        vgpu=VgpuInfo(present=True, host_driver_version="460.16", host_driver_branch="r460_00")
    ),
    "vgpu-bare-metal": lambda: make_facts(vgpu=VgpuInfo(present=False)),
    # Unprivileged (config space unreadable) in a VM the GPU is passed through to, as NVML
    # reports it: the reference publishes no vGPU label, gfd vgpu.present=false from NVML.
    "vgpu-unreadable-passthrough": lambda: make_facts(
        [make_gpu(0, virtualization_mode=GPU_VIRTUALIZATION_MODES["passthrough"])]
    ),
    "one-gpu": lambda: one_gpu("NVIDIA H100 80GB HBM3"),
    "two-models-tied": lambda: make_facts(
        [make_gpu(0, name="NVIDIA L4"), _bus(make_gpu(1, name="NVIDIA H100 PCIe"), 1)]
    ),
}


@dataclass(frozen=True)
class CorpusCase:
    machine: str
    mig_strategy: str = "none"
    shared: bool = False
    tags: frozenset[str] = frozenset()
    #: What the reference does with it (checked): emits a label Kubernetes rejects ...
    reference_invalid: bool = False
    #: ... or exits with an error and publishes nothing.
    reference_refuses: bool = False

    @property
    def case_id(self) -> str:
        return f"{self.machine}-{self.mig_strategy}-{'shared' if self.shared else 'unshared'}"

    def run(self) -> Run:
        return Run(
            case_id=self.case_id,
            machine_key=self.machine,
            args=("--mig-strategy", self.mig_strategy),
            config=sharing_config("timeSlicing", 2) if self.shared else None,
        )


EMPTY = frozenset({"empty-name"})
NOT_XYZ = frozenset({"driver-not-x-y-z"})
MIXED = frozenset({"mixed-models"})
CASES = [
    CorpusCase("unicode-name"),
    CorpusCase("unicode-name", shared=True),
    CorpusCase("parentheses-name"),
    CorpusCase("parentheses-name", shared=True),
    # 95 characters: over 63 with or without a suffix.
    CorpusCase("longest-name", reference_invalid=True),
    CorpusCase("longest-name", shared=True, reference_invalid=True),
    # The reference publishes gpu.product= (empty); shared, "-SHARED" (invalid).
    CorpusCase("punctuation-name", tags=EMPTY),
    CorpusCase("punctuation-name", shared=True, tags=EMPTY, reference_invalid=True),
    # '-', '.' and '_' survive the reference's sanitiser: "----...-___", invalid.
    CorpusCase("dashes-name", tags=EMPTY, reference_invalid=True),
    CorpusCase("non-ascii-name", tags=EMPTY),
    CorpusCase("non-ascii-name", shared=True, tags=EMPTY, reference_invalid=True),
    # Under none the full-GPU product (60) fits, and MIG-enabled GPUs labelled as full
    # GPUs are never shared (no -SHARED); MIG suffixes push it over 63.
    CorpusCase("long-a100-mig"),
    CorpusCase("long-a100-mig", shared=True),
    CorpusCase("long-a100-mig", "single", reference_invalid=True),
    CorpusCase("long-a100-mig", "mixed", reference_invalid=True),
    CorpusCase("long-a100-mig", "mixed", shared=True, reference_invalid=True),
    CorpusCase("long-h200-mig", "single", reference_invalid=True),
    CorpusCase("long-h200-mig", "mixed", reference_invalid=True),
    CorpusCase("long-h200-mig", "mixed", shared=True, reference_invalid=True),
    CorpusCase("driver-2-parts"),
    CorpusCase("driver-3-parts"),
    CorpusCase("driver-4-parts", tags=NOT_XYZ, reference_refuses=True),
    CorpusCase("driver-1-part", tags=NOT_XYZ, reference_refuses=True),
    CorpusCase("zero-gpus"),
    CorpusCase("zero-gpus", "mixed", shared=True),
    CorpusCase("vgpu-guest"),
    CorpusCase("vgpu-bare-metal"),
    CorpusCase("vgpu-unreadable-passthrough", tags=frozenset({"vgpu-from-nvml"})),
    CorpusCase("one-gpu"),
    CorpusCase("one-gpu", "single", shared=True),
    CorpusCase("two-models-tied", tags=MIXED),
    CorpusCase("two-models-tied", shared=True, tags=MIXED),
]


#: The record of this suite: ``tests/records/reference-gfd/corpus.json``.
SUITE = "corpus"


def machine_specs() -> dict[str, MachineSpec]:
    """Every corpus machine; its serialised facts are part of each case's inputs."""
    return {key: facts_machine(key, build()) for key, build in MACHINES.items()}


def suite_cases() -> tuple[list[Run], dict[str, MachineSpec]]:
    """Every case of this suite and its machines (for the recorder, too)."""
    return [c.run() for c in CASES], machine_specs()


@pytest.fixture(scope="module")
def source() -> ReferenceSource:
    """Where this module's reference outcomes come from (asked once: live, it checks the
    binary can run)."""
    return reference_source(SUITE)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory, source: ReferenceSource) -> dict[str, Pair]:
    return run_pairs(
        source, [c.run() for c in CASES], machine_specs(), tmp_path_factory.mktemp("corpus")
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_corpus_case(
    case: CorpusCase,
    pairs: dict[str, Pair],
    source: ReferenceSource,
    record_property: Callable[[str, object], None],
) -> None:
    pair = pairs[case.case_id]
    ref, ours = pair.reference_outcome(), pair.gfd
    judge_case(f"corpus:{case.case_id}", case.tags, ref, ours, source.describe(), record_property)
    # What the case says of the reference holds, and gfd does better where it says so.
    assert (not ref.labelled) == case.reference_refuses, ref.describe()
    reference_problems = invalid_labels(ref.labels or {})
    assert bool(reference_problems) == case.reference_invalid, reference_problems
    assert ours.labelled and ours.labels is not None, ours.describe()
    assert invalid_labels(ours.labels) == []
    # A product keeps the suffix the reference gives it, even where the reference's is too long.
    for key, theirs in (ref.labels or {}).items():
        if key.endswith(".product") and "-MIG-" in theirs:
            assert ours.labels[key].endswith(theirs[theirs.index("-MIG-") :]), key
        if key.endswith(".product") and theirs.endswith("-SHARED"):
            assert ours.labels[key].endswith("-SHARED"), key
