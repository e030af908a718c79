"""From requirements to the node affinity that matches exactly the nodes meeting them.

``nodeAffinity`` compares label values as strings (``In``, ``NotIn``) or as integers
(``Gt``, ``Lt``): there is no ``>=``, and no version order. A version requirement is
spelt over its parts' labels (``cuda.runtime-version.major`` and ``.minor``, say) as
OR'ed terms: ``>= 12.8`` is "major > 12", or "major = 12 and minor > 7". Terms are OR'ed
and conditions within a term AND'ed, so each term carries every other condition: two
version requirements make their terms' product. Memory is ``gpu.memory`` in MiB, and
"80 GB" is not a value it takes: a minimum is converted exactly (decimal GB and binary
GiB differ by 7 %) and the products it then includes or leaves out are listed.

Where every condition is one label equal to one value, a ``nodeSelector`` says the
same, and is what :func:`selector_for` returns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from itertools import product as cartesian
from typing import Any

from gfd.base.errors import ConfigError, echo
from gfd.base.frozen import frozen_dataclass
from gfd.scheduling.rules import expression_matches

PREFIX = "nvidia.com/"
FAMILY = f"{PREFIX}gpu.family"
PRODUCT = f"{PREFIX}gpu.product"
MEMORY = f"{PREFIX}gpu.memory"
COUNT = f"{PREFIX}gpu.count"
INTERCONNECT = f"{PREFIX}gpu.interconnect"
HEALTH = f"{PREFIX}gpu.health"
HEALTHY = "healthy"
#: A version's part labels, most significant first.
VERSION_LABELS: Mapping[str, tuple[str, ...]] = {
    "cuda": (f"{PREFIX}cuda.runtime-version.major", f"{PREFIX}cuda.runtime-version.minor"),
    "compute": (f"{PREFIX}gpu.compute.major", f"{PREFIX}gpu.compute.minor"),
    "driver": (
        f"{PREFIX}cuda.driver-version.major",
        f"{PREFIX}cuda.driver-version.minor",
        f"{PREFIX}cuda.driver-version.revision",
    ),
}
#: gfd's families (``gpu.family``, as NVIDIA's GFD names them).
FAMILIES = (
    "tesla", "fermi", "kepler", "maxwell", "pascal", "volta", "turing", "ampere",
    "ada-lovelace", "hopper", "blackwell", "rubin",
)  # fmt: skip
#: ``gpu.interconnect`` values (gfd.topology.model.INTERCONNECTS).
INTERCONNECTS = ("none", "single", "pcie", "nvlink-partial", "nvlink", "nvswitch")
OPERATORS = (">=", "<=", "==", ">", "<")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*(MiB|GiB|TiB|MB|GB|TB)$")
_MEMORY_UNITS = {
    "MiB": Fraction(2**20),
    "GiB": Fraction(2**30),
    "TiB": Fraction(2**40),
    "MB": Fraction(10**6),
    "GB": Fraction(10**9),
    "TB": Fraction(10**12),
}
_PROFILE = re.compile(r"^\d+g\.\d+gb([+.][a-z]+)*$")


@frozen_dataclass
class VersionRequirement:
    """``--cuda '>=12.8'``: which labels, the operator, and the version's parts."""

    what: str
    operator: str
    parts: tuple[int, ...]


@frozen_dataclass
class Requirements:
    """What a workload needs of a node, as ``gfd select`` takes it."""

    families: tuple[str, ...] = ()
    products: tuple[str, ...] = ()
    min_memory_mib: int | None = None
    min_memory_text: str = ""
    min_count: int | None = None
    versions: tuple[VersionRequirement, ...] = ()
    interconnects: tuple[str, ...] = ()
    mig_profile: str | None = None
    healthy: bool = False

    @property
    def resource(self) -> str:
        """The resource the pod requests: the MIG profile's, or a whole GPU."""
        return f"{PREFIX}mig-{self.mig_profile}" if self.mig_profile else f"{PREFIX}gpu"


