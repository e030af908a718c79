"""The built image, run for real: skipped (with the reason) where no container engine
or no built image is available. Build it with scripts/build-image.sh (make image)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.deploy.container_engine import IMAGE, LOCKED_DOWN_RUN

pytestmark = pytest.mark.slow


def run_locked_down(client: str, *args: str, entrypoint: str | None = None) -> str:
    """Run the image as the pod runs it: read-only root, /tmp in memory (the pod's
    emptyDir), no capabilities, no escalation, no network."""
    command = [client, *LOCKED_DOWN_RUN, "--network", "none"]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    result = subprocess.run(
        [*command, IMAGE, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def test_simulated_dgx_h100_labels(client: str) -> None:
    out = run_locked_down(client, "--simulate", "dgx-h100", "labels")
    labels = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"


def test_reference_command_path_works(client: str) -> None:
    out = run_locked_down(
        client, "--simulate", "dgx-h100", "labels", entrypoint="/usr/bin/gpu-feature-discovery"
    )
    assert "nvidia.com/gpu.count=8" in out


def test_image_metadata(client: str) -> None:
    result = subprocess.run(
        [client, "image", "inspect", IMAGE], capture_output=True, text=True, timeout=30, check=True
    )
    config = json.loads(result.stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["gfd"]
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in config["Env"]


def test_no_build_tools_or_pip_in_the_image(client: str) -> None:
    out = run_locked_down(
        client,
        "-c",
        "for t in gcc cc make pip pip3 apt-get; do command -v $t || true; done;"
        " ls /opt/gfd/bin /opt/gfd/lib/python3.11/site-packages"
        " | grep -E '^(pip|setuptools)' || true",
        entrypoint="/bin/sh",
    )
    # apt went too (the Dockerfile purges it from the runtime's root filesystem).
    assert out.split() == []
