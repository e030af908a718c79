"""The one reviewed list of expected differences between the reference and gfd.

A difference between the two programs' outcomes on one case is either one label (a key
only one program emits, or a key both emit with different values) or the outcome itself
(one program labels the node, the other exits with an error). Every difference must match
an entry of :data:`EXPECTED_DIFFERENCES`, each with its reason (they are also listed in
``docs/compatibility.md``); anything else fails the case with a message naming the label.

Validity is judged here by Kubernetes' published label syntax (apimachinery's
``IsQualifiedName`` and ``IsValidLabelValue``: 63 characters, alphanumeric at both ends,
``-_.`` inside; a DNS-subdomain prefix of at most 253), written out independently of gfd's
own checker in ``gfd/labels/rules.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.conformance.reference import Outcome

PREFIX = "nvidia.com/"

#: gfd's interconnect labels, which the reference has no equivalent of (docs/labels.md).
GFD_TOPOLOGY_KEYS = frozenset(
    f"{PREFIX}gpu.{name}"
    for name in (
        "interconnect",
        "numa-nodes",
        "numa.max-gpus",
        "nvlink-domains",
        "nvlink.largest-domain",
        "nvlink.min-links",
        "pcie.worst",
    )
)
#: gfd's PCIe link labels (what the GPUs' links could reach), which the reference has no
#: equivalent of (docs/labels.md).
GFD_PCIE_LINK_KEYS = frozenset(f"{PREFIX}gpu.pcie.{name}" for name in ("generation", "width"))
#: Every label of gfd's own that a node with GPUs may carry beside the reference's.
GFD_OWN_KEYS = GFD_TOPOLOGY_KEYS | GFD_PCIE_LINK_KEYS
#: What the reference's per-model full-GPU labeler writes; with two models, the model
#: whose labeler ran last wins, at random, on every run (``internal/lm/nvml.go``).
FULL_GPU_MODEL_KEYS = frozenset(
    f"{PREFIX}gpu.{name}"
    for name in (
        "product",
        "count",
        "replicas",
        "sharing-strategy",
        "memory",
        "compute.major",
        "compute.minor",
        "family",
    )
)

_K8S_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_K8S_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_K8S_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def k8s_label_problem(key: str, value: str) -> str | None:
    """Why Kubernetes would reject the label ``key=value``, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _K8S_PREFIX.match(prefix)):
        return f"key {key!r}: invalid prefix"
    if not name or len(name) > 63 or not _K8S_NAME.match(name):
        return f"key {key!r}: invalid name (at most 63 characters, alphanumeric at both ends)"
    if len(value) > 63 or not _K8S_VALUE.match(value):
        return (
            f"value {value!r} of {key}: invalid (at most 63 characters, alphanumeric at both ends)"
        )
    return None


def invalid_labels(labels: Mapping[str, str]) -> list[str]:
    """The problems of every label Kubernetes would reject."""
    return [p for k, v in sorted(labels.items()) if (p := k8s_label_problem(k, v)) is not None]


@dataclass(frozen=True)
class LabelDifference:
    """One key on which the two programs disagree (None: that program did not emit it)."""

    key: str
    reference: str | None
    gfd: str | None

    def __str__(self) -> str:
        return f"{self.key}: reference {self.reference!r}, gfd {self.gfd!r}"


@dataclass(frozen=True)
class ExpectedDifference:
    """A reviewed difference: which cases (by tag), which labels, and why."""

    name: str
    reason: str
    #: The case tag it applies to; None: every case.
    tag: str | None
    #: Whether a label difference is this one (None for an outcome difference).
    matches: Callable[[LabelDifference], bool] | None
    #: An outcome difference: the reference exits with an error, gfd labels the node.
    reference_refuses: bool = False

    def applies(self, tags: frozenset[str]) -> bool:
        return self.tag is None or self.tag in tags


def _reference_invalid_gfd_valid(d: LabelDifference) -> bool:
    if d.reference is None or k8s_label_problem(d.key, d.reference) is None:
        return False
    return d.gfd is None or k8s_label_problem(d.key, d.gfd) is None


