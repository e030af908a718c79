"""The reference and gfd on every bundled profile × MIG strategy × sharing config.

Each case runs both programs one-shot on the same simulated machine with the same flags
and the same config file (``--config-file``), and compares the whole label maps (or, when
a program refuses the configuration, the outcome). A difference passes only if the one
reviewed list, ``tests/conformance/differences.py``, explains it; anything else fails with
the label named. One machine is prepared per profile and every case runs in one parallel
batch (``tests/conformance/reference.py``); the closing line of the session counts the
cases compared, identical and with expected differences.

The reference's side is its record (``tests/records/reference-gfd/differential.json``) unless
``GFD_REFERENCE_BIN`` points at a build, which then runs live (``reference.py``); gfd always
runs. A case whose inputs changed since the record, or that has none, fails.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gfd.sim import BUNDLED_PROFILES, load_profile
from tests.conformance.differences import judge_case
from tests.conformance.reference import (
    MachineSpec,
    Pair,
    ReferenceSource,
    Run,
    profile_machine,
    reference_source,
    run_pairs,
    sharing_config,
)

MIG_STRATEGIES = ("none", "single", "mixed")
#: The record of this suite: ``tests/records/reference-gfd/differential.json``.
SUITE = "differential"


#: Name → config file text (None: no config file). Replicas 1 is refused by both programs.
SHARING_CONFIGS: dict[str, str | None] = {
    "unshared": None,
    "timeslicing-1": sharing_config("timeSlicing", 1),
    "timeslicing-2": sharing_config("timeSlicing", 2),
    "timeslicing-10": sharing_config("timeSlicing", 10),
    "timeslicing-2-rename": sharing_config("timeSlicing", 2, rename_by_default=True),
    "mps-2": sharing_config("mps", 2),
    "mps-10": sharing_config("mps", 10),
}


@dataclass(frozen=True)
class DiffCase:
    profile: str
    mig_strategy: str
    sharing: str

    @property
    def case_id(self) -> str:
        return f"{self.profile}-{self.mig_strategy}-{self.sharing}"

    @property
    def tags(self) -> frozenset[str]:
        return frozenset({"mixed-models"} if _model_count(self.profile) > 1 else ())

    def run(self) -> Run:
        return Run(
            case_id=self.case_id,
            machine_key=self.profile,
            args=("--mig-strategy", self.mig_strategy),
            config=SHARING_CONFIGS[self.sharing],
        )


@functools.cache
def _models(profile: str) -> dict[str, tuple[str, str]]:
    """Per GPU model of the profile: its product as the reference writes it, count, MiB."""
    models: dict[str, tuple[str, str]] = {}
    gpus = load_profile(profile).facts.gpus
    for gpu in gpus:
        count = sum(g.name == gpu.name for g in gpus)
        memory = str((gpu.memory_total_bytes or 0) >> 20)
        models["-".join(gpu.name.split())] = (str(count), memory)
    return models


def _model_count(profile: str) -> int:
    return len(_models(profile))


CASES = [
    DiffCase(profile, strategy, sharing)
    for profile in BUNDLED_PROFILES
    for strategy in MIG_STRATEGIES
    for sharing in SHARING_CONFIGS
]


def suite_cases() -> tuple[list[Run], dict[str, MachineSpec]]:
    """Every case of this suite and its machines (for the recorder, too)."""
    return [c.run() for c in CASES], {p: profile_machine(p) for p in BUNDLED_PROFILES}


@pytest.fixture(scope="module")
def source() -> ReferenceSource:
    """Where this module's reference outcomes come from (asked once: live, it checks the
    binary can run)."""
    return reference_source(SUITE)


@pytest.fixture(scope="module")
def pairs(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    source: ReferenceSource,
) -> dict[str, Pair]:
    """Every selected case of this module, run in one batch the first time one is needed."""
    selected: dict[str, DiffCase] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("case") if callspec is not None else None
        if isinstance(case, DiffCase):
            selected[case.case_id] = case
    machines: dict[str, MachineSpec] = {
        c.profile: profile_machine(c.profile) for c in selected.values()
    }
    return run_pairs(
        source,
        [c.run() for c in selected.values()],
        machines,
        tmp_path_factory.mktemp("differential"),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_labels_match_the_reference(
    case: DiffCase,
    pairs: dict[str, Pair],
    source: ReferenceSource,
    record_property: Callable[[str, object], None],
) -> None:
    pair = pairs[case.case_id]
    ref, ours = pair.reference_outcome(), pair.gfd
    judge_case(case.case_id, case.tags, ref, ours, source.describe(), record_property)
    if "mixed-models" in case.tags and ref.labels is not None and ref.labelled:
        # Where the reference flaps, it still describes one whole model of the node.
        models = _models(case.profile)
        product = ref.labels["nvidia.com/gpu.product"].removesuffix("-SHARED")
        assert product in models, product
        described = (ref.labels["nvidia.com/gpu.count"], ref.labels["nvidia.com/gpu.memory"])
        assert described == models[product]


def test_every_bundled_profile_and_strategy_is_a_case() -> None:
    """The matrix the issue asks for, so a new profile cannot be left out silently."""
    assert {c.profile for c in CASES} == set(BUNDLED_PROFILES)
    assert len(CASES) == len(BUNDLED_PROFILES) * len(MIG_STRATEGIES) * len(SHARING_CONFIGS)
