"""The SBOM that scripts/build-image.sh writes beside each architecture's image (issue 27,
supply chain).

Each must be CycloneDX, name gfd as the application it describes, and list exactly gfd's
runtime packages: requirements/image.lock less what the Dockerfile uninstalls
(UNUSED_PACKAGES), each at its locked version with its PyPI package URL; and it must
agree with the distributions the built image actually holds.
Skipped, with the reason, where no engine, no built image or no SBOM is available.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest
from packaging.utils import canonicalize_name

import gfd
from tests.deploy.container_engine import BuiltImage
from tests.deploy.manifests import REPO_ROOT
from tests.deploy.test_lock import locked

pytestmark = pytest.mark.slow


def removed_by_the_dockerfile() -> set[str]:
    text = (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")
    match = re.search(r'^ARG UNUSED_PACKAGES="([^"]*)"', text, re.MULTILINE)
    assert match, "the Dockerfile no longer names the packages it uninstalls"
    return {canonicalize_name(name) for name in match.group(1).replace("\\", " ").split()}


@pytest.fixture
def sbom(image: BuiltImage) -> dict[str, Any]:  # the image must be there too
    path = image.beside(".cdx.json")
    if not path.is_file():
        reason = f"no SBOM at {path}; scripts/build-image.sh writes it with the image"
        if os.environ.get("GFD_REQUIRE_IMAGE", "") not in ("", "0"):
            pytest.fail(f"GFD_REQUIRE_IMAGE is set but {reason}", pytrace=False)
        pytest.skip(reason)
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def components(document: dict[str, Any]) -> dict[str, str]:
    return {canonicalize_name(c["name"]): c["version"] for c in document["components"]}


def test_sbom_is_cyclonedx_for_gfd(sbom: dict[str, Any]) -> None:
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["specVersion"] == "1.6"
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"], root["type"]) == ("gfd", gfd.__version__, "application")
    tools = {tool["name"] for tool in sbom["metadata"]["tools"]["components"]}
    assert "cyclonedx-py" in tools


def test_sbom_lists_the_runtime_packages_at_their_locked_versions(sbom: dict[str, Any]) -> None:
    removed = removed_by_the_dockerfile()
    lock = locked("image.lock")
    assert removed and removed <= set(lock), removed - set(lock)
    expected = {name: version for name, version in lock.items() if name not in removed}
    assert components(sbom) == expected
    for component in sbom["components"]:
        name = canonicalize_name(component["name"])
        assert component["purl"] == f"pkg:pypi/{name}@{component['version']}"


def test_sbom_matches_the_image(client: str, image: BuiltImage, sbom: dict[str, Any]) -> None:
    listing = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))\n"
    )
    result = subprocess.run(
        [client, *image.run("--network", "none", "--entrypoint", "/opt/gfd/bin/python"),
         image.tag, "-c", listing],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    in_image = {canonicalize_name(k): v for k, v in json.loads(result.stdout).items()}
    assert in_image.pop("gfd") == gfd.__version__
    assert components(sbom) == in_image
