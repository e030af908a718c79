"""Fixtures of the deploy suite: the container engine that runs the built image."""

from __future__ import annotations

import os

import pytest

from tests.deploy.container_engine import IMAGE, docker_client, unavailable_reason
from tests.kube_fixtures import tls_pair  # noqa: F401 - registered by import


@pytest.fixture(scope="session")
def client() -> str:
    """The docker client that can run :data:`IMAGE`; skips without one, and fails instead
    where ``.ci/run`` built the image (``GFD_REQUIRE_IMAGE``): there an image test must not
    pass by skipping."""
    reason = unavailable_reason(IMAGE)
    if reason is not None:
        if os.environ.get("GFD_REQUIRE_IMAGE", "") not in ("", "0"):
            pytest.fail(f"GFD_REQUIRE_IMAGE is set but {reason}", pytrace=False)
        pytest.skip(reason)
    found = docker_client()
    assert found is not None
    return found
