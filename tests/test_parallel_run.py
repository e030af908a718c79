"""make test runs the suite in worker processes: the closing lines still count every case,
and the tests that share an expensive fixture stay on one worker (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.parallel import scheduling_scope

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/app/test_cli.py::test_x[a]", "tests/app/test_cli.py"),
        ("tests/conformance/test_differential.py::test_y[dgx-a100]", "tests/conformance/test_differential.py"),
        ("tests/realkube/test_helm.py::test_install", "tests/realkube"),
        ("tests/realkube/nfd/test_nfd.py::test_z", "tests/realkube"),
        ("tests/deploy/test_image.py::test_meta[arm64]", "tests/deploy/test_image.py::test_meta[arm64]"),
        ("tests/deploy/test_kustomize_render.py::test_tag[dra]", "tests/deploy/test_kustomize_render.py"),
    ],
)  # fmt: skip
def test_scheduling_scopes(nodeid: str, scope: str) -> None:
    assert scheduling_scope(nodeid) == scope


@pytest.mark.slow
def test_closing_lines_count_the_cases_of_every_worker() -> None:
    """Only reports reach the process that prints the summary: what the lines count must
    travel in them (tests/closing_lines.py)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_MOCK_NVML_DIR", "GFD_REQUIRE_ORACLES")
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
            "tests/hostile/test_http.py", "tests/helm/test_cleanup_hook.py",
            "tests/conformance/test_mock_nvml.py",
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.splitlines()
    assert "hostile corpus: 22 cases (http 22), 22 passed, 0 failed" in lines, done.stdout[-3000:]
    helm = [line for line in lines if line.startswith("helm chart suite: ")]
    assert len(helm) == 1 and "linted and rendered by Helm v4" in helm[0], helm
    assert helm[0].endswith(" cases passed, 0 failed") and " 0 cases passed" not in helm[0]
    (skipped,) = [line for line in lines if line.startswith("oracle suites skipped: ")]
    assert skipped.startswith("oracle suites skipped: mock-nvml: oracle mock-nvml (")