EXPECTED_DIFFERENCES: tuple[ExpectedDifference, ...] = (
    ExpectedDifference(
        name="gfd-topology-keys",
        reason="gfd adds interconnect labels (NVLink, PCIe, NUMA) the reference has no equivalent of",
        tag=None,
        matches=lambda d: d.key in GFD_TOPOLOGY_KEYS and d.reference is None,
    ),
    ExpectedDifference(
        name="gfd-pcie-link-keys",
        reason=(
            "gfd adds the generation and width the GPUs' PCIe links could reach, which the "
            "reference does not read"
        ),
        tag=None,
        matches=lambda d: d.key in GFD_PCIE_LINK_KEYS and d.reference is None,
    ),
    ExpectedDifference(
        name="mixed-models-flap",
        reason=(
            "with two GPU models the reference's full-GPU keys come from whichever model's "
            "labeler ran last, at random per run; gfd describes the model with the most GPUs "
            "(ties: lowest index) every time"
        ),
        tag="mixed-models",
        matches=lambda d: d.key in FULL_GPU_MODEL_KEYS and None not in (d.reference, d.gfd),
    ),
    ExpectedDifference(
        name="mixed-models-per-model-counts",
        reason="on a node with several models gfd adds gpu.heterogeneous and gpu.count.<product>",
        tag="mixed-models",
        matches=lambda d: (
            d.reference is None
            and (d.key == f"{PREFIX}gpu.heterogeneous" or d.key.startswith(f"{PREFIX}gpu.count."))
        ),
    ),
    ExpectedDifference(
        name="reference-invalid-label",
        reason=(
            "the reference does not enforce Kubernetes' label syntax (63 characters, "
            "alphanumeric ends), so the API server or NFD would drop its label; gfd emits a "
            "valid one (a long product keeps its -MIG-<profile>/-SHARED suffix) or none"
        ),
        tag=None,
        matches=_reference_invalid_gfd_valid,
    ),
    ExpectedDifference(
        name="empty-product-fallback",
        reason=(
            "a product name that sanitises to nothing gives the reference an empty "
            "gpu.product; gfd publishes the defined fallback 'unknown'"
        ),
        tag="empty-name",
        matches=lambda d: d.reference == "" and d.gfd == "unknown",
    ),
    ExpectedDifference(
        name="vgpu-present-from-nvml",
        reason=(
            "the reference reads vGPU only from the full PCI config space, which an "
            "unprivileged pod cannot read, and then publishes no vGPU label; gfd publishes "
            "vgpu.present=false where NVML's virtualization mode says no GPU is a vGPU guest "
            "(bare metal or passthrough), the reference's answer with privileges"
        ),
        tag="vgpu-from-nvml",
        matches=lambda d: (
            d.key == f"{PREFIX}vgpu.present" and d.reference is None and d.gfd == "false"
        ),
    ),
    ExpectedDifference(
        name="driver-version-not-x-y-z",
        reason=(
            "the reference refuses a driver version that is not X.Y[.Z] and exits without "
            "labels; gfd withholds only the cuda.driver* labels and labels the rest"
        ),
        tag="driver-not-x-y-z",
        matches=None,
        reference_refuses=True,
    ),
)


#: The entries of gfd's own labels: every labelled case has them, so a case that needs
#: only these counts as identical.
GFD_OWN_ENTRIES = frozenset({"gfd-topology-keys", "gfd-pcie-link-keys"})


def label_differences(
    reference: Mapping[str, str], gfd: Mapping[str, str]
) -> list[LabelDifference]:
    """Every key on which the two maps disagree, sorted."""
    return [
        LabelDifference(key, reference.get(key), gfd.get(key))
        for key in sorted(set(reference) | set(gfd))
        if reference.get(key) != gfd.get(key)
    ]


def explain(difference: LabelDifference, tags: frozenset[str]) -> ExpectedDifference | None:
    """The reviewed entry that covers ``difference`` on a case with ``tags``, or None."""
    for expected in EXPECTED_DIFFERENCES:
        if expected.matches is not None and expected.applies(tags) and expected.matches(difference):
            return expected
    return None


def refusal_entry(tags: frozenset[str]) -> ExpectedDifference | None:
    """The reviewed entry that covers the reference refusing a case gfd labels, or None."""
    for expected in EXPECTED_DIFFERENCES:
        if expected.reference_refuses and expected.applies(tags):
            return expected
    return None


@dataclass(frozen=True)
class Verdict:
    """How one case compared: the reviewed entries it needed, and what nothing explains."""

    #: Reviewed entries used, besides gfd's own keys (which every labelled case has).
    expected: tuple[str, ...]
    unexpected: tuple[str, ...]

    @property
    def identical(self) -> bool:
        return not self.expected and not self.unexpected


