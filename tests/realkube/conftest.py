"""Fixtures of the real-server suite: one control plane per session, gfd installed on it.

Every test here carries ``@pytest.mark.oracle("kube")``: without ``KUBEBUILDER_ASSETS`` it
skips with one line (a failure in CI). The control plane starts at the first test that asks
for it and stops at the end of the session; the closing summary names the server version.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane, ControlPlaneError
from tests.deploy.manifests import venv_kubectl
from tests.oracles import oracle_path, oracles_required
from tests.realkube.cluster import GfdCluster, GfdPod, deploy_objects

#: What the closing summary reports: the server the suite ran against, and its cases.
_served: dict[str, str] = {}
_cases: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}

NFD_CRDS_ENV = "NFD_CRDS"


def nfd_crds() -> Path:
    """NFD's CRDs (NodeFeature), from the nfd oracle's environment."""
    oracle_path("nfd")
    value = os.environ.get(NFD_CRDS_ENV, "")
    if not value or not Path(value).is_file():
        pytest.fail(f"{NFD_CRDS_ENV} does not name NFD's CRD file (unpack.sh sets it)")
    return Path(value)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    assets = oracle_path("kube")
    crds = nfd_crds()
    if venv_kubectl() is None and oracles_required():
        # Rendering deploy/ would skip; in CI the real-server suite must not pass by skipping.
        pytest.fail("kubectl is not installed: cannot render deploy/ for the real server")
    objects = deploy_objects()
    workdir = Path(tempfile.mkdtemp(prefix="gfd-kube-"))
    plane = ControlPlane(assets, workdir)
    try:
        plane.start()
        GfdCluster(plane, workdir / "gfd").install(crds, objects)
    except ControlPlaneError as exc:
        plane.stop()
        pytest.fail(f"real control plane did not start: {exc}\n{plane.describe_failure()}")
    _served["version"] = plane.version
    yield plane
    plane.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[GfdCluster]:
    yield GfdCluster(control_plane, control_plane.workdir / "gfd")


@pytest.fixture
def node(kube: GfdCluster) -> str:
    """A fresh Node of this test's own."""
    return kube.node()


@pytest.fixture
def pod(kube: GfdCluster, node: str) -> GfdPod:
    """gfd's Pod on :func:`node`, with its pod-bound token."""
    return kube.gfd_pod(node)


@pytest.fixture(scope="session")
def garbage_collector(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with kube-controller-manager's garbage collector running."""
    control_plane.start_controller_manager()
    return control_plane


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith("tests/realkube/"):
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "failed" if report.failed else report.outcome
        _cases[outcome] = _cases.get(outcome, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    if "version" in _served:
        counts = ", ".join(f"{n} {what}" for what, n in _cases.items() if n)
        terminalreporter.write_line(
            f"real-server suite (tests/realkube): {sum(_cases.values())} cases ({counts}) "
            f"against kube-apiserver {_served['version']}"
        )
