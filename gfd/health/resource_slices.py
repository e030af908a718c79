"""The node's ResourceSlices, read through the API client to tell a DRA node.

This module owns the one read gfd makes of ``resource.k8s.io/v1`` ResourceSlices: a list
with the field selector ``spec.nodeName=<node>``, so the API server answers with this
node's slices only, of whatever driver, and with ``resourceVersion=0``, so it answers from
its watch cache rather than etcd (as the node sink's read; slices change when the driver
republishes, and a cycle or two of lag is within the check's grace period). The answer is
held to the node again, and to NVIDIA's driver, before anyone sees it. How often it is
read is :class:`gfd.health.dra_node.DraNodeWatch`'s concern; a read is one GET.

Neither the checks nor the watch import this module (nor the API client): the assembly
builds a :class:`ResourceSliceReader` and hands the watch its
:meth:`~ResourceSliceReader.list`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from gfd.base.errors import SinkError
from gfd.health.dra_node import DRA_DRIVER
from gfd.kube_api import KubeClient

#: The collection of ResourceSlices (cluster-scoped) in the version gfd reads.
RESOURCE_SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


class ResourceSliceReader:
    """Lists the ResourceSlices of NVIDIA's DRA driver on the node named ``node_name``."""

    def __init__(self, *, client: KubeClient, node_name: str, stop: threading.Event) -> None:
        self._client = client
        self.node_name = node_name
        self._stop = stop
        #: How many lists were sent (the cost the benchmark and the tests count).
        self.lists = 0

    def list(self) -> list[Mapping[str, Any]]:
        """The driver's slices on this node; raises :class:`~gfd.base.errors.SinkError` (a
        :class:`~gfd.base.errors.GfdError`) when the API server cannot answer."""
        self.lists += 1
        response = self._client.request(
            "GET",
            RESOURCE_SLICES_PATH,
            stop=self._stop,
            deadline=self._client.deadline(),
            query={"fieldSelector": f"spec.nodeName={self.node_name}", "resourceVersion": "0"},
        )
        answer = response.json_object("ResourceSlice list")
        items = answer.get("items")
        if not isinstance(items, list):
            raise SinkError("ResourceSlice list: the API server sent no list of items")
        # A server that ignored the selector would hand over every node's slices.
        return [
            item
            for item in items
            if isinstance(item, Mapping)
            and isinstance(spec := item.get("spec"), Mapping)
            and spec.get("nodeName") == self.node_name
            and spec.get("driver") == DRA_DRIVER
        ]
