"""The bundled simulator profiles show the published matrices and interconnect labels.

These are the issue's "must show" cases, read from the same profile files that
``gfd --simulate <profile> topo`` serves through the simulated NVML.

The outputs of every bundled profile (labels, annotation, JSON, table), made the way
the agent and the CLI make them (the C path), are pinned byte for byte to the
pure-Python path, the reference the C code was written against.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from gfd.agent import derive_topology
from gfd.facts import NodeFacts
from gfd.labels.topology import topology_labels
from gfd.sim import BUNDLED_PROFILES, profile_path
from gfd.topology import (
    ANNOTATION_KEY,
    build_topology,
    render_topology,
    to_annotation,
    topology_input,
    topology_to_json,
)
from tests.facts_readback import load_facts
from tests.topology.conftest import c_encodes

if TYPE_CHECKING:
    from tests.topology.conftest import Build


def profile_facts(name: str) -> NodeFacts:
    return load_facts(profile_path(name), extra_keys=frozenset({"faults"}))


def grid(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def uniform(n: int, cell: str) -> list[list[str]]:
    return [["X" if a == b else cell for b in range(n)] for a in range(n)]


MUST_SHOW = {
    "dgx-a100": (uniform(8, "NV12"), "nvswitch"),
    "dgx-h100": (uniform(8, "NV18"), "nvswitch"),
    "hgx-h200": (uniform(8, "NV18"), "nvswitch"),
    # Two baseboards whose switches are joined by trunks: NV6 for every pair.
    "dgx2-v100": (uniform(16, "NV6"), "nvswitch"),
    "dgx1-v100": (
        grid("""
            X   NV1 NV1 NV2 NV2 SYS SYS SYS
            NV1 X   NV2 NV1 SYS NV2 SYS SYS
            NV1 NV2 X   NV2 SYS SYS NV1 SYS
            NV2 NV1 NV2 X   SYS SYS SYS NV1
            NV2 SYS SYS SYS X   NV1 NV1 NV2
            SYS NV2 SYS SYS NV1 X   NV2 NV1
            SYS SYS NV1 SYS NV1 NV2 X   NV2
            SYS SYS SYS NV1 NV2 NV1 NV2 X
        """),
        "nvlink-partial",
    ),
    "k80-pcie-tree": (
        grid("""
            X   PIX SYS SYS SYS SYS SYS SYS
            PIX X   SYS SYS SYS SYS SYS SYS
            SYS SYS X   PIX PHB PHB PHB PHB
            SYS SYS PIX X   PHB PHB PHB PHB
            SYS SYS PHB PHB X   PIX PXB PXB
            SYS SYS PHB PHB PIX X   PXB PXB
            SYS SYS PHB PHB PXB PXB X   PIX
            SYS SYS PHB PHB PXB PXB PIX X
        """),
        "pcie",
    ),
    "rtx4090x8": (uniform(8, "SYS"), "pcie"),
    "t4-single": ([["X"]], "single"),
}


@pytest.mark.parametrize("profile", sorted(MUST_SHOW))
def test_profile_shows_the_published_matrix(build: Build, profile: str) -> None:
    matrix, interconnect = MUST_SHOW[profile]
    topology = build(profile_facts(profile))
    assert topology.matrix() == matrix
    assert topology_labels(topology)["nvidia.com/gpu.interconnect"] == interconnect


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_every_bundled_profile_builds_the_same_in_c_and_python(profile: str) -> None:
    facts = profile_facts(profile)
    assert build_topology(facts, implementation="c") == build_topology(
        facts, implementation="python"
    )


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_every_bundled_profile_outputs_byte_for_byte_what_the_python_path_does(
    profile: str,
) -> None:
    facts = profile_facts(profile)
    assert c_encodes(facts), "the C encoder must encode the profile itself"
    assert topology_input(facts) == topology_input(facts, implementation="python")
    python = build_topology(facts, implementation="python")
    # The agent's labels and annotation, in the order it publishes them.
    derived = derive_topology(facts)
    labels = topology_labels(python)
    assert list(derived.labels.items()) == list(labels.items())
    assert derived.annotations == {ANNOTATION_KEY: to_annotation(python, implementation="python")}
    # What `gfd topo --format json` and `gfd facts` print, and the table.
    c = build_topology(facts)
    assert json.dumps(topology_to_json(c), indent=2, sort_keys=True) == json.dumps(
        topology_to_json(python, implementation="python"), indent=2, sort_keys=True
    )
    for fmt in ("table", "json"):
        assert render_topology(c, facts, fmt=fmt) == render_topology(
            python, facts, fmt=fmt, implementation="python"
        )
