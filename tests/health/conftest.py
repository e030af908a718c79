"""Fixtures: the API server emulator with gfd's cluster objects in it, and a client, for
the health outputs that write to the Node (the taint) and read from the API (the DRA
driver's ResourceSlices)."""

from __future__ import annotations

from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    client,
    cluster,
    emulator,
    kubeconfig,
    node_labels,
    request_timeout,
    stop,
)
