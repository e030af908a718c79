"""``make chart`` (scripts/render_chart.py): the chart as plain manifests, without helm.

Judged by Helm's engine itself, as the other chart tests are (:func:`load_chart`): the
script's objects are exactly those Helm renders for the same values (its hooks aside), in
Helm's install order by kind; values files merge as Helm merges ``-f`` files, ``--set``
wins over them; bad values are one line and exit status 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.manifests import REPO_ROOT
from tests.helm.chart import MATRIX, Manifest, is_hook, load_chart

SCRIPT = REPO_ROOT / "scripts" / "render_chart.py"
# Helm's InstallOrder (helm.sh/helm/v4 pkg/release/util/kind_sorter.go) for the kinds the
# chart renders; the admission policies' kinds are not in it and come last, by name.
KIND_ORDER = [
    "ServiceAccount",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "ServiceMonitor",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


def run_script(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )


def rendered_objects(stdout: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(stdout) if doc is not None]


def without_hooks(objects: list[Manifest]) -> list[Manifest]:
    return [obj for obj in objects if not is_hook(obj)]


def _key(obj: Manifest) -> str:
    return json.dumps(obj, sort_keys=True)


def _values_file(tmp_path: Path, name: str, values: Any) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", ["standalone", "nfd", "node-feature-api", "all-sinks"])
def test_the_script_renders_what_helm_renders_for_the_values(tmp_path: Path, name: str) -> None:
    helm = load_chart()
    done = run_script("--values", _values_file(tmp_path, name, MATRIX[name]))
    assert done.returncode == 0, done.stderr
    objects = rendered_objects(done.stdout)
    everything = helm.template(MATRIX[name])
    expected = without_hooks(everything)
    assert sorted(map(_key, objects)) == sorted(map(_key, expected))
    # The uninstall's cleanup Job (a hook, with the node sink) is left out.
    assert ("Job" in {obj["kind"] for obj in everything}) == (name in ("standalone", "all-sinks"))
    assert "Job" not in {obj["kind"] for obj in objects}
    kinds = [obj["kind"] for obj in objects]
    assert kinds == sorted(kinds, key=KIND_ORDER.index)
    sources = [line for line in done.stdout.splitlines() if line.startswith("# Source: ")]
    assert len(sources) == len(objects)
    assert all(line.startswith("# Source: gfd/templates/") for line in sources)


def test_values_files_merge_as_helm_merges_them_and_set_wins(tmp_path: Path) -> None:
    first = {"sinks": {"node": {"enabled": False}, "featureFile": {"enabled": True}}}
    second = {"sinks": {"featureFile": {"hostPath": "/var/lib/nfd/features.d"}}}
    done = run_script(
        "--values",
        _values_file(tmp_path, "first", first),
        "--values",
        _values_file(tmp_path, "second", second),
        "--set",
        "migStrategy=mixed",
        "--release",
        "gpu-labels",
        "--namespace",
        "gpus",
    )
    assert done.returncode == 0, done.stderr
    merged = {
        "sinks": {
            "node": {"enabled": False},
            "featureFile": {"enabled": True, "hostPath": "/var/lib/nfd/features.d"},
        },
        "migStrategy": "mixed",
    }
    expected = without_hooks(load_chart().template(merged, release="gpu-labels", namespace="gpus"))
    assert sorted(map(_key, rendered_objects(done.stdout))) == sorted(map(_key, expected))


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            ["--set", "migStrategy=bogus"],
            "values refused by the chart's schema: values don't meet the specifications of "
            "the schema(s) in the following chart(s): gfd: at '/migStrategy':",
        ),
        (
            ["--values", "/nonexistent/values.yaml"],
            "values file /nonexistent/values.yaml: cannot read",
        ),
        (["--release", "Not_A_Name"], "--release Not_A_Name:"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(arguments: list[str], expected: str) -> None:
    load_chart()  # the engine, or this test skips (fails in CI) as every chart test does
    done = run_script(*arguments)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"render_chart: {expected}"), line


def test_make_chart_passes_values_set_release_and_namespace_on() -> None:
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-n",
            "chart",
            "VALUES=a.yaml b.yaml",
            "SET=x=1",
            "RELEASE=r",
            "NAMESPACE=n",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.replace("\\\n", " ").splitlines()
    (command,) = [line for line in lines if "render_chart.py" in line]
    assert command.split()[1:] == [
        "scripts/render_chart.py",
        *("--values", "a.yaml", "--values", "b.yaml", "--set", "x=1"),
        *("--release", "r", "--namespace", "n"),
    ]
