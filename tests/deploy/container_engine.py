"""The container engine and the built images the image tests run, one per architecture,
or the reason one cannot be run here.

``scripts/build-image.sh`` tags each platform's image ``IMAGE-ARCH`` (``gfd:0.1.0-amd64``,
``gfd:0.1.0-arm64``); an image of another architecture than this machine's runs under
qemu-user-static (binfmt), with ``--platform`` so the engine neither warns nor guesses.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import gfd

#: The tag scripts/build-image.sh gives by default; GFD_IMAGE overrides it.
DEFAULT_IMAGE = f"gfd:{gfd.__version__}"
#: The image the image tests run, before its architecture suffix.
IMAGE = os.environ.get("GFD_IMAGE", DEFAULT_IMAGE)
#: Where scripts/build-image.sh writes what it makes beside the images (its DIST_DIR).
DIST_DIR = Path(os.environ.get("GFD_DIST_DIR") or Path(__file__).resolve().parents[2] / "dist")
#: Where the feature-file component mounts the node's features.d.
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
#: ``docker run`` as the pod runs the image: read-only root, /tmp in memory (the pod's
#: emptyDir), no capabilities, no privilege escalation. The network is each test's choice.
LOCKED_DOWN_RUN = (
    "run", "--rm", "--read-only", "--tmpfs", "/tmp:rw,size=8m",
    "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
)  # fmt: skip


@dataclass(frozen=True)
class BuiltImage:
    """One architecture's image: its tag and the paths that depend on the architecture."""

    #: Docker's (and Debian's) name: amd64, arm64.
    arch: str
    #: Debian's multiarch directory name: x86_64-linux-gnu, aarch64-linux-gnu.
    multiarch: str

    @property
    def tag(self) -> str:
        return f"{IMAGE}-{self.arch}"

    @property
    def platform(self) -> str:
        return f"linux/{self.arch}"

    @property
    def toolkit_nvml(self) -> str:
        """Where the NVIDIA container toolkit mounts NVML in a Debian-based container."""
        return f"/usr/lib/{self.multiarch}/libnvidia-ml.so.1"

    @property
    def emulated(self) -> bool:
        """Whether it runs under qemu here (another architecture than this machine's)."""
        return self.multiarch.split("-")[0] != platform.machine()

    def beside(self, suffix: str) -> Path:
        """What scripts/build-image.sh wrote for this image: ``DIST_DIR/<tag, ':' and '/'
        as '_'><suffix>`` (``.cdx.json``: the SBOM; ``.test-deps``: the suite's packages)."""
        return DIST_DIR / (self.tag.replace(":", "_").replace("/", "_") + suffix)

    def run(self, *options: str) -> list[str]:
        """``docker run`` locked down as the pod runs it, for this platform, ``options``
        (mounts, environment, network) added; the image and its arguments go after."""
        return [*LOCKED_DOWN_RUN, "--platform", self.platform, *options]


#: The OCI archive of the image index scripts/build-image.sh writes: every platform built,
#: under IMAGE's tag (docs/container.md, "One reference for both architectures").
IMAGE_INDEX = DIST_DIR / (IMAGE.replace(":", "_").replace("/", "_") + ".oci.tar")


#: Every architecture the image is built for (scripts/build-image.sh PLATFORMS).
ARCHITECTURES = (
    BuiltImage("amd64", "x86_64-linux-gnu"),
    BuiltImage("arm64", "aarch64-linux-gnu"),
)
#: The architecture NVIDIA's real driver libraries of REAL_NVML_DIR are built for.
AMD64 = ARCHITECTURES[0]


def docker_client() -> str | None:
    """Debian's client when installed (another docker on PATH may want buildx), else PATH."""
    configured = os.environ.get("DOCKER")
    if configured:
        return configured
    if Path("/usr/bin/docker").exists():
        return "/usr/bin/docker"
    return shutil.which("docker")


def engine_unavailable_reason() -> str | None:
    """Why no container can be run here, or None when one can."""
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
    return None


def image_unavailable_reason(client: str, image: BuiltImage) -> str | None:
    """Why ``image`` cannot be run here, or None when it can."""
    inspect = subprocess.run(
        [client, "image", "inspect", "--format", "{{.Architecture}}", image.tag],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    if inspect.returncode != 0:
        return (
            f"image {image.tag} is not built; run PLATFORMS={image.platform}"
            " scripts/build-image.sh first"
        )
    recorded = inspect.stdout.strip()
    if recorded != image.arch:
        return f"image {image.tag} is recorded as {recorded}, not {image.arch}"
    if image.emulated:
        probe = subprocess.run(
            [client, "run", "--rm", "--platform", image.platform, "--network", "none",
             "--entrypoint", "/bin/true", image.tag],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if probe.returncode != 0:
            return (
                f"{image.tag} does not run here: register qemu-user-static with binfmt"
                f" (Debian: apt-get install qemu-user-static binfmt-support): {probe.stderr[:200]}"
            )
    return None