def compare(
    reference: tuple[bool, Mapping[str, str] | None, str],
    gfd: tuple[bool, Mapping[str, str] | None, str],
    tags: frozenset[str],
) -> Verdict:
    """Compare two outcomes, each (labelled, labels, what happened), on a case with ``tags``."""
    ref_ok, ref_labels, ref_what = reference
    gfd_ok, gfd_labels, gfd_what = gfd
    if not ref_ok and not gfd_ok:
        return Verdict(expected=(), unexpected=())
    if not gfd_ok:
        return Verdict((), (f"gfd refused ({gfd_what}) where the reference labelled",))
    assert gfd_labels is not None
    unexpected = [f"gfd emitted an invalid label: {p}" for p in invalid_labels(gfd_labels)]
    if not ref_ok:
        entry = refusal_entry(tags)
        if entry is None:
            unexpected.append(f"the reference refused ({ref_what}) where gfd labelled")
            return Verdict((), tuple(unexpected))
        return Verdict((entry.name,), tuple(unexpected))
    assert ref_labels is not None
    used: dict[str, None] = {}
    for difference in label_differences(ref_labels, gfd_labels):
        entry = explain(difference, tags)
        if entry is None:
            unexpected.append(str(difference))
        elif entry.name not in GFD_OWN_ENTRIES:
            used[entry.name] = None
    return Verdict(tuple(used), tuple(unexpected))


def judge_case(
    case_id: str,
    tags: frozenset[str],
    reference: Outcome,
    gfd: Outcome,
    source: str,
    record_property: Callable[[str, object], None],
) -> None:
    """Compare one case's two outcomes, carry the verdict to the closing line (``source``:
    where the reference's outcome came from), and fail on a difference no reviewed entry
    explains."""
    # Imported here: the closing lines import this module for their tally.
    from tests.closing_lines import REFERENCE_VERDICT

    verdict = compare(
        (reference.labelled, reference.labels, reference.describe()),
        (gfd.labelled, gfd.labels, gfd.describe()),
        tags,
    )
    record_property(REFERENCE_VERDICT, verdict_record(case_id, source, verdict))
    assert not verdict.unexpected, (
        f"{case_id}: differences no reviewed entry explains "
        "(tests/conformance/differences.py):\n  " + "\n  ".join(verdict.unexpected)
    )


def verdict_record(case_id: str, source: str, verdict: Verdict) -> dict[str, Any]:
    """One case's verdict as its report carries it to the closing line (plain data, as
    pytest-xdist sends reports between processes), under
    ``tests.closing_lines.REFERENCE_VERDICT``."""
    return {
        "case": case_id,
        "source": source,
        "expected": list(verdict.expected),
        "unexpected": list(verdict.unexpected),
    }


class Tally:
    """The cases compared in a run, for the closing line (``tests/closing_lines.py``)."""

    def __init__(self) -> None:
        self.verdicts: dict[str, Verdict] = {}
        #: Where the reference's outcomes came from (live, or which records), in order.
        self.sources: dict[str, None] = {}

    def record(self, entry: Mapping[str, Any]) -> None:
        """One case, as :func:`verdict_record` wrote it."""
        self.sources[entry["source"]] = None
        self.verdicts[entry["case"]] = Verdict(tuple(entry["expected"]), tuple(entry["unexpected"]))

    def summary(self) -> str | None:
        if not self.verdicts:
            return None
        verdicts = list(self.verdicts.values())
        identical = sum(v.identical for v in verdicts)
        expected = [v for v in verdicts if v.expected and not v.unexpected]
        unexpected = sum(bool(v.unexpected) for v in verdicts)
        by_entry: dict[str, int] = {}
        for verdict in expected:
            for name in verdict.expected:
                by_entry[name] = by_entry.get(name, 0) + 1
        entries = ", ".join(f"{name} {n}" for name, n in sorted(by_entry.items()))
        # The line says whether the reference ran or its record was replayed: a reader must
        # know which evidence the counts rest on.
        sources = f" (reference: {', '.join(self.sources)})" if self.sources else ""
        return (
            f"reference differential{sources}: {len(verdicts)} cases compared, {identical} identical "
            f"(gfd's topology keys aside), {len(expected)} with expected differences"
            f"{f' ({entries})' if entries else ''}, {unexpected} unexpected"
        )
