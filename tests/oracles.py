"""Third-party oracles for tests: where they are, and what happens when one is missing.

An oracle is a real program or library written by another project (NVIDIA's real NVML,
NVIDIA's mock NVML, the reference GPU Feature Discovery, ...), prepared by
``../shared/oracles/unpack.sh``, which prints the environment variables named here. A test
that needs one carries ``@pytest.mark.oracle("<name>")`` and asks :func:`oracle_path` for it.

Without the variable (a developer's machine without ``../shared``), such a test skips with
one line naming the variable. With ``GFD_REQUIRE_ORACLES=1`` (set by ``.ci/run``) a missing
oracle is a failure: CI must never pass by skipping the suites that judge gfd against reality.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Set by ``.ci/run``: a missing oracle fails the test instead of skipping it.
REQUIRE_ENV = "GFD_REQUIRE_ORACLES"


#: The project's root; ``../shared`` beside it is where the oracles and reference facts live.
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Oracle:
    name: str
    env: str
    what: str
    #: Used when ``env`` is unset: a path relative to the project's root.
    default: str | None = None


ORACLES: dict[str, Oracle] = {
    o.name: o
    for o in (
        Oracle("real-nvml", "REAL_NVML_DIR", "NVIDIA's real libnvidia-ml.so of each driver branch"),
        Oracle("mock-nvml", "NVIDIA_MOCK_NVML_DIR", "NVIDIA's mock NVML (k8s-test-infra)"),
        Oracle("reference-gfd", "GFD_REFERENCE_BIN", "NVIDIA's gpu-feature-discovery"),
        Oracle("kube", "KUBEBUILDER_ASSETS", "kube-apiserver, etcd, kube-controller-manager"),
        Oracle("config-manager", "NVIDIA_CONFIG_MANAGER_BIN", "NVIDIA's config-manager"),
        Oracle("helm", "HELM_BIN", "Helm 3"),
        Oracle("nfd", "NFD_WORKER_BIN", "node-feature-discovery's worker and master"),
        Oracle(
            "nvml-exports",
            "GFD_NVML_EXPORTS_DIR",
            "the export lists (.dynsym) of NVIDIA's real NVML libraries",
            default="../shared/reference/nvml-exports",
        ),
    )
}


def oracles_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def _location(oracle: Oracle) -> Path | None:
    value = os.environ.get(oracle.env, "")
    if value:
        return Path(value)
    if oracle.default is not None:
        return (PROJECT_ROOT / oracle.default).resolve()
    return None


def missing_reason(name: str) -> str | None:
    """Why oracle ``name`` cannot be used here, or None when it can."""
    oracle = ORACLES[name]
    location = _location(oracle)
    if location is None:
        return f'{oracle.env} is unset (eval "$(../shared/oracles/unpack.sh DIR)" sets it)'
    if not location.exists():
        return f"{location} does not exist (set {oracle.env} to point elsewhere)"
    return None


def oracle_path(name: str) -> Path:
    """The path of oracle ``name``; skips (or, in CI, fails) the calling test when absent."""
    reason = missing_reason(name)
    if reason is not None:
        message = f"oracle {name} ({ORACLES[name].what}) missing: {reason}"
        if oracles_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    location = _location(ORACLES[name])
    assert location is not None
    return location
