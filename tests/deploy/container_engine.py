"""Finding a usable container engine for the image tests, or the reason there is none."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import gfd

#: The tag scripts/build-image.sh gives by default; GFD_IMAGE overrides it.
DEFAULT_IMAGE = f"gfd:{gfd.__version__}"
#: The image the image tests run.
IMAGE = os.environ.get("GFD_IMAGE", DEFAULT_IMAGE)
#: Where the NVIDIA container toolkit mounts NVML in a Debian-based amd64 container.
TOOLKIT_NVML = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
#: Where the feature-file component mounts the node's features.d.
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
#: ``docker run`` as the pod runs the image: read-only root, /tmp in memory (the pod's
#: emptyDir), no capabilities, no privilege escalation. The network is each test's choice.
LOCKED_DOWN_RUN = (
    "run", "--rm", "--read-only", "--tmpfs", "/tmp:rw,size=8m",
    "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
)  # fmt: skip


def docker_client() -> str | None:
    """Debian's client when installed (another docker on PATH may want buildx), else PATH."""
    configured = os.environ.get("DOCKER")
    if configured:
        return configured
    if Path("/usr/bin/docker").exists():
        return "/usr/bin/docker"
    return shutil.which("docker")


def unavailable_reason(image: str) -> str | None:
    """Why ``image`` cannot be run here, or None when it can."""
    client = docker_client()
    if client is None:
        return "no container engine client (docker) is installed"
    try:
        info = subprocess.run(
            [client, "info"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{client} info failed: {error}"
    if info.returncode != 0:
        return f"{client} cannot reach a daemon: {info.stderr.strip()[:200]}"
    inspect = subprocess.run(
        [client, "image", "inspect", image], capture_output=True, text=True, timeout=20, check=False
    )
    if inspect.returncode != 0:
        return f"image {image} is not built; run scripts/build-image.sh (make image) first"
    return None
