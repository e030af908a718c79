"""The image index: one reference that serves linux/amd64 and linux/arm64, as every image a
GPU fleet pulls does (NVIDIA's GFD, NFD, the DRA driver), since GB200 and GH200 nodes are
arm64 and the rest amd64.

``scripts/build-image.sh`` writes it with Debian's buildah as an OCI archive beside the
per-architecture images. Here it is read as the OCI image layout specification defines it
(``index.json``, then content-addressed blobs, each checked against its digest), so the
test does not take buildah's word for what it wrote); then each platform's manifest is
picked from it, as a node's runtime picks its own, and its config and layers are handed
unchanged to ``docker load``: the image loaded must have the very layers of the image
built for that architecture, and its one-shot must label a simulated DGX H100 (arm64
under qemu-user-static). Skopeo would do the taking out, but as root it keeps a cache in
``/var/lib/containers``, which the suite's host guard forbids. Skipped with the
reason where no index or engine is here; required where ``.ci/run`` built the images
(``GFD_REQUIRE_IMAGE``).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.container_engine import IMAGE, BuiltImage

pytestmark = pytest.mark.slow

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def _read(archive: tarfile.TarFile, descriptor: dict[str, Any]) -> bytes:
    """The blob a descriptor points at, its size and digest checked."""
    algorithm, _, encoded = descriptor["digest"].partition(":")
    assert algorithm == "sha256", descriptor
    member = archive.extractfile(f"blobs/sha256/{encoded}")
    assert member is not None, f"blob {descriptor['digest']} is missing from the archive"
    data = member.read()
    assert len(data) == descriptor["size"], descriptor
    assert hashlib.sha256(data).hexdigest() == encoded, descriptor
    return data


def _blob(archive: tarfile.TarFile, descriptor: dict[str, Any]) -> Any:
    """The JSON a descriptor points at, checked as :func:`_read` does."""
    return json.loads(_read(archive, descriptor))


def _platform_manifests(index_path: Path) -> dict[str, dict[str, Any]]:
    """Each platform of the index ("linux/arm64") to its image manifest and config."""
    with tarfile.open(index_path) as archive:
        layout = archive.extractfile("oci-layout")
        assert layout is not None
        assert json.loads(layout.read())["imageLayoutVersion"] == "1.0.0"
        top = archive.extractfile("index.json")
        assert top is not None
        entries = json.loads(top.read())["manifests"]
        # One entry: the image index, under the image's tag.
        assert len(entries) == 1, entries
        (entry,) = entries
        assert entry["mediaType"] == OCI_INDEX
        assert entry["annotations"][REF_NAME] == IMAGE.rpartition(":")[2]
        image_index = _blob(archive, entry)
        assert image_index["schemaVersion"] == 2
        found = {}
        for descriptor in image_index["manifests"]:
            assert descriptor["mediaType"] == OCI_MANIFEST
            name = f"{descriptor['platform']['os']}/{descriptor['platform']['architecture']}"
            assert name not in found, f"{name} twice in the index"
            manifest = _blob(archive, descriptor)
            found[name] = {"manifest": manifest, "config": _blob(archive, manifest["config"])}
        return found


def _engine_archive(index_path: Path, platform: str, tag: str, into: Path) -> Path:
    """One platform of the index as ``docker load`` reads an image: its config and its
    layers, the blobs unchanged, and the engine's manifest naming them under ``tag``."""
    manifest = _platform_manifests(index_path)[platform]["manifest"]
    archive_path = into / f"{platform.replace('/', '-')}.tar"
    with tarfile.open(index_path) as source, tarfile.open(archive_path, "w") as target:

        def put(name: str, data: bytes) -> str:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            target.addfile(info, io.BytesIO(data))
            return name

        config = put("config.json", _read(source, manifest["config"]))
        layers = [
            put(f"layer-{number}.tar", _read(source, layer))
            for number, layer in enumerate(manifest["layers"])
        ]
        engine_manifest = [{"Config": config, "RepoTags": [tag], "Layers": layers}]
        put("manifest.json", json.dumps(engine_manifest).encode())
    return archive_path


def test_the_index_lists_linux_amd64_and_linux_arm64(image_index: Path) -> None:
    platforms = _platform_manifests(image_index)
    assert sorted(platforms) == ["linux/amd64", "linux/arm64"]
    for name, found in platforms.items():
        os_name, _, architecture = name.partition("/")
        # The image's own config agrees with the index's platform.
        assert (found["config"]["os"], found["config"]["architecture"]) == (os_name, architecture)
        assert found["config"]["config"]["Entrypoint"], name


def test_each_platform_of_the_index_is_the_image_built_for_it_and_runs_its_one_shot(
    image_index: Path, client: str, image: BuiltImage, tmp_path: Path
) -> None:
    taken = f"gfd-from-index:{image.arch}"
    archive = _engine_archive(image_index, image.platform, taken, tmp_path)
    subprocess.run(
        [client, "load", "--quiet", "--input", str(archive)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    try:

        def layers(reference: str) -> list[str]:
            inspect = subprocess.run(
                [client, "image", "inspect", "--format", "{{json .RootFS.Layers}}", reference],
                check=True, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            return list(json.loads(inspect.stdout))

        assert layers(taken) == layers(image.tag)
        result = subprocess.run(
            [client, *image.run("--network", "none"), taken,
             "--simulate", "dgx-h100", "--oneshot", "--no-timestamp", "--output-file", "-"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        labels = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == "8"
    finally:
        subprocess.run(
            [client, "image", "rm", "--force", taken], capture_output=True, timeout=60, check=False
        )
