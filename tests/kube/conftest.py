"""Fixtures: a running API server emulator, gfd's cluster objects in it, a client."""

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
    node_labels,
    request_timeout,
    stop,
)
