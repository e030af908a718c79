"""The comparison itself: what the reviewed list lets through, and what fails and how.

No oracle is needed: synthetic outcomes, so that the differential suite is known to fail
on a difference nobody reviewed.
"""

from __future__ import annotations

import pytest

from tests.conformance.differences import Verdict, compare, k8s_label_problem

P = "nvidia.com/"
BASE = {f"{P}gpu.product": "NVIDIA-H100-80GB-HBM3", f"{P}gpu.count": "8"}
NONE: frozenset[str] = frozenset()


def labelled(labels: dict[str, str]) -> tuple[bool, dict[str, str], str]:
    return (True, labels, f"{len(labels)} labels")


REFUSED = (False, None, "exit 1: error")


@pytest.mark.parametrize(
    ("reference", "gfd", "tags", "expected"),
    [
        (labelled(BASE), labelled(BASE), NONE, Verdict((), ())),
        # gfd's topology keys are additive and never count as a difference.
        (labelled(BASE), labelled({**BASE, f"{P}gpu.interconnect": "nvswitch"}), NONE, Verdict((), ())),
        (REFUSED, REFUSED, NONE, Verdict((), ())),
        (
            labelled(BASE),
            labelled({**BASE, f"{P}gpu.product": "NVIDIA-H100"}),
            NONE,
            Verdict((), (f"{P}gpu.product: reference 'NVIDIA-H100-80GB-HBM3', gfd 'NVIDIA-H100'",)),
        ),
        (
            labelled(BASE),
            labelled({**BASE, f"{P}gpu.product": "NVIDIA-H100"}),
            frozenset({"mixed-models"}),
            Verdict(("mixed-models-flap",), ()),
        ),
        # The flap entry covers only the per-model keys, never a missing one.
        (
            labelled({**BASE, f"{P}mig.capable": "true"}),
            labelled(BASE),
            frozenset({"mixed-models"}),
            Verdict((), (f"{P}mig.capable: reference 'true', gfd None",)),
        ),
        (
            labelled({f"{P}gpu.product": "x" * 64}),
            labelled({f"{P}gpu.product": "x" * 63}),
            NONE,
            Verdict(("reference-invalid-label",), ()),
        ),
        (
            labelled({f"{P}gpu.product": ""}),
            labelled({f"{P}gpu.product": "unknown"}),
            NONE,
            Verdict((), (f"{P}gpu.product: reference '', gfd 'unknown'",)),
        ),
        (
            labelled({f"{P}gpu.product": ""}),
            labelled({f"{P}gpu.product": "unknown"}),
            frozenset({"empty-name"}),
            Verdict(("empty-product-fallback",), ()),
        ),
        # vgpu.present from NVML: only false, only where the reference has none, only so tagged.
        (labelled(BASE), labelled({**BASE, f"{P}vgpu.present": "false"}), frozenset({"vgpu-from-nvml"}), Verdict(("vgpu-present-from-nvml",), ())),
        (labelled(BASE), labelled({**BASE, f"{P}vgpu.present": "false"}), NONE, Verdict((), (f"{P}vgpu.present: reference None, gfd 'false'",))),
        (labelled(BASE), labelled({**BASE, f"{P}vgpu.present": "true"}), frozenset({"vgpu-from-nvml"}), Verdict((), (f"{P}vgpu.present: reference None, gfd 'true'",))),
        (labelled({**BASE, f"{P}vgpu.present": "true"}), labelled({**BASE, f"{P}vgpu.present": "false"}), frozenset({"vgpu-from-nvml"}), Verdict((), (f"{P}vgpu.present: reference 'true', gfd 'false'",))),
        (REFUSED, labelled(BASE), NONE, Verdict((), ("the reference refused (exit 1: error) where gfd labelled",))),
        (REFUSED, labelled(BASE), frozenset({"driver-not-x-y-z"}), Verdict(("driver-version-not-x-y-z",), ())),
        (labelled(BASE), REFUSED, NONE, Verdict((), ("gfd refused (exit 1: error) where the reference labelled",))),
    ],
)  # fmt: skip
def test_compare(
    reference: tuple[bool, dict[str, str] | None, str],
    gfd: tuple[bool, dict[str, str] | None, str],
    tags: frozenset[str],
    expected: Verdict,
) -> None:
    assert compare(reference, gfd, tags) == expected


def test_an_invalid_gfd_label_fails_even_when_the_reference_has_it_too() -> None:
    bad = {f"{P}gpu.product": "-SHARED"}
    verdict = compare(labelled(bad), labelled(bad), NONE)
    assert verdict.unexpected == (
        f"gfd emitted an invalid label: value '-SHARED' of {P}gpu.product: invalid "
        "(at most 63 characters, alphanumeric at both ends)",
    )


@pytest.mark.parametrize(
    ("key", "value", "valid"),
    [
        # Kubernetes' published examples and limits (labels and selectors docs).
        (f"{P}gpu.product", "NVIDIA-H100-80GB-HBM3", True),
        (f"{P}gpu.sharing-strategy", "", True),
        (f"{P}gpu.product", "a" * 63, True),
        (f"{P}gpu.product", "a" * 64, False),
        (f"{P}gpu.product", "-SHARED", False),
        (f"{P}gpu.product", "x.", False),
        (f"{P}gpu.count.", "1", False),
        (f"{P}gpu.count.{'a' * 54}", "1", False),
        (f"{P}gpu.count.{'a' * 53}", "1", True),
        ("Nvidia.com/x", "1", False),
    ],
)
def test_kubernetes_label_syntax(key: str, value: str, valid: bool) -> None:
    assert (k8s_label_problem(key, value) is None) == valid
