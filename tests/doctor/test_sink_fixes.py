"""The doctor's fixes name the flag that changes the outcome, for every set of sinks.

``gfd doctor --patch-node`` without ``--no-output-file`` found NFD missing and suggested
"or label without NFD: --patch-node", the very flag it was given; the flag that changes
the outcome was ``--no-output-file`` (issue 44). Here every combination of the sinks
(:data:`gfd.app.sinks.SINK_KINDS`: stdout, the feature file, the node, NodeFeature; the
feature file off by ``--no-output-file`` or by ``--output-file -``) meets a node NFD never
labelled, and, where NodeFeature is the NFD sink, an API server without NFD's CRDs. Each
flag a fix names must change the settings (it is not already given), and the doctor run
again with the fix's flags added must no longer find that problem.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from gfd.app.sinks import SINK_KINDS
from gfd.cli import parse_command_line
from gfd.config import Settings, resolve_settings
from tests import host as test_hosts
from tests.doctor.conftest import Report, doctor
from tests.doctor.test_doctor_cluster import NFD_ANNOTATION
from tests.emulator import ApiServerEmulator, Fault
from tests.kube_fixtures import NAMESPACE, NODE, POD

#: How the feature file is configured: written, off by --no-output-file, or stdout.
FEATURE_FILE = {"on": [], "no-output-file": ["--no-output-file"], "stdout": ["-o", "-"]}
COMBINATIONS = [
    (feature_file, node, nodefeature, print_labels)
    for feature_file, node, nodefeature, print_labels in itertools.product(
        FEATURE_FILE, (False, True), (False, True), (False, True)
    )
]
#: A flag as a fix names it (``--patch-node``, ``--use-node-feature-api=false``).
FLAG = re.compile(r"--[a-z][a-z-]*(?:=[^\s;]+)?")
ALTERNATIVES = re.compile(r"(label without NFD|publish through NFD's feature file): ([^;]+)")


def ident(combination: tuple[str, bool, bool, bool]) -> str:
    feature_file, node, nodefeature, print_labels = combination
    on = [f"file:{feature_file}", *(["node"] if node else []), *(["nf"] if nodefeature else [])]
    return "+".join(on + (["print"] if print_labels else []))


def arguments(
    combination: tuple[str, bool, bool, bool], kubeconfig: Path, tmp_path: Path
) -> list[str]:
    feature_file, node, nodefeature, print_labels = combination
    args = ["--simulate", "dgx-h100", "--node-name", NODE, "--kubeconfig", str(kubeconfig)]
    args += FEATURE_FILE[feature_file] or ["-o", str(tmp_path / "features.d" / "gfd")]
    if node:
        args.append("--patch-node")
    if nodefeature:
        args += ["--use-node-feature-api", "--namespace", NAMESPACE, "--pod-name", POD]
    if print_labels:
        args.append("--print-labels")
    return args


def settings_of(args: list[str]) -> Settings:
    _, explicit = parse_command_line(args)
    return resolve_settings(explicit, {}, host=test_hosts.test_host())


def sinks_of(settings: Settings) -> set[str]:
    return {kind.name for kind in SINK_KINDS if kind.wanted(settings)}


def alternatives(fix: str) -> dict[str, list[str]]:
    """The flags of each alternative the fix names ("label without NFD: --patch-node ...")."""
    return {name: FLAG.findall(flags) for name, flags in ALTERNATIVES.findall(fix)}


def assert_fix_changes_the_outcome(
    report: Report, args: list[str], flags: list[str], problem: str
) -> Report:
    """Each flag is not already given, and the doctor run with them is rid of ``problem``."""
    before = settings_of(args)
    assert flags, report.fix("nfd")
    for flag in flags:
        assert settings_of([*args, flag]) != before, f"{flag} is already given: {args}"
    again = doctor([*args, *flags])
    assert again.code != 2, f"gfd refuses the fix's flags {flags} with {args}"
    assert problem not in again.message("nfd"), (flags, again.by_check["nfd"])
    return again


@pytest.mark.parametrize("combination", COMBINATIONS, ids=ident)
def test_nfd_never_labelled_the_node(
    emulator: ApiServerEmulator,
    kubeconfig: Path,
    cluster: dict[str, Any],
    tmp_path: Path,
    combination: tuple[str, bool, bool, bool],
) -> None:
    args = arguments(combination, kubeconfig, tmp_path)
    report = doctor(args)
    assert report.code != 2, f"gfd refuses {args}"
    through_nfd = sinks_of(settings_of(args)) & {"feature-file", "nodefeature"}
    if not through_nfd:
        assert report.state("nfd") == "ok", report.by_check["nfd"]
        return
    assert report.state("nfd") == "problem", report.by_check["nfd"]
    assert "NFD has never labelled" in report.message("nfd")
    (flags,) = alternatives(report.fix("nfd")).values()
    again = assert_fix_changes_the_outcome(report, args, flags, "NFD has never labelled")
    # Labelled without NFD: the node sink, and the nfd link not used.
    assert again.state("nfd") == "ok"
    assert "node" in sinks_of(settings_of([*args, *flags]))


#: NodeFeature the NFD sink the nfd link looks at: the feature file is not written.
WITHOUT_THE_FILE = [c for c in COMBINATIONS if c[2] and c[0] != "on"]


@pytest.mark.parametrize("combination", WITHOUT_THE_FILE, ids=ident)
def test_nodefeatures_not_served(
    emulator: ApiServerEmulator,
    kubeconfig: Path,
    cluster: dict[str, Any],
    tmp_path: Path,
    combination: tuple[str, bool, bool, bool],
) -> None:
    # NFD has labelled the node (an NFD before v0.14 reads only feature files) ...
    emulator.change_node_metadata(
        NODE,
        labels={"feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"},
        annotations={NFD_ANNOTATION: "cpu-model.vendor_id"},
    )
    # ... and the API server does not know NodeFeatures: 404 without the object's name.
    emulator.inject(Fault(status=404, method="GET", path_contains="/nodefeatures/", times=None))
    args = arguments(combination, kubeconfig, tmp_path)
    report = doctor(args)
    assert report.state("nfd") == "problem", report.by_check["nfd"]
    assert "does not serve NodeFeatures" in report.message("nfd")
    found = alternatives(report.fix("nfd"))
    assert set(found) == {"label without NFD", "publish through NFD's feature file"}
    for flags in found.values():
        assert_fix_changes_the_outcome(report, args, flags, "does not serve NodeFeatures")
    assert "feature-file" in sinks_of(
        settings_of([*args, *found["publish through NFD's feature file"]])
    )