def parse_version_requirement(what: str, text: str) -> VersionRequirement:
    """``>=12.8`` for ``--cuda`` (``--compute``, ``--driver``): an operator, then a
    version of at most as many parts as its labels."""
    flag = f"--{what}"
    stripped = text.replace(" ", "")
    operator = next((op for op in OPERATORS if stripped.startswith(op)), None)
    if operator is None:
        raise ConfigError(
            f"{flag} {echo(text)}: start with an operator, one of {', '.join(OPERATORS)} "
            f"(write {flag} '>=12.8')"
        )
    version = stripped[len(operator) :]
    labels = VERSION_LABELS[what]
    pieces = version.split(".")
    if (
        not version
        or len(pieces) > len(labels)
        or not all(p.isdigit() and len(p) <= 9 for p in pieces)
    ):
        raise ConfigError(
            f"{flag} {echo(text)}: the version must be 1 to {len(labels)} numbers joined "
            f"by dots (write {flag} '{operator}12.8')"
        )
    parts = [int(p) for p in pieces]
    if operator in (">=", "<"):
        # >=8.0 is >=8, <12.0 is <12: the same versions, and no bound below 0 to print.
        while len(parts) > 1 and parts[-1] == 0:
            parts.pop()
    if operator in (">=", "<") and parts == [0]:
        matches = "every version" if operator == ">=" else "no version"
        raise ConfigError(f"{flag} {echo(text)}: matches {matches}; drop it")
    return VersionRequirement(what, operator, tuple(parts))


def parse_memory(text: str) -> int:
    """``80GB`` → the least whole MiB that is at least that much (``gpu.memory`` is MiB)."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise ConfigError(
            f"--min-memory {echo(text)}: give a number and its unit, one of "
            f"{', '.join(_MEMORY_UNITS)} (write --min-memory 80GB; GB is 10^9 bytes, GiB 2^30)"
        )
    size = Fraction(match[1]) * _MEMORY_UNITS[match[2]]
    return math.ceil(size / _MEMORY_UNITS["MiB"])


def check_family(family: str) -> str:
    if family not in FAMILIES:
        raise ConfigError(f"--family {echo(family)}: unknown family (one of {', '.join(FAMILIES)})")
    return family


def check_interconnect(value: str) -> str:
    if value not in INTERCONNECTS:
        raise ConfigError(
            f"--interconnect {echo(value)}: unknown (one of {', '.join(INTERCONNECTS)})"
        )
    return value


def check_mig_profile(value: str) -> str:
    """A MIG profile as gfd and the device plugin name it: ``1g.5gb+me`` (NVML's) is
    ``1g.5gb.me`` in ``nvidia.com/mig-1g.5gb.me`` and its labels."""
    if not _PROFILE.match(value):
        raise ConfigError(
            f"--mig-profile {echo(value)}: not a MIG profile (write --mig-profile 1g.10gb)"
        )
    return value.replace("+", ".")


def _expression(key: str, operator: str, values: Sequence[object] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if operator not in ("Exists", "DoesNotExist"):
        found["values"] = [str(v) for v in values]
    return found


def _equal(key: str, value: int) -> list[dict[str, Any]]:
    """``key`` equal to ``value`` as a number: a label written ``05`` (a driver revision,
    as NVIDIA writes 535.104.05) is 5, which ``In [5]`` would not see."""
    if value == 0:
        # No label value starts with "-": "Lt 1" is 0 alone, and "Gt -1" is refused.
        return [_expression(key, "Lt", [1])]
    return [_expression(key, "Gt", [value - 1]), _expression(key, "Lt", [value + 1])]


def version_terms(requirement: VersionRequirement) -> list[list[dict[str, Any]]]:
    """The OR'ed alternatives (each a list of AND'ed expressions) that spell one version
    requirement over its part labels, comparing only the parts given (``==12`` is any
    12.x, ``>12`` is 13 and above), each part as a number. Trailing zeros of ``>=`` and
    ``<`` were dropped when it was read (``>=8.0`` is ``>=8``): every bound printed is a
    valid label value, never ``-1``."""
    labels = VERSION_LABELS[requirement.what]
    parts = requirement.parts
    operator = requirement.operator
    if operator == "==":
        return [[e for i, p in enumerate(parts) for e in _equal(labels[i], p)]]
    alternatives: list[list[dict[str, Any]]] = []
    for depth, part in enumerate(parts):
        prefix = [e for i in range(depth) for e in _equal(labels[i], parts[i])]
        last = depth == len(parts) - 1
        if operator in (">=", ">"):
            bound = part - 1 if (last and operator == ">=") else part
            alternatives.append([*prefix, _expression(labels[depth], "Gt", [bound])])
        else:
            bound = part + 1 if (last and operator == "<=") else part
            if bound > 0:
                alternatives.append([*prefix, _expression(labels[depth], "Lt", [bound])])
    return alternatives


def node_affinity(requirements: Requirements) -> dict[str, Any]:
    """The ``requiredDuringSchedulingIgnoredDuringExecution`` node affinity."""
    common: list[dict[str, Any]] = []
    if requirements.families:
        common.append(_expression(FAMILY, "In", requirements.families))
    if requirements.products:
        common.append(_expression(PRODUCT, "In", requirements.products))
    if requirements.min_memory_mib is not None:
        common.append(_expression(MEMORY, "Gt", [requirements.min_memory_mib - 1]))
    if requirements.min_count is not None:
        common.append(_expression(COUNT, "Gt", [requirements.min_count - 1]))
    if requirements.interconnects:
        common.append(_expression(INTERCONNECT, "In", requirements.interconnects))
    if requirements.mig_profile:
        common.append(_expression(f"{PREFIX}mig-{requirements.mig_profile}.count", "Gt", [0]))
    if requirements.healthy:
        common.append(_expression(HEALTH, "In", [HEALTHY]))
    per_version = []
    for version in requirements.versions:
        alternatives = version_terms(version)
        if not alternatives:
            shown = ".".join(str(p) for p in version.parts)
            raise ConfigError(f"--{version.what} '{version.operator}{shown}' matches no version")
        per_version.append(alternatives)
    terms = []
    for choice in cartesian(*per_version):
        # Each term its own copies: a manifest repeats them (no YAML anchors).
        expressions = [
            dict(e, **({"values": list(e["values"])} if "values" in e else {})) for e in common
        ]
        for alternative in choice:
            expressions += alternative
        terms.append({"matchExpressions": expressions})
    if not terms or not any(t["matchExpressions"] for t in terms):
        # Nothing asked but a GPU: any node gfd labelled with one.
        terms = [{"matchExpressions": [_expression(COUNT, "Gt", [0])]}]
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def selector_for(requirements: Requirements) -> dict[str, str] | None:
    """A ``nodeSelector`` that says the same, when every condition is one label equal to
    one value; else None."""
    affinity = node_affinity(requirements)
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    if len(terms) != 1:
        return None
    selector: dict[str, str] = {}
    for expression in terms[0]["matchExpressions"]:
        if expression["operator"] != "In" or len(expression["values"]) != 1:
            return None
        selector[expression["key"]] = expression["values"][0]
    return selector


def affinity_matches(affinity: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` meets ``affinity`` (the scheduler's rule)."""
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(
        term.get("matchExpressions")
        and all(expression_matches(e, labels) for e in term["matchExpressions"])
        for term in terms
    )


