"""Fixtures of the real-server suite: one control plane per session, gfd installed on it.

Every test here carries ``@pytest.mark.oracle("kube")``: without ``KUBEBUILDER_ASSETS`` it
skips with one line (a failure in CI). The control plane starts at the first test that asks
for it and stops at the end of the session; the closing summary names the server version.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.closing_lines import KUBE_APISERVER
from tests.controlplane import ControlPlane, ControlPlaneError
from tests.deploy.manifests import venv_kubectl
from tests.oracles import oracle_path, oracles_required
from tests.realkube.cluster import GfdCluster, GfdPod, deploy_objects

#: The server this process's control plane runs, once started (``tests/closing_lines.py``
#: names it in the closing line).
_served: dict[str, str] = {}

NFD_CRDS_ENV = "NFD_CRDS"


def _load_helms_engine_before_any_process_title() -> None:
    """Helm's engine (a Go library) takes its server-side field manager from the process's
    argv as it was when the library loaded. pytest-xdist writes each test's name over a
    worker's argv (its process title) from the first test on, and the API server refuses
    that name as a field manager (NUL padding and all). So where the real server runs,
    the library is loaded while this conftest is collected, before any title is written."""
    if os.environ.get("KUBEBUILDER_ASSETS"):
        from tests.helm.chart import helm_engine_loaded

        helm_engine_loaded()


_load_helms_engine_before_any_process_title()


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Tags each report with the server it ran against, for the closing line."""
    report = yield
    if "version" in _served:
        report.user_properties.append((KUBE_APISERVER, _served["version"]))
    return report
