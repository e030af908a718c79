"""The built images run for real, each architecture's (arm64 under qemu-user-static):
skipped (with the reason) where no container engine or no built image is available.
Build them with PLATFORMS=linux/amd64,linux/arm64 scripts/build-image.sh.

Besides the DGX H100 every image labels, the two arm64 machines gfd exists to serve are
labelled by both images, exactly as gfd labels them on this host: a GB200 NVL72 compute
tray (bundled profile ``gb200-nvl4``) and a GH200 Grace Hopper node
(``machines/gh200.yaml``, beside this file).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.deploy.container_engine import BuiltImage
from tests.reliability.agent_process import expected_labels, parse_label_lines

pytestmark = pytest.mark.slow

#: Where the GH200 machine is mounted in the container (read-only).
GH200 = Path(__file__).with_name("machines") / "gh200.yaml"


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


def test_simulated_gb200_tray_labels(client: str, image: BuiltImage) -> None:
    out = run_locked_down(client, image, "--simulate", "gb200-nvl4", "labels")
    labels = parse_label_lines(out)
    assert labels == expected_labels("gb200-nvl4")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.clique"] == "08b3d2dd-71c9-5ac2-bb10-098485248c10.32766"


def test_simulated_gh200_labels(client: str, image: BuiltImage) -> None:
    inside = "/run/gfd-machines/gh200.yaml"
    out = run_locked_down(
        client, image, "--simulate", inside, "labels", options=("-v", f"{GH200}:{inside}:ro")
    )
    labels = parse_label_lines(out)
    assert labels == expected_labels(GH200)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GH200-480GB"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/gpu.count"] == "1"


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


def test_binaries_are_of_the_image_architecture(client: str, image: BuiltImage) -> None:
    # The interpreter and both C parts, by their ELF machine field: an image tagged arm64
    # that holds amd64 code would run here too (natively) and pass everything else.
    script = (
        "import gfd.sim, gfd.topology._builder as b, sys\n"
        "for path in (sys.executable, b.__file__, str(gfd.sim.library_path())):\n"
        "    with open(path, 'rb') as f:\n"
        "        print(int.from_bytes(f.read(20)[18:20], 'little'))\n"
    )
    out = run_locked_down(client, image, "-c", script, entrypoint="/opt/gfd/bin/python")
    assert out.split() == [{"amd64": "62", "arm64": "183"}[image.arch]] * 3


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
