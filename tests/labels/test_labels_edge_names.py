"""Label fixes for machine shapes the bundled profiles do not cover (issue 12).

* A long product name with a MIG or sharing suffix keeps the suffix: the model part is
  cut so that the whole value fits Kubernetes' 63 characters.
* A name that sanitises to nothing gives the product ``unknown``, never an empty value
  nor an invalid ``gpu.count.`` key.
* A driver version that is not ``X.Y[.Z]`` gives no driver version labels (the reference
  refuses it: ``internal/lm/nvml.go`` errors "does not match format X.Y[.Z]"); every other
  label is still published, and the left-out ones are reported as withheld.

Expected values are written out from those rules, never taken from gfd's output.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gfd.config import SharedResource, Sharing
from gfd.labels import LabelOptions, build_labels
from gfd.labels.core import DRIVER_VERSION_KEYS
from tests.factories import make_facts, make_gpu
from tests.mig_factories import A100_SHAPES, a100, mig

P = "nvidia.com/"
#: 60 characters once sanitised (spaces become '-').
LONG_NAME = "NVIDIA Extremely Long Experimental Accelerator Model 123456"
assert len(LONG_NAME) == 59
LONG_60 = LONG_NAME + "7"


def shared(*names: str, replicas: int = 4) -> Sharing:
    return Sharing(
        strategy="time-slicing",
        resources=tuple(SharedResource(name=n, replicas=replicas) for n in names),
    )


def long_a100(index: int, *profiles: str, name: str = LONG_60):  # type: ignore[no-untyped-def]
    devices = [mig(A100_SHAPES[p], i, model=name) for i, p in enumerate(profiles)]
    return replace(a100(index, *devices), name=name)


# --------------------------------------------------------------- (a) long names keep the suffix

LONG_60_SANITISED = "NVIDIA-Extremely-Long-Experimental-Accelerator-Model-1234567"


@pytest.mark.parametrize(
    ("case", "gpus", "strategy", "sharing", "key", "expected"),
    [
        # 60 + "-SHARED" = 67 > 63: the model keeps 63 - 7 = 56 characters.
        (
            "full GPU shared",
            [make_gpu(0, name=LONG_60)],
            "none",
            shared("nvidia.com/gpu"),
            "gpu.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerator-Model-123-SHARED",
        ),
        # 60 + "-MIG-1g.5gb" (11) = 71: the model keeps 52, then its trailing '-' goes.
        (
            "single 1g.5gb",
            [long_a100(0, "1g.5gb", "1g.5gb")],
            "single",
            None,
            "gpu.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerator-Model-MIG-1g.5gb",
        ),
        (
            "single 1g.5gb shared",
            [long_a100(0, "1g.5gb")],
            "single",
            shared("nvidia.com/gpu"),
            "gpu.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerato-MIG-1g.5gb-SHARED",
        ),
        (
            "single 1g.5gb+me",
            [long_a100(0, "1g.5gb+me")],
            "single",
            None,
            "gpu.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerator-Mo-MIG-1g.5gb.me",
        ),
        (
            "mixed 3g.20gb",
            [long_a100(0, "3g.20gb")],
            "mixed",
            None,
            "mig-3g.20gb.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerator-Mode-MIG-3g.20gb",
        ),
        (
            "mixed 7g.40gb shared",
            [long_a100(0, "7g.40gb")],
            "mixed",
            shared("nvidia.com/mig-7g.40gb"),
            "mig-7g.40gb.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerat-MIG-7g.40gb-SHARED",
        ),
        (
            "single invalid (two profiles)",
            [long_a100(0, "1g.5gb", "2g.10gb")],
            "single",
            None,
            "gpu.product",
            "NVIDIA-Extremely-Long-Experimental-Accelerator-Mode-MIG-INVALID",
        ),
        # Short enough: untouched, exactly the reference's value.
        (
            "fits",
            [long_a100(0, "1g.5gb", name="NVIDIA A100-SXM4-40GB")],
            "single",
            shared("nvidia.com/gpu"),
            "gpu.product",
            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED",
        ),
    ],
)
def test_a_long_product_keeps_its_suffix(
    case: str, gpus: list, strategy: str, sharing: Sharing | None, key: str, expected: str
) -> None:
    labels = build_labels(
        make_facts(gpus), LabelOptions(mig_strategy=strategy, sharing=sharing)
    ).labels
    assert labels[f"{P}{key}"] == expected, case
    assert len(expected) <= 63


def test_shortening_is_deterministic_and_only_cuts_the_model() -> None:
    facts = make_facts([long_a100(0, "1g.5gb")])
    options = LabelOptions(mig_strategy="single")
    first = build_labels(facts, options).labels[f"{P}gpu.product"]
    assert all(build_labels(facts, options).labels[f"{P}gpu.product"] == first for _ in range(5))
    assert LONG_60_SANITISED.startswith(first.removesuffix("-MIG-1g.5gb"))


# ------------------------------------------------------ (b) a name that sanitises to nothing


@pytest.mark.parametrize(
    ("name", "strategy", "sharing", "expected"),
    [
        ("(((", "none", None, {"gpu.product": "unknown"}),
        ("✓✓✓", "none", shared("nvidia.com/gpu"), {"gpu.product": "unknown-SHARED"}),
        ("-- !! --", "single", None, {"gpu.product": "unknown-MIG-1g.5gb"}),
        ("()", "mixed", None, {"mig-1g.5gb.product": "unknown-MIG-1g.5gb"}),
    ],
)
def test_a_name_that_sanitises_to_nothing_gives_the_fallback(
    name: str, strategy: str, sharing: Sharing | None, expected: dict[str, str]
) -> None:
    gpus = [long_a100(0, "1g.5gb", name=name)] if strategy != "none" else [make_gpu(0, name=name)]
    labels = build_labels(
        make_facts(gpus), LabelOptions(mig_strategy=strategy, sharing=sharing)
    ).labels
    assert {k.removeprefix(P): v for k, v in labels.items() if k.removeprefix(P) in expected} == (
        expected
    )


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        # Two models, one of them nameless: its count key is gpu.count.unknown.
        (["(((", "NVIDIA L4"], {"gpu.count.unknown": "1", "gpu.count.NVIDIA-L4": "1"}),
        # Both nameless: one key, the counts add up.
        (["(((", "✓"], {"gpu.count.unknown": "2"}),
        # A 60-character model: the key's name part (at most 63) keeps 53 of them.
        (
            [LONG_60, "NVIDIA L4"],
            {
                "gpu.count.NVIDIA-Extremely-Long-Experimental-Accelerator-Model": "1",
                "gpu.count.NVIDIA-L4": "1",
            },
        ),
    ],
)
def test_per_model_count_keys_are_never_empty_or_too_long(
    names: list[str], expected: dict[str, str]
) -> None:
    gpus = [make_gpu(i, name=n) for i, n in enumerate(names)]
    labels = build_labels(make_facts(gpus), LabelOptions()).labels
    counts = {k.removeprefix(P): v for k, v in labels.items() if k.startswith(f"{P}gpu.count.")}
    assert counts == expected


# ------------------------------------------------------------- (c) driver versions by parts


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("550.107.02", ("550", "107", "02")),
        ("535.54", ("535", "54", "")),
        ("550.54.15.1", None),
        ("550.1.2.3.4", None),
        ("550", None),
    ],
)
def test_driver_version_labels_only_for_x_y_or_x_y_z(
    driver: str, expected: tuple[str, str, str] | None
) -> None:
    label_set = build_labels(make_facts(driver_version=driver), LabelOptions())
    labels = label_set.labels
    driver_labels = {k: v for k, v in labels.items() if k.startswith(f"{P}cuda.driver")}
    if expected is None:
        assert driver_labels == {}
        withheld = {k: v for k, v in label_set.withheld if k.startswith(f"{P}cuda.driver")}
        assert withheld == dict.fromkeys(
            DRIVER_VERSION_KEYS, f"driver version {driver!r} does not match the format X.Y[.Z]"
        )
        # Everything else is still labelled.
        assert labels[f"{P}gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels[f"{P}cuda.runtime-version.full"] == "12.4"
    else:
        major, minor, revision = expected
        assert driver_labels == {
            f"{P}cuda.driver-version.major": major,
            f"{P}cuda.driver-version.minor": minor,
            f"{P}cuda.driver-version.revision": revision,
            f"{P}cuda.driver-version.full": driver,
            f"{P}cuda.driver.major": major,
            f"{P}cuda.driver.minor": minor,
            f"{P}cuda.driver.rev": revision,
        }
        assert not [k for k, _ in label_set.withheld if k.startswith(f"{P}cuda.driver")]
