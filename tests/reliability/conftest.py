"""The reliability suite's fixtures.

Its closing line (``reliability: N cases (api a, file b, ...), P passed, F failed``) is
counted by ``tests/closing_lines.py``, with the families of ``tests/suite_tally.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    FAST_RETRIES,
    NAMESPACE,
    NODE,
    POD,
    TOKEN,
    client,
    cluster,
    emulator,
    kubeconfig,
    stop,
)

HERE = Path(__file__).resolve().parent

#: Labels other writers own on the node; no fault may ever remove or change them.
FOREIGN_LABELS = {
    "kubernetes.io/hostname": NODE,
    "topology.kubernetes.io/zone": "zone-a",
    "example.com/rack": "r17",
}


# --------------------------------------------------------------------------- #
# The API server emulator: the shared fixtures, with other writers' labels on the node


@pytest.fixture
def node_labels() -> Mapping[str, str]:
    return FOREIGN_LABELS


@pytest.fixture
def request_timeout() -> float:
    return 0.5