def meets(requirements: Requirements, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` meets the requirements, judged directly (versions
    compared as tuples): what the affinity must agree with."""

    def number(key: str) -> int | None:
        # As Go's strconv.ParseInt(value, 10, 64), which Gt and Lt use.
        value = labels.get(key, "")
        if not value.isdigit() or len(value) > 100 or int(value) > 2**63 - 1:
            return None
        return int(value)

    if requirements.families and labels.get(FAMILY) not in requirements.families:
        return False
    if requirements.products and labels.get(PRODUCT) not in requirements.products:
        return False
    if requirements.min_memory_mib is not None:
        memory = number(MEMORY)
        if memory is None or memory < requirements.min_memory_mib:
            return False
    least = requirements.min_count
    if least is None and requirements == Requirements():
        least = 1  # nothing asked but a GPU
    if least is not None:
        count = number(COUNT)
        if count is None or count < least:
            return False
    if requirements.interconnects and labels.get(INTERCONNECT) not in requirements.interconnects:
        return False
    if requirements.mig_profile:
        migs = number(f"{PREFIX}mig-{requirements.mig_profile}.count")
        if not migs:
            return False
    if requirements.healthy and labels.get(HEALTH) != HEALTHY:
        return False
    return all(_version_holds(version, number) for version in requirements.versions)


def _version_holds(version: VersionRequirement, number: Callable[[str], int | None]) -> bool:
    """The node's version against ``version``, part by part as versions compare: the first
    part that differs decides (a node whose later parts are unlabelled is decided there,
    as the affinity decides it); a part that must be read and is not a number fails."""
    keys = VERSION_LABELS[version.what]
    for index, want in enumerate(version.parts):
        have = number(keys[index])
        if have is None:
            return False
        if have != want:
            if version.operator == "==":
                return False
            return have > want if version.operator in (">=", ">") else have < want
    return version.operator in (">=", "==", "<=")
