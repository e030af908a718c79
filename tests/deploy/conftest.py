"""Fixtures of the deploy suite: the container engine, and the built image of each
architecture (a test that takes ``image`` runs once per architecture)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from tests.deploy.container_engine import (
    AMD64,
    ARCHITECTURES,
    IMAGE_INDEX,
    BuiltImage,
    docker_client,
    engine_unavailable_reason,
    image_unavailable_reason,
)
from tests.kube_fixtures import tls_pair  # noqa: F401 - registered by import


def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail where ``.ci/run`` built the images (``GFD_REQUIRE_IMAGE``): there an
    image test must not pass by skipping."""
    if os.environ.get("GFD_REQUIRE_IMAGE", "") not in ("", "0"):
        pytest.fail(f"GFD_REQUIRE_IMAGE is set but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def client() -> str:
    """The docker client that reaches a daemon; skips without one (fails under
    ``GFD_REQUIRE_IMAGE``)."""
    reason = engine_unavailable_reason()
    if reason is not None:
        _unavailable(reason)
    found = docker_client()
    assert found is not None
    return found


def _checked(client: str, image: BuiltImage) -> BuiltImage:
    reason = image_unavailable_reason(client, image)
    if reason is not None:
        _unavailable(reason)
    return image


@pytest.fixture(scope="session", params=ARCHITECTURES, ids=lambda image: image.arch)
def image(request: pytest.FixtureRequest, client: str) -> BuiltImage:
    """Each architecture's built image in turn (the other architecture's under qemu)."""
    built: BuiltImage = request.param
    return _checked(client, built)


@pytest.fixture(scope="session")
def amd64_image(client: str) -> BuiltImage:
    """The amd64 image alone: for what only exists for amd64 (NVIDIA's real libraries)."""
    return _checked(client, AMD64)


@pytest.fixture(scope="session")
def image_index() -> Path:
    """The image index's OCI archive, as scripts/build-image.sh wrote it."""
    if not IMAGE_INDEX.is_file():
        _unavailable(f"no image index at {IMAGE_INDEX}; run scripts/build-image.sh first")
    return IMAGE_INDEX
