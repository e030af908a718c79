"""``gfd select``: the affinity it writes matches a node exactly when the node meets the
requirements, for every requirement and label set hypothesis draws (versions compared as
tuples on one side, spelt as OR'ed integer terms on the other); the scheduler's own
answers on generated label sets are in tests/records/kube-scheduler/."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd.base.errors import ConfigError
from gfd.scheduling.select import (
    FAMILIES,
    INTERCONNECTS,
    Requirements,
    affinity_matches,
    meets,
    node_affinity,
    parse_memory,
    parse_version_requirement,
    selector_for,
)

number = st.integers(min_value=0, max_value=20).map(str)
labels = st.fixed_dictionaries(
    {},
    optional={
        "nvidia.com/gpu.family": st.sampled_from(FAMILIES[-4:]),
        "nvidia.com/gpu.product": st.sampled_from(["A", "B"]),
        "nvidia.com/gpu.memory": st.sampled_from(["40960", "76293", "76294", "81559", "81920"]),
        "nvidia.com/gpu.count": st.sampled_from(["0", "1", "4", "8"]),
        "nvidia.com/gpu.interconnect": st.sampled_from(INTERCONNECTS),
        "nvidia.com/gpu.health": st.sampled_from(["healthy", "XidCritical"]),
        "nvidia.com/mig-1g.10gb.count": st.sampled_from(["0", "7"]),
        "nvidia.com/cuda.runtime-version.major": st.sampled_from(["11", "12", "13", "x"]),
        "nvidia.com/cuda.runtime-version.minor": number | st.just("08"),
        "nvidia.com/gpu.compute.major": st.sampled_from(["7", "8", "9"]),
        "nvidia.com/gpu.compute.minor": number,
        "nvidia.com/cuda.driver-version.major": st.sampled_from(["535", "550", "570"]),
        "nvidia.com/cuda.driver-version.minor": number,
        "nvidia.com/cuda.driver-version.revision": st.sampled_from(
            ["", "02", "8", "13", "05", "5"]
        ),
    },
)


def _version_or_none(what: str, operator: str, parts: list[int]) -> object:
    try:
        return parse_version_requirement(what, operator + ".".join(map(str, parts)))
    except ConfigError:  # >=0, <0: refused, as matching every or no version
        return None


version = (
    st.builds(
        _version_or_none,
        st.sampled_from(["cuda", "compute", "driver"]),
        st.sampled_from([">=", ">", "==", "<", "<="]),
        st.lists(st.integers(min_value=0, max_value=21), min_size=1, max_size=3),
    )
    .filter(lambda v: v is not None)
    .filter(lambda v: not (v.operator in ("<", "<=") and v.parts[0] == 0))  # type: ignore[union-attr]
    .filter(lambda v: len(v.parts) <= (3 if v.what == "driver" else 2))  # type: ignore[union-attr]
)
requirements = st.builds(
    Requirements,
    families=st.lists(st.sampled_from(FAMILIES[-4:]), max_size=2).map(tuple),
    products=st.lists(st.sampled_from(["A", "B"]), max_size=1).map(tuple),
    min_memory_mib=st.none() | st.sampled_from([40960, 76294, 81920]),
    min_count=st.none() | st.integers(min_value=1, max_value=8),
    versions=st.lists(version, max_size=2).map(tuple),
    interconnects=st.lists(st.sampled_from(INTERCONNECTS), max_size=2).map(tuple),
    mig_profile=st.none() | st.just("1g.10gb"),
    healthy=st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(requirements, labels)
def test_the_affinity_matches_exactly_the_nodes_that_meet_the_requirements(
    wanted: Requirements, node: dict[str, str]
) -> None:
    affinity = node_affinity(wanted)
    assert affinity_matches(affinity, node) == meets(wanted, node)
    # Every value printed is a valid label value (the API server refuses "-1").
    for term in affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        for expression in term["matchExpressions"]:
            assert all(
                value.isdigit() or (value.replace("-", "").isalnum() and not value.startswith("-"))
                for value in expression.get("values", [])
            )
    selector = selector_for(wanted)
    if selector is not None:
        assert all(node.get(k) == v for k, v in selector.items()) == meets(wanted, node)


def test_cuda_at_least_12_8_is_two_ored_terms_each_with_every_other_condition() -> None:
    wanted = Requirements(
        families=("hopper",), versions=(parse_version_requirement("cuda", ">=12.8"),)
    )
    terms = node_affinity(wanted)["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [
        [
            (e["key"].rsplit("/", 1)[1], e["operator"], e.get("values"))
            for e in t["matchExpressions"]
        ]
        for t in terms
    ] == [
        [("gpu.family", "In", ["hopper"]), ("cuda.runtime-version.major", "Gt", ["12"])],
        [
            ("gpu.family", "In", ["hopper"]),
            # 12 as a number, so that a label written 012 is 12 too
            ("cuda.runtime-version.major", "Gt", ["11"]),
            ("cuda.runtime-version.major", "Lt", ["13"]),
            ("cuda.runtime-version.minor", "Gt", ["7"]),
        ],
    ]


def test_trailing_zeros_of_at_least_are_dropped_and_no_bound_is_negative() -> None:
    """kube-scheduler's record: --compute '>=8.0' printed "compute.minor Gt -1", which the
    API server refuses as a label value."""
    assert parse_version_requirement("compute", ">=8.0").parts == (8,)
    terms = node_affinity(Requirements(versions=(parse_version_requirement("compute", ">=8.0"),)))
    (term,) = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.compute.major", "operator": "Gt", "values": ["7"]}
    ]
    with pytest.raises(ConfigError, match="matches every version"):
        parse_version_requirement("cuda", ">=0.0")


def test_a_driver_revision_written_with_a_leading_zero_equals_its_number() -> None:
    wanted = Requirements(versions=(parse_version_requirement("driver", "==535.104.05"),))
    node = {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/cuda.driver-version.major": "535",
        "nvidia.com/cuda.driver-version.minor": "104",
        "nvidia.com/cuda.driver-version.revision": "05",
    }
    assert meets(wanted, node) and affinity_matches(node_affinity(wanted), node)


def test_a_mig_profile_is_named_as_gfd_labels_it() -> None:
    from gfd.scheduling.select import check_mig_profile

    assert check_mig_profile("1g.5gb+me") == "1g.5gb.me"
    assert Requirements(mig_profile="1g.5gb.me").resource == "nvidia.com/mig-1g.5gb.me"


def test_a_number_past_int64_is_no_number_as_for_the_scheduler() -> None:
    node = {"nvidia.com/gpu.count": "99999999999999999999"}
    wanted = Requirements(min_count=2)
    assert not meets(wanted, node) and not affinity_matches(node_affinity(wanted), node)


@pytest.mark.parametrize(
    ("text", "mib"),
    [("80GB", 76294), ("80GiB", 81920), ("40960MiB", 40960), ("0.5TB", 476838), ("1MB", 1)],
)
def test_memory_is_converted_exactly_and_rounded_up_to_whole_mib(text: str, mib: int) -> None:
    assert parse_memory(text) == mib


def test_80gb_takes_the_h100_80gb_and_80gib_does_not() -> None:
    h100 = {"nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "8"}
    assert meets(Requirements(min_memory_mib=parse_memory("80GB")), h100)
    assert not meets(Requirements(min_memory_mib=parse_memory("80GiB")), h100)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: parse_version_requirement("cuda", "12.8"),
            r"^--cuda '12.8': start with an operator",
        ),
        (
            lambda: parse_version_requirement("cuda", ">=12.x"),
            r"^--cuda '>=12.x': the version must be",
        ),
        (
            lambda: parse_version_requirement("compute", ">=8.0.1"),
            r"^--compute '>=8.0.1': the version must be 1 to 2",
        ),
        (lambda: parse_memory("80"), r"^--min-memory '80': give a number and its unit"),
    ],
)
def test_bad_requirements_are_one_line(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]
