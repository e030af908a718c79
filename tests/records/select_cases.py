"""``gfd select``'s printed placement, judged by kube-scheduler v1.36 on generated label sets.

Issue 42 asks of ``gfd select``: the affinity it prints matches a node exactly when the
node meets the requirements. Each case here is one ``gfd select`` command line (its flags,
drawn over every requirement flag by a seeded generator, :data:`SEED`, plus a few written
by hand for the traps a reader names first) and two to four nodes whose labels sit on the
requirement's edges: a version equal to the bound, one below or above in its last part,
its major one off, a part missing, empty, written with a leading zero (a driver revision
``08`` against ``8`` and ``''``), or no integer at all; memory at the bound and one MiB
below (the H100's 81559 MiB against 80 GiB's 81920); a count at the bound and under it;
another family, product, interconnect, a MIG profile's count at 0, an unhealthy node.

The candidate pod carries the placement gfd prints for the flags (``gfd select --format
json``: the nodeSelector where one suffices, else the affinity), and asks for no resource,
or for one ``nvidia.com/gpu``, which every node offers eight of; no node is tainted, so
only the placement decides. The runner (``python -m tests.records.select_cases
--record``) starts a control plane with kube-scheduler (``tests/controlplane.py``) and
uses the runner of ``tests/records/scheduler_cases.py``: the API server is first asked
whether it takes the pod at all (a dry run: a placement it refuses reaches no scheduler,
and is recorded with its refusal), then for each node alone the scheduler is given that
node and the pod, and the record keeps whether it bound the pod or its ``Unschedulable``
message. CI (``tests/scheduling/test_select_record.py``) holds gfd's placement today to
the recorded one, and each verdict to ``gfd.scheduling.select.meets``; with
``KUBEBUILDER_ASSETS`` set, ``tests/realkube/test_scheduler_select.py`` runs the cases on a
live scheduler.

The record keeps, per case, the flags, the nodes' labels (and which edge each stands on),
whether the pod asked for a GPU, the printed placement, and the verdicts; its hash covers
the flags and the whole Node and Pod objects the scheduler was given, placement aside (the
placement is compared on its own: gfd printing another one means re-recording).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from gfd.cli import main, parse_command_line
from gfd.explain import requirements_of
from gfd.scheduling.select import (
    COUNT,
    FAMILY,
    HEALTH,
    INTERCONNECT,
    MEMORY,
    PRODUCT,
    VERSION_LABELS,
    Requirements,
    affinity_matches,
    meets,
)
from tests.records.scheduler_cases import (
    CANDIDATE,
    GPU,
    NAMESPACE,
    CaseRunner,
    RecordingError,
    SchedulingCase,
    available_of,
    gpus,
    node,
    pod,
)
from tests.records.store import RECORDS_DIR, Record, inputs_sha256, today, write_record

RECORD = RECORDS_DIR / "kube-scheduler" / "select.json"
RERECORD = "KUBEBUILDER_ASSETS=... python -m tests.records.select_cases --record"
#: The generator's seed: change it and every generated case changes (and must be re-recorded).
SEED = 20261207
GENERATED = 126
#: What was run, for the record's header (``--built`` overrides it).
BUILT = (
    "Kubernetes v1.36.2 kube-scheduler and kube-apiserver built from MicroShift 8e16b12f's "
    "vendored Kubernetes 98b35193, Go 1.26.6, no source change; etcd 3.4.23 (Debian)"
)
PRESENT = "nvidia.com/gpu.present"
MIG_STRATEGY = "nvidia.com/mig.strategy"
#: Each node offers this many ``nvidia.com/gpu``; a candidate asks for one or none.
OFFERED = "8"

# --- what a node carries ----------------------------------------------------------------

#: product: (family, memory MiB, compute capability), as gfd labels them.
PRODUCTS: dict[str, tuple[str, int, tuple[int, int]]] = {
    "NVIDIA-H100-80GB-HBM3": ("hopper", 81559, (9, 0)),
    "NVIDIA-H200": ("hopper", 143771, (9, 0)),
    "NVIDIA-A100-SXM4-40GB": ("ampere", 40960, (8, 0)),
    "NVIDIA-A100-SXM4-80GB": ("ampere", 81920, (8, 0)),
    "NVIDIA-L40S": ("ada-lovelace", 46068, (8, 9)),
    "NVIDIA-A10G": ("ampere", 23028, (8, 6)),
    "Tesla-T4": ("turing", 15360, (7, 5)),
    "Tesla-V100-SXM2-16GB": ("volta", 16384, (7, 0)),
    "NVIDIA-B200": ("blackwell", 183359, (10, 0)),
}
FAMILY_POOL = ("hopper", "ampere", "ada-lovelace", "blackwell", "turing", "volta")
INTERCONNECT_POOL = ("none", "single", "pcie", "nvlink-partial", "nvlink", "nvswitch")
MIG_PROFILES = ("1g.10gb", "3g.40gb", "2g.20gb", "1g.5gb+me")
#: ``--min-memory`` texts: decimal and binary units, fractions, and exact MiB.
MEMORY_TEXTS = (
    "80GB", "80GiB", "81559MiB", "81560MiB", "40960MiB", "40GB", "40GiB", "48GB", "45GiB",
    "24GiB", "16GB", "94GB", "141GB", "79.5GiB", "0.5TB", "15360MiB", "1MB",
)  # fmt: skip
#: Label values that are not integers (each a valid label value).
NOT_INTEGERS = ("x", "12a", "1.5", "v12", "rc1", "0x10")
#: Past int64: the scheduler's Gt and Lt cannot read it (Go's strconv.ParseInt fails).
OVERFLOW = "99999999999999999999"
#: Typical parts per version, most significant first (the generator's pools).
VERSION_POOLS: dict[str, tuple[tuple[int, ...], ...]] = {
    "cuda": ((11, 12, 13), tuple(range(10))),
    "compute": ((7, 8, 9, 10), tuple(range(10))),
    "driver": ((470, 525, 535, 550, 560, 570, 580), (0, 8, 54, 57, 65, 104, 129, 144, 163, 195), tuple(range(21))),
}  # fmt: skip
OPERATORS = (">=", ">", "==", "<=", "<")


def mib_of(text: str) -> int:
    """``--min-memory`` in MiB, rounded up, worked out here on its own (not gfd's)."""
    units = {"MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "MB": 10**6, "GB": 10**9, "TB": 10**12}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return math.ceil(Fraction(text[: -len(unit)]) * units[unit] / 2**20)
    raise ValueError(text)


@dataclass(frozen=True)
class Version:
    """One ``--cuda/--compute/--driver OPVERSION`` flag (``text`` as typed)."""

    what: str
    operator: str
    text: str

    @property
    def parts(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.text[len(self.operator) :].split("."))


@dataclass(frozen=True)
class Wanted:
    """The requirements as drawn (the generator's own model of them, not gfd's)."""

    families: tuple[str, ...] = ()
    products: tuple[str, ...] = ()
    memory: str | None = None
    min_count: int | None = None
    versions: tuple[Version, ...] = ()
    interconnects: tuple[str, ...] = ()
    mig: str | None = None
    healthy: bool = False

    def flags(self) -> list[str]:
        found: list[str] = []
        for family in self.families:
            found += ["--family", family]
        for product in self.products:
            found += ["--product", product]
        if self.memory is not None:
            found += ["--min-memory", self.memory]
        if self.min_count is not None:
            found += ["--min-count", str(self.min_count)]
        for version in self.versions:
            found += [f"--{version.what}", version.text]
        for interconnect in self.interconnects:
            found += ["--interconnect", interconnect]
        if self.mig is not None:
            found += ["--mig-profile", self.mig]
        if self.healthy:
            found.append("--healthy")
        return found


def mig_count_label(profile: str) -> str:
    """The count label gfd writes for a MIG profile (``+me`` spelt ``.me``, as in
    ``gfd/labels/mig.py``)."""
    return f"nvidia.com/mig-{profile.replace('+', '.')}.count"


# --- cases ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SelectCase:
    case_id: str
    about: str
    flags: tuple[str, ...]
    #: (node name, its labels, the edge it stands on), in order.
    nodes: tuple[tuple[str, dict[str, str], str], ...]
    gpu_request: bool = False
    #: The edge tags (for the corpus's coverage), per node.
    tags: tuple[frozenset[str], ...] = field(default=())

    @property
    def node_names(self) -> list[str]:
        return [name for name, _, _ in self.nodes]

    def labels(self) -> dict[str, dict[str, str]]:
        return {name: dict(labels) for name, labels, _ in self.nodes}

    def edges(self) -> dict[str, str]:
        return {name: edge for name, _, edge in self.nodes}

    def node_objects(self) -> list[dict[str, Any]]:
        found = []
        for name, labels, _ in self.nodes:
            obj = node(name, resources={GPU: OFFERED})
            obj["metadata"]["labels"] = dict(sorted(labels.items()))
            found.append(obj)
        return found

    def pod(self, placement: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The candidate: no resource, or one GPU; with ``placement`` in its spec."""
        candidate = pod(CANDIDATE, limits=gpus(1) if self.gpu_request else None)
        if placement is not None:
            candidate["spec"].update(copy.deepcopy(dict(placement)))
        return candidate

    def inputs(self) -> dict[str, Any]:
        """What the scheduler's answer rests on, placement aside."""
        return {"flags": list(self.flags), "nodes": self.node_objects(), "pod": self.pod()}

    @property
    def inputs_hash(self) -> str:
        return inputs_sha256(self.inputs())

    def scheduling_case(self, placement: Mapping[str, Any]) -> SchedulingCase:
        return SchedulingCase(
            self.case_id, self.about, tuple(self.node_objects()), self.pod(placement)
        )

    @property
    def command(self) -> str:
        return shlex.join(["gfd", "select", *self.flags])


def printed_placement(flags: Sequence[str]) -> dict[str, Any]:
    """The placement ``gfd select --format json FLAGS`` prints (gfd's own entry point)."""
    out = io.StringIO()
    code = main(["select", "--format", "json", *flags], env={}, stdout=out)
    if code != 0:
        raise ValueError(f"gfd select {shlex.join(flags)} exited {code}: {out.getvalue()}")
    placement: dict[str, Any] = json.loads(out.getvalue())["placement"]
    return placement


# --- the generator ------------------------------------------------------------------------


def _version_text(rng: random.Random, what: str) -> str:
    pools = VERSION_POOLS[what]
    count = rng.choice((1, 2, 2, 2) if len(pools) == 2 else (1, 2, 2, 3, 3, 3))
    parts = []
    for index in range(count):
        value = rng.choice(pools[index])
        if index > 0 and rng.random() < 0.15:
            value = 0
        parts.append(value)
    operator = rng.choice(OPERATORS)
    shown = [str(p) for p in parts]
    if what == "driver" and count == 3 and rng.random() < 0.4:
        shown[2] = f"{parts[2]:02d}"  # as drivers spell it: 535.104.05
    return operator + ".".join(shown)


def _draw_wanted(rng: random.Random) -> Wanted:
    selector_shaped = rng.random() < 0.15
    families: tuple[str, ...] = ()
    roll = rng.random()
    if roll < 0.3:
        families = (rng.choice(FAMILY_POOL),)
    elif roll < 0.42 and not selector_shaped:
        families = tuple(rng.sample(FAMILY_POOL, 2))
    products: tuple[str, ...] = ()
    roll = rng.random()
    if roll < 0.2:
        products = (rng.choice(sorted(PRODUCTS)),)
    elif roll < 0.27 and not selector_shaped:
        products = tuple(rng.sample(sorted(PRODUCTS), 2))
    memory = None
    if not selector_shaped and rng.random() < 0.35:
        memory = rng.choice(MEMORY_TEXTS)
    min_count = None
    if not selector_shaped and rng.random() < 0.3:
        min_count = rng.choice((1, 2, 4, 8))
    versions: list[Version] = []
    for _ in range(rng.choices((0, 1, 2, 3), weights=(25, 45, 22, 8))[0]):
        what = rng.choice(("cuda", "compute", "driver"))
        text = _version_text(rng, what)
        if selector_shaped:
            text = "==" + text.lstrip("<>=")
        operator = next(op for op in OPERATORS if text.startswith(op))
        versions.append(Version(what, operator, text))
    interconnects: tuple[str, ...] = ()
    if rng.random() < 0.2:
        interconnects = tuple(
            rng.sample(INTERCONNECT_POOL, 1 if selector_shaped else rng.choice((1, 2)))
        )
    mig = rng.choice(MIG_PROFILES) if not selector_shaped and rng.random() < 0.15 else None
    healthy = rng.random() < 0.3
    return Wanted(
        families, products, memory, min_count, tuple(versions), interconnects, mig, healthy
    )


def _holds(have: Sequence[int], version: Version) -> bool:
    """The generator's own reading (a prefix compared as a tuple), to aim the base node."""
    parts = version.parts
    prefix = tuple(have[: len(parts)])
    return {
        ">=": prefix >= parts,
        ">": prefix > parts,
        "==": prefix == parts,
        "<=": prefix <= parts,
        "<": prefix < parts,
    }[version.operator]


def _tail(rng: random.Random, what: str, given: Sequence[int]) -> tuple[int, ...]:
    pools = VERSION_POOLS[what]
    return tuple(given) + tuple(rng.choice(pools[i]) for i in range(len(given), len(pools)))


def _near(rng: random.Random, version: Version) -> tuple[int, ...]:
    """A full version around ``version``'s bound, on the side its operator asks for."""
    parts = list(version.parts)
    operator = version.operator
    if operator in (">", ">=") and (operator == ">" or rng.random() < 0.5):
        parts[-1] += rng.choice((1, 1, 2, 5))
    elif operator in ("<", "<=") and (operator == "<" or rng.random() < 0.5):
        nonzero = [i for i, p in enumerate(parts) if p > 0]
        if nonzero:
            index = nonzero[-1]
            parts[index] -= rng.choice(range(1, min(parts[index], 3) + 1))
            parts = parts[: index + 1]
    return _tail(rng, version.what, parts)


def _base_version(
    rng: random.Random, what: str, versions: Sequence[Version], compute: tuple[int, int]
) -> tuple[int, ...]:
    mine = [v for v in versions if v.what == what]
    if what == "compute" and not mine:
        return compute
    candidates = [_near(rng, v) for v in mine for _ in range(4)]
    candidates += [_tail(rng, what, ()) for _ in range(30)]
    for candidate in candidates:
        if all(_holds(candidate, v) for v in mine):
            return candidate
    return candidates[0]


def _set_version(labels: dict[str, str], what: str, parts: Sequence[int]) -> None:
    for key, part in zip(VERSION_LABELS[what], parts, strict=True):
        labels[key] = str(part)


def _base_node(rng: random.Random, wanted: Wanted) -> dict[str, str]:
    """A node meant to meet every requirement (by the generator's reading)."""
    product = rng.choice(wanted.products) if wanted.products else rng.choice(sorted(PRODUCTS))
    family, memory, compute = PRODUCTS[product]
    if wanted.families:
        family = rng.choice(wanted.families)
    if wanted.memory is not None:
        memory = max(memory, mib_of(wanted.memory))
    count = max(rng.choice((1, 2, 4, 8, 8)), wanted.min_count or 1)
    labels = {
        PRESENT: "true",
        FAMILY: family,
        PRODUCT: product,
        MEMORY: str(memory),
        COUNT: str(count),
        INTERCONNECT: rng.choice(wanted.interconnects or INTERCONNECT_POOL),
        HEALTH: "healthy" if wanted.healthy or rng.random() < 0.75 else "XidCritical",
    }
    for what in ("cuda", "compute", "driver"):
        _set_version(labels, what, _base_version(rng, what, wanted.versions, compute))
    if wanted.mig is not None:
        labels[MIG_STRATEGY] = "mixed"
        labels[mig_count_label(wanted.mig)] = str(rng.choice((1, 2, 3, 7)))
    return labels


Edge = Callable[[random.Random, dict[str, str]], tuple[str, str]]


def _version_edges(version: Version) -> dict[str, Edge]:
    """Ways a node's version can sit on ``version``'s edge: each sets the labels and
    returns (tag, what it did)."""
    what, parts = version.what, version.parts
    keys = VERSION_LABELS[what]
    name = f"--{what} {version.text}"

    def put(labels: dict[str, str], full: Sequence[int]) -> str:
        _set_version(labels, what, full)
        return ".".join(str(p) for p in full)

    def equal(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        return "version equal", f"{name}: equal ({put(labels, _tail(rng, what, parts))})"

    def zeros(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        full = tuple(parts) + (0,) * (len(keys) - len(parts))
        return "version equal", f"{name}: equal, zeros after ({put(labels, full)})"

    def below(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        if parts[-1] == 0:
            return equal(rng, labels)
        full = _tail(rng, what, (*parts[:-1], parts[-1] - 1))
        return "version one below", f"{name}: last part one below ({put(labels, full)})"

    def above(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        full = _tail(rng, what, (*parts[:-1], parts[-1] + 1))
        return "version one above", f"{name}: last part one above ({put(labels, full)})"

    def major(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        step = rng.choice((-1, 1)) if parts[0] > 0 else 1
        full = _tail(rng, what, (parts[0] + step, *parts[1:]))
        return "major differs", f"{name}: major {step:+d} ({put(labels, full)})"

    def part_index(rng: random.Random) -> int:
        if len(keys) > 1 and rng.random() < 0.8:
            return rng.randrange(1, len(keys))
        return rng.randrange(len(keys))

    def missing(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        shown = put(labels, _tail(rng, what, parts))
        index = part_index(rng)
        del labels[keys[index]]
        return "label missing", f"{name}: {shown} without {keys[index]}"

    def empty(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        shown = put(labels, _tail(rng, what, parts))
        index = part_index(rng)
        labels[keys[index]] = ""
        return "label empty", f"{name}: {shown} with {keys[index]}=''"

    def leading_zero(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        shown = put(labels, _tail(rng, what, parts))
        index = part_index(rng)
        labels[keys[index]] = "0" + labels[keys[index]]
        return "leading zero", f"{name}: {shown} with {keys[index]}={labels[keys[index]]}"

    def not_integer(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        shown = put(labels, _tail(rng, what, parts))
        index = part_index(rng)
        labels[keys[index]] = rng.choice(NOT_INTEGERS)
        return "not an integer", f"{name}: {shown} with {keys[index]}={labels[keys[index]]}"

    edges: dict[str, Edge] = {
        "equal": equal,
        "zeros": zeros,
        "below": below,
        "above": above,
        "major": major,
        "missing": missing,
        "empty": empty,
        "leading zero": leading_zero,
        "not integer": not_integer,
    }
    if what == "driver" and len(parts) == 3:

        def revision(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
            put(labels, parts)
            form = rng.choice(("08", "8", ""))
            value = {"08": f"{parts[2]:02d}", "8": str(parts[2]), "": ""}[form]
            labels[keys[2]] = value
            return f"driver revision '{form}'", f"{name}: revision written {value!r}"

        edges["revision"] = revision
        edges["revision again"] = revision
    return edges


def _count_edges(least: int, flag: str) -> dict[str, Edge]:
    def at(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels[COUNT] = str(least)
        return "count at the bound", f"{flag}: gpu.count={least}"

    def under(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels[COUNT] = str(least - 1)
        return "count one below", f"{flag}: gpu.count={least - 1}"

    def odd(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice(("", f"0{least}", "x", "8.0"))
        labels[COUNT] = value
        return "not an integer" if value in (
            "x",
            "8.0",
        ) else "leading zero", f"{flag}: gpu.count={value!r}"

    def missing(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels.pop(COUNT, None)
        return "label missing", f"{flag}: no gpu.count"

    return {"at": at, "under": under, "odd": odd, "missing": missing}


def _memory_edges(text: str) -> dict[str, Edge]:
    bound = mib_of(text)
    flag = f"--min-memory {text} ({bound} MiB)"

    def at(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels[MEMORY] = str(bound)
        return "memory at the bound", f"{flag}: gpu.memory={bound}"

    def under(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels[MEMORY] = str(bound - 1)
        return "memory one below", f"{flag}: gpu.memory={bound - 1}"

    def h100(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice(("81559", "81920", "76294", "76293"))
        labels[MEMORY] = value
        return (
            "H100 memory",
            f"{flag}: gpu.memory={value} (81559: H100 80GB; 81920: 80GiB; 76294: 80GB)",
        )

    def odd(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice((f"0{bound}", "80GB", "", f"{bound}.5", OVERFLOW))
        labels[MEMORY] = value
        tag = {f"0{bound}": "leading zero", "": "label empty", OVERFLOW: "past int64"}.get(
            value, "not an integer"
        )
        return tag, f"{flag}: gpu.memory={value!r}"

    def missing(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels.pop(MEMORY, None)
        return "label missing", f"{flag}: no gpu.memory"

    return {"at": at, "at again": at, "under": under, "h100": h100, "odd": odd, "missing": missing}


def _string_edges(
    key: str, flag: str, wanted: Sequence[str], pool: Sequence[str]
) -> dict[str, Edge]:
    def other(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice([v for v in pool if v not in wanted])
        labels[key] = value
        return "another value", f"{flag}: {key}={value}"

    def each(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice(list(wanted))
        labels[key] = value
        return "a value asked for", f"{flag}: {key}={value}"

    def cased(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice(list(wanted))
        value = value.lower() if value != value.lower() else value.capitalize()
        labels[key] = value
        return "another value", f"{flag}: {key}={value} (case differs)"

    def missing(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels.pop(key, None)
        return "label missing", f"{flag}: no {key}"

    return {"other": other, "each": each, "cased": cased, "missing": missing}


def _mig_edges(profile: str) -> dict[str, Edge]:
    key = mig_count_label(profile)
    flag = f"--mig-profile {profile}"

    def zero(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels[key] = "0"
        return "mig count 0", f"{flag}: {key}=0"

    def other(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels.pop(key, None)
        another = rng.choice([p for p in MIG_PROFILES if p != profile])
        labels[mig_count_label(another)] = "7"
        return "label missing", f"{flag}: only {mig_count_label(another)}=7"

    def odd(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice(("x", "07", ""))
        labels[key] = value
        return "leading zero" if value == "07" else "not an integer", f"{flag}: {key}={value!r}"

    def one(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels[key] = "1"
        return "count at the bound", f"{flag}: {key}=1"

    return {"zero": zero, "other": other, "odd": odd, "one": one}


def _health_edges() -> dict[str, Edge]:
    def unhealthy(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        value = rng.choice(("XidCritical", "Healthy", "unhealthy"))
        labels[HEALTH] = value
        return "another value", f"--healthy: gpu.health={value}"

    def missing(rng: random.Random, labels: dict[str, str]) -> tuple[str, str]:
        labels.pop(HEALTH, None)
        return "label missing", "--healthy: no gpu.health"

    return {"unhealthy": unhealthy, "missing": missing}


def _edge_groups(wanted: Wanted) -> list[dict[str, Edge]]:
    """Per requirement, its edges; versions count thrice (they have the most)."""
    groups: list[dict[str, Edge]] = []
    for version in wanted.versions:
        groups += [_version_edges(version)] * 3
    if wanted.memory is not None:
        groups += [_memory_edges(wanted.memory)] * 2
    if wanted.min_count is not None:
        groups.append(_count_edges(wanted.min_count, f"--min-count {wanted.min_count}"))
    if wanted.families:
        groups.append(_string_edges(FAMILY, "--family", wanted.families, FAMILY_POOL))
    if wanted.products:
        groups.append(_string_edges(PRODUCT, "--product", wanted.products, sorted(PRODUCTS)))
    if wanted.interconnects:
        groups.append(
            _string_edges(INTERCONNECT, "--interconnect", wanted.interconnects, INTERCONNECT_POOL)
        )
    if wanted.mig is not None:
        groups.append(_mig_edges(wanted.mig))
    if wanted.healthy:
        groups.append(_health_edges())
    if not groups:
        groups.append(_count_edges(1, "no flag (any GPU)"))
    return groups


def _make_case(
    rng: random.Random, case_id: str, about: str, wanted: Wanted, node_count: int
) -> SelectCase:
    groups = _edge_groups(wanted)
    nodes: list[tuple[str, dict[str, str], str]] = []
    tags: list[frozenset[str]] = []
    for index in range(1, node_count + 1):
        labels = _base_node(rng, wanted)
        done: list[tuple[str, str]] = []
        if index == 1:
            done.append(("meant to meet", "meant to meet every requirement"))
        else:
            picked = [rng.choice(groups)]
            if len(groups) > 1 and rng.random() < 0.2:
                picked.append(rng.choice(groups))
            for group in picked:
                edge = group[rng.choice(sorted(group))]
                done.append(edge(rng, labels))
        nodes.append((f"n{index}", labels, "; ".join(text for _, text in done)))
        tags.append(frozenset(tag for tag, _ in done))
    return SelectCase(
        case_id,
        about,
        tuple(wanted.flags()),
        tuple(nodes),
        gpu_request=rng.random() < 0.5,
        tags=tuple(tags),
    )


def generated_cases(count: int = GENERATED, seed: int = SEED) -> list[SelectCase]:
    rng = random.Random(seed)
    found = []
    for number in range(1, count + 1):
        wanted = _draw_wanted(rng)
        found.append(
            _make_case(
                rng,
                f"gen-{number:03d}",
                f"generated (seed {seed}, draw {number})",
                wanted,
                rng.choice((2, 3, 3, 4)),
            )
        )
    return found


def _labelled(**extra: str) -> dict[str, str]:
    """An H100 node as gfd labels it, CUDA 12.8, driver 570.124.06, with ``extra`` keys
    (``cuda_major`` style names map to the labels) overriding."""
    labels = {
        PRESENT: "true",
        FAMILY: "hopper",
        PRODUCT: "NVIDIA-H100-80GB-HBM3",
        MEMORY: "81559",
        COUNT: "8",
        INTERCONNECT: "nvswitch",
        HEALTH: "healthy",
    }
    for what, parts in (("cuda", (12, 8)), ("compute", (9, 0)), ("driver", (570, 124, 6))):
        _set_version(labels, what, parts)
    for name, value in extra.items():
        what, _, part = name.partition("_")
        if what in VERSION_LABELS:
            index = ("major", "minor", "revision").index(part)
            key = VERSION_LABELS[what][index]
        else:
            key = {"memory": MEMORY, "count": COUNT, "product": PRODUCT, "family": FAMILY}[what]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return labels


def _written(
    case_id: str,
    about: str,
    flags: Sequence[str],
    nodes: Sequence[tuple[dict[str, str], str, set[str]]],
    gpu_request: bool = True,
) -> SelectCase:
    return SelectCase(
        case_id,
        about,
        tuple(flags),
        tuple((f"n{i}", labels, edge) for i, (labels, edge, _) in enumerate(nodes, 1)),
        gpu_request=gpu_request,
        tags=tuple(frozenset(tags) for _, _, tags in nodes),
    )


def written_cases() -> list[SelectCase]:
    """The traps a reader names first, each with its nodes written out."""
    return [
        _written(
            "no-flags",
            "gfd select with no flag: any node gfd labelled with a GPU",
            [],
            [
                (_labelled(), "8 GPUs", {"meant to meet"}),
                (_labelled(count="0"), "gpu.count=0", {"count one below"}),
                ({"kubernetes.io/os": "linux"}, "a CPU node: no gfd label", {"label missing"}),
            ],
            gpu_request=False,
        ),
        _written(
            "min-memory-80gib-h100",
            "80GiB is 81920 MiB: the H100 80GB (81559 MiB) falls short",
            ["--min-memory", "80GiB"],
            [
                (_labelled(), "H100 80GB: 81559 MiB", {"H100 memory"}),
                (
                    _labelled(memory="81920", product="NVIDIA-A100-SXM4-80GB", family="ampere"),
                    "A100 80GB: 81920 MiB",
                    {"memory at the bound"},
                ),
                (_labelled(memory="81919"), "81919 MiB", {"memory one below"}),
            ],
        ),
        _written(
            "min-memory-80gb-h100",
            "80GB is 76294 MiB (rounded up): the H100 80GB passes",
            ["--min-memory", "80GB"],
            [
                (_labelled(), "H100 80GB: 81559 MiB", {"H100 memory"}),
                (_labelled(memory="76294"), "76294 MiB", {"memory at the bound"}),
                (_labelled(memory="76293"), "76293 MiB", {"memory one below"}),
            ],
        ),
        _written(
            "compute-at-least-8.0",
            "--compute '>=8.0', Ampere or newer, as a user writes it",
            ["--compute", ">=8.0"],
            [
                (_labelled(), "9.0", {"version one above"}),
                (_labelled(compute_major="8", compute_minor="0"), "8.0", {"version equal"}),
                (_labelled(compute_major="7", compute_minor="5"), "7.5", {"major differs"}),
            ],
        ),
        _written(
            "cuda-at-least-12.0",
            "--cuda '>=12.0'",
            ["--cuda", ">=12.0", "--family", "hopper"],
            [
                (_labelled(), "12.8", {"version one above"}),
                (_labelled(cuda_minor="0"), "12.0", {"version equal"}),
                (_labelled(cuda_major="11", cuda_minor="8"), "11.8", {"major differs"}),
            ],
        ),
        _written(
            "driver-equal-revision-05",
            "--driver '==535.104.05' (the revision as NVIDIA writes it) on 535.104.05",
            ["--driver", "==535.104.05"],
            [
                (
                    _labelled(driver_major="535", driver_minor="104", driver_revision="05"),
                    "revision '05'",
                    {"driver revision '08'"},
                ),
                (
                    _labelled(driver_major="535", driver_minor="104", driver_revision="5"),
                    "revision '5'",
                    {"driver revision '8'"},
                ),
                (
                    _labelled(driver_major="535", driver_minor="104", driver_revision=""),
                    "revision ''",
                    {"driver revision ''"},
                ),
            ],
        ),
        _written(
            "driver-at-least-550.54.08",
            "--driver '>=550.54.08': the revision read as a number",
            ["--driver", ">=550.54.08", "--healthy"],
            [
                (
                    _labelled(driver_major="550", driver_minor="54", driver_revision="08"),
                    "550.54.08",
                    {"driver revision '08'"},
                ),
                (
                    _labelled(driver_major="550", driver_minor="54", driver_revision="8"),
                    "550.54.8",
                    {"driver revision '8'"},
                ),
                (
                    _labelled(driver_major="550", driver_minor="54", driver_revision="07"),
                    "550.54.07",
                    {"version one below"},
                ),
                (
                    _labelled(driver_major="550", driver_minor="54", driver_revision=""),
                    "550.54 (no revision)",
                    {"driver revision ''"},
                ),
            ],
        ),
        _written(
            "cuda-range",
            "--cuda '>=12.2' --cuda '<13': a range, two flags",
            ["--cuda", ">=12.2", "--cuda", "<13"],
            [
                (_labelled(cuda_minor="2"), "12.2", {"version equal"}),
                (_labelled(cuda_major="13", cuda_minor="0"), "13.0", {"version one above"}),
                (_labelled(cuda_minor="1"), "12.1", {"version one below"}),
            ],
        ),
        _written(
            "many-terms",
            "three version flags: their terms' product (2 x 3 x 2 = 12 OR'ed terms)",
            ["--cuda", ">=12.8", "--driver", ">=550.54.15", "--compute", ">=8.9"],
            [
                (_labelled(), "12.8, 570.124.6, 9.0", {"meant to meet"}),
                (
                    _labelled(
                        driver_major="550",
                        driver_minor="54",
                        driver_revision="15",
                        compute_major="8",
                        compute_minor="9",
                    ),
                    "550.54.15 and 8.9: every bound equal",
                    {"version equal"},
                ),
                (
                    _labelled(driver_major="550", driver_minor="54", driver_revision="14"),
                    "550.54.14",
                    {"version one below"},
                ),
                (
                    _labelled(cuda_minor="7", compute_minor="x"),
                    "12.7, compute minor 'x'",
                    {"not an integer"},
                ),
            ],
        ),
        _written(
            "memory-past-int64",
            "a gpu.memory past int64 (no gfd writes one): a number, but not one Gt reads",
            ["--min-memory", "80GB", "--min-count", "2"],
            [
                (_labelled(memory=OVERFLOW), f"gpu.memory={OVERFLOW}", {"past int64"}),
                (_labelled(count=OVERFLOW), f"gpu.count={OVERFLOW}", {"past int64"}),
                (_labelled(count="02"), "gpu.count=02", {"leading zero"}),
            ],
        ),
        _written(
            "selector-hopper-healthy",
            "--family hopper --healthy: a nodeSelector suffices",
            ["--family", "hopper", "--healthy", "--cuda", "==12.8"],
            [
                (_labelled(), "hopper, healthy, 12.8", {"meant to meet"}),
                (dict(_labelled(), **{HEALTH: "XidCritical"}), "unhealthy", {"another value"}),
                (_labelled(cuda_minor="08"), "cuda minor '08'", {"leading zero"}),
            ],
        ),
    ]


WRITTEN: tuple[SelectCase, ...] = tuple(written_cases())
CASES: tuple[SelectCase, ...] = WRITTEN + tuple(generated_cases())


def _check_unique() -> None:
    seen = Counter(c.case_id for c in CASES)
    duplicated = sorted(name for name, n in seen.items() if n > 1)
    if duplicated:
        raise AssertionError(f"case ids used twice: {duplicated}")


_check_unique()


# --- judging a verdict ------------------------------------------------------------------


def requirements(flags: list[str] | tuple[str, ...]) -> Requirements:
    """The requirements ``gfd select FLAGS`` works from, parsed as gfd parses them."""
    namespace, _ = parse_command_line(["select", *flags])
    return requirements_of(namespace)


def placement_matches(placement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """gfd's reading of a printed placement on a node with ``labels``."""
    if "nodeSelector" in placement:
        return all(labels.get(k) == v for k, v in placement["nodeSelector"].items())
    return affinity_matches(placement["affinity"]["nodeAffinity"], labels)


def first_error(message: str) -> str:
    """The API server's refusal, its first error only (a list names one per term)."""
    errors = message.count("Invalid value:")
    if errors <= 1:
        return message
    head, _, rest = message.partition("[")
    first = rest.split(", spec.", 1)[0]
    return f"{head}{first} (and {errors - 1} more such errors)"


def disagreements(case: SelectCase, recorded: Mapping[str, Any]) -> list[str]:
    """Each node where the scheduler's verdict is not ``meets``, said in full; or the
    API server's refusal of the pod (which then goes on no node, those that meet too)."""
    wanted = requirements(case.flags)
    shown = json.dumps(recorded["placement"], sort_keys=True)
    head = f"{case.command}\n  printed placement: {shown}"
    if "refused" in recorded:
        meeting = [n for n, labels in case.labels().items() if meets(wanted, labels)]
        refused = recorded["refused"]
        return [
            f"{head}\n  the API server refuses the pod (HTTP {refused['status']}, "
            f"{refused['reason']}): {first_error(refused['message'])}\n  so it goes on no "
            f"node; of {', '.join(case.node_names)}, meets() says "
            f"{', '.join(meeting) + ' meet' if meeting else 'none meets'} the requirements"
        ]
    found = []
    for name, labels in case.labels().items():
        verdict = recorded["per_node"][name]
        meant = meets(wanted, labels)
        if verdict["fits"] != meant:
            found.append(
                f"{head}\n  node {name} ({case.edges()[name]}): meets() says "
                f"{'meets' if meant else 'does not meet'}, kube-scheduler "
                f"{'bound the pod' if verdict['fits'] else 'did not: ' + verdict['message']}"
                f"\n  labels: {json.dumps(labels, sort_keys=True)}"
            )
    return found


# --- running the cases ----------------------------------------------------------------------


def refusal(runner: CaseRunner, candidate: Mapping[str, Any]) -> dict[str, Any] | None:
    """The API server's answer to a dry run of the candidate: None when it takes it."""
    status, answer = runner.admin.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        candidate,
        query={"dryRun": "All"},
        ok=tuple(range(400, 500)),
    )
    if status < 400:
        return None
    message = str(answer.get("message", "")) if isinstance(answer, Mapping) else str(answer)
    return {
        "status": status,
        "reason": answer.get("reason") if isinstance(answer, Mapping) else None,
        "message": message,
    }


def _placement_stored(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in ("nodeSelector", "affinity") if k in spec}


def run_case(
    runner: CaseRunner, case: SelectCase, placement: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The case on the runner's scheduler: the placement gfd prints now (or ``placement``),
    refused by the API server, or each node alone with the scheduler's verdict."""
    if placement is None:
        placement = printed_placement(case.flags)
    found: dict[str, Any] = {
        "inputs_sha256": case.inputs_hash,
        "about": case.about,
        "flags": list(case.flags),
        "gpu_request": case.gpu_request,
        "labels": case.labels(),
        "edges": case.edges(),
        "placement": copy.deepcopy(dict(placement)),
    }
    scheduling = case.scheduling_case(placement)
    refused = refusal(runner, scheduling.pod)
    if refused is not None:
        found["refused"] = refused
        return found
    per_node: dict[str, dict[str, Any]] = {}
    for name in scheduling.node_names:
        outcome = runner.attempt_on(scheduling, [name])
        if outcome.scheduled_to not in (None, name):
            raise RecordingError(
                f"{case.case_id}: bound to {outcome.scheduled_to}, which was not in the cluster"
            )
        if outcome.message is not None and available_of(outcome.message) != 1:
            raise RecordingError(
                f"{case.case_id}: the scheduler saw another node count: {outcome.message}"
            )
        if _placement_stored(outcome.stored_spec) != dict(placement):
            raise RecordingError(
                f"{case.case_id}: the server stored another placement: "
                f"{_placement_stored(outcome.stored_spec)}"
            )
        per_node[name] = {"fits": outcome.scheduled_to == name, "message": outcome.message}
    found["per_node"] = per_node
    return found


HOW = (
    "tests/records/select_cases.py on a control plane of tests/controlplane.py (etcd, "
    "kube-apiserver with its default admission plugins, kube-scheduler with its default "
    "profile, --v=4), through tests/records/scheduler_cases.py's CaseRunner. Per case: the "
    "placement `gfd select --format json FLAGS` printed (its nodeSelector, or its affinity), "
    "put in a pod (pause image, no resource, or limits nvidia.com/gpu: 1 where gpu_request); "
    "the API server asked to create it with dryRun=All (a refusal is kept as `refused`, and "
    "nothing is scheduled); else each node alone (labels as recorded, no taints, Ready, "
    "allocatable cpu 16, memory 64Gi, pods 110, nvidia.com/gpu 8) given to the scheduler, "
    "which has taken the node in (its log says so) before the pod is created. Verdict: "
    "spec.nodeName set (fits), or PodScheduled=False, reason Unschedulable, with its message."
)


def record(
    assets: Path,
    built: str,
    target: Path,
    *,
    progress: Callable[[str], None] = print,
) -> Record:
    """Run every case on a fresh control plane and write the record to ``target``."""
    from tests.controlplane import ControlPlane

    workdir = Path(tempfile.mkdtemp(prefix="gfd-select-record-"))
    plane = ControlPlane(assets, workdir)
    started = time.monotonic()
    try:
        plane.start()
        plane.start_scheduler(verbosity=4)
        runner = CaseRunner(plane.admin, plane.scheduler_log)
        runner.prepare()
        cases: dict[str, dict[str, Any]] = {}
        for number, case in enumerate(CASES, 1):
            cases[case.case_id] = run_case(runner, case)
            if number % 20 == 0:
                progress(f"{number}/{len(CASES)} cases, {time.monotonic() - started:.0f} s")
        elapsed = time.monotonic() - started
        server = plane.admin.get("/version")
        from tests.records.scheduler_cases import scheduler_version

        result = Record(
            program="kube-scheduler",
            version=server["gitVersion"],
            recorded=today(),
            cases=cases,
            notes={
                "built": built,
                "kube-scheduler --version": scheduler_version(assets),
                "kube-apiserver /version": {
                    k: server.get(k) for k in ("gitVersion", "gitCommit", "goVersion", "platform")
                },
                "how": HOW,
                "attempts": runner.attempt,
                "seconds": round(elapsed),
                "generator": {"seed": SEED, "cases": GENERATED, "written": len(WRITTEN)},
            },
        )
        write_record(target, result, case_per_line=True)
        return result
    except Exception:
        progress(plane.describe_failure())
        raise
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record",
        action="store_true",
        help="run every case on kube-scheduler and rewrite the record",
    )
    parser.add_argument(
        "--built",
        default=BUILT,
        help="with --record: what was run, kept as the record's provenance",
    )
    parser.add_argument(
        "--to",
        type=Path,
        default=RECORD,
        help="with --record: where to write (default: the record)",
    )
    args = parser.parse_args()
    if not args.record:
        for case in CASES:
            print(f"{case.case_id}: {case.command}")
        print(f"{len(CASES)} cases, {sum(len(c.nodes) for c in CASES)} nodes")
        return 0
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not assets or not (Path(assets) / "kube-scheduler").is_file():
        parser.error(
            "KUBEBUILDER_ASSETS must name a folder with kube-apiserver, etcd and kube-scheduler"
        )
    done = record(
        Path(assets),
        args.built,
        args.to,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(f"recorded {len(done.cases)} cases in {done.notes['seconds']} s to {args.to}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
