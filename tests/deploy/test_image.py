"""The built images run for real, each architecture's (arm64 under qemu-user-static):
skipped (with the reason) where no container engine or no built image is available.
Build them with PLATFORMS=linux/amd64,linux/arm64 scripts/build-image.sh.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.deploy.container_engine import BuiltImage

pytestmark = pytest.mark.slow


def run_locked_down(
    client: str, image: BuiltImage, *args: str, entrypoint: str | None = None,
    options: tuple[str, ...] = (),
) -> str:  # fmt: skip
    """Run the image as the pod runs it: read-only root, /tmp in memory (the pod's
    emptyDir), no capabilities, no escalation, no network."""
    command = [client, *image.run("--network", "none", *options)]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    result = subprocess.run(
        [*command, image.tag, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{' '.join(args)} failed in {image.tag}:\n{result.stderr}"
    return result.stdout


def test_simulated_dgx_h100_labels(client: str, image: BuiltImage) -> None:
    out = run_locked_down(client, image, "--simulate", "dgx-h100", "labels")
    labels = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"


def test_reference_command_path_works(client: str, image: BuiltImage) -> None:
    out = run_locked_down(
        client, image, "--simulate", "dgx-h100", "labels",
        entrypoint="/usr/bin/gpu-feature-discovery",
    )  # fmt: skip
    assert "nvidia.com/gpu.count=8" in out


def test_image_metadata(client: str, image: BuiltImage) -> None:
    result = subprocess.run(
        [client, "image", "inspect", image.tag],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    inspected = json.loads(result.stdout)[0]
    assert (inspected["Os"], inspected["Architecture"]) == ("linux", image.arch)
    config = inspected["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["gfd"]
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in config["Env"]


def test_no_build_tools_or_pip_in_the_image(client: str, image: BuiltImage) -> None:
    out = run_locked_down(
        client, image,
        "-c",
        "for t in gcc cc make pip pip3 apt-get; do command -v $t || true; done;"
        " ls /opt/gfd/bin /opt/gfd/lib/python3.11/site-packages"
        " | grep -E '^(pip|setuptools)' || true",
        entrypoint="/bin/sh",
    )  # fmt: skip
    # apt went too (the Dockerfile purges it from the runtime's root filesystem).
    assert out.split() == []
