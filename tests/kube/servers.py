"""The two API servers the sink suites run against: the project's emulator and kmock.

kmock (PyPI ``kmock``, by nolar) is a Kubernetes API mock written by others: its
``KubernetesEmulator`` keeps objects in memory and answers GET, POST (create, 409 on an
existing name), PATCH (a recursive dict merge, ``null`` deletes; a JSON array body is
applied as RFC 6902 JSON Patch) and DELETE of any resource under ``/api`` and ``/apis``,
a ``/status`` PATCH included (it patches the whole object). Holding gfd's sinks to it as
well as to the project's emulator means a passing sink test does not rest on the
emulator's assumptions alone.

What kmock does not do (read off kmock 0.8's source and checked by
``tests/kube/test_kmock_limits.py``), and so which cases stay on the emulator only:

* no ``resourceVersion`` or ``uid`` of its own: a precondition is stored, never
  checked, so no 409 Conflict (stale reads, racing writers);
* no PUT: a replace answers 404 (gfd replaces a changed NodeFeature with PUT);
* no strategic merge: every list is replaced whole, so a condition patch drops the
  kubelet's other conditions;
* no authentication or authorisation (no 401, 403), no validation (no 422), a failed
  JSON Patch ``test`` answers 500 rather than 422;
* no faults with nothing applied: a scripted reaction answers after kmock has already
  stored the write;
* its errors carry kmock's own reasons (``Object Not Found``, ``Object Already
  Exists``) and a traceback in ``details``, not the API server's; a create answers 200,
  not 201.

Both servers are driven through :class:`ApiServer`, which seeds gfd's objects, reads
state back and logs requests with their answers' status codes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tests.emulator import ApiServerEmulator, seed_gfd_cluster

NODES = "v1/nodes"
PODS = "v1/pods"
DAEMONSETS = "apps/v1/daemonsets"
EVENTS = "v1/events"
NODEFEATURES = "nfd.k8s-sigs.io/v1alpha1/nodefeatures"
#: The emulator's plural for each resource spelled as above.
_PLURALS = {
    NODES: "nodes",
    PODS: "pods",
    DAEMONSETS: "daemonsets",
    EVENTS: "events",
    NODEFEATURES: "nodefeatures",
}
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Logged:
    """One request as the server answered it (the common part of both servers' logs)."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str | None
    status: int
    body: Any

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS


class ApiServer(Protocol):
    """What a parametrized sink test may ask of either server."""

    name: str

    @property
    def url(self) -> str: ...

    def write_kubeconfig(self, path: Path, token: str) -> Path: ...

    def seed(
        self, *, node: str, namespace: str, pod: str, token: str, labels: Mapping[str, str]
    ) -> dict[str, Any]: ...

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None: ...

    def change_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None: ...

    def delete(self, resource: str, name: str, namespace: str = "") -> None: ...

    def list(self, resource: str, namespace: str) -> list[dict[str, Any]]: ...

    @property
    def requests(self) -> list[Logged]: ...

    def clear_log(self) -> None: ...


def node_labels(api: ApiServer, node: str) -> dict[str, str]:
    found = api.get(NODES, node)
    assert found is not None, f"no node {node!r}"
    return dict(found["metadata"].get("labels") or {})


def node_annotations(api: ApiServer, node: str) -> dict[str, str]:
    found = api.get(NODES, node)
    assert found is not None, f"no node {node!r}"
    return dict(found["metadata"].get("annotations") or {})


def writes(api: ApiServer) -> list[Logged]:
    return [r for r in api.requests if r.is_write]


class EmulatorServer:
    """The project's emulator behind :class:`ApiServer`."""

    name = "emulator"

    def __init__(self, emulator: ApiServerEmulator) -> None:
        self.emulator = emulator

    @property
    def url(self) -> str:
        return self.emulator.url

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        return self.emulator.write_kubeconfig(path, token)

    def seed(
        self, *, node: str, namespace: str, pod: str, token: str, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        return seed_gfd_cluster(
            self.emulator,
            node_name=node,
            namespace=namespace,
            token=token,
            pod_name=pod,
            node_labels=labels or None,
        )

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.emulator.get(_PLURALS[resource], name, namespace)

    def change_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None:
        self.emulator.change_node_metadata(name, labels=labels, annotations=annotations)

    def delete(self, resource: str, name: str, namespace: str = "") -> None:
        self.emulator.delete_object(_PLURALS[resource], name, namespace)

    def list(self, resource: str, namespace: str) -> list[dict[str, Any]]:
        if resource != EVENTS:
            raise NotImplementedError(resource)
        return self.emulator.events(namespace)

    @property
    def requests(self) -> list[Logged]:
        return [
            Logged(r.method, r.path, dict(r.query), r.content_type, r.status, r.body)
            for r in self.emulator.requests
        ]

    def clear_log(self) -> None:
        self.emulator.clear_log()


class KmockServer:
    """kmock's ``KubernetesEmulator`` on its own event loop in a thread, so that gfd's
    synchronous client can talk to it; state is read and seeded on that loop.

    The status of each answer is logged by wrapping kmock's request entry point: kmock
    keeps the requests, not its answers. Nothing else of kmock's behaviour is changed.
    """

    name = "kmock"

    def __init__(self) -> None:
        import kmock  # imported here: the caller decides whether a missing kmock skips or fails

        self._kmock = kmock
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="kmock")
        self._log: list[Logged] = []
        self._log_lock = threading.Lock()
        self._handler: Any = None
        self._server: Any = None
        self._url = ""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> KmockServer:
        self._thread.start()
        self._on_loop_async(self._enter)
        return self

    def stop(self) -> None:
        if self._handler is not None:
            self._on_loop_async(self._exit)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> KmockServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _enter(self) -> None:
        handler = self._kmock.KubernetesEmulator()
        original = handler.__call__
        log = self._record

        async def logged(raw_request: Any) -> Any:
            response = await original(raw_request)
            log(raw_request, response.status)
            return response

        # The aiohttp test server calls the handler object; an instance attribute does not
        # replace a dunder, so kmock's server is pointed at the wrapper instead.
        await handler.__aenter__()
        self._handler = handler
        self._server = self._kmock.Server(handler)
        self._server.handler = _Wrapped(handler, logged)
        await self._server.__aenter__()
        # Server.__aenter__ registered the wrapper as the handler's server; kmock itself
        # only reads the URL from it.
        self._url = str(self._server.url).rstrip("/")

    async def _exit(self) -> None:
        await self._server.__aexit__(None, None, None)
        await self._handler.__aexit__(None, None, None)

    def _on_loop_async(self, make: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout=10)

    def _on_loop(self, action: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return action()

        return self._on_loop_async(run)

    def _record(self, raw_request: Any, status: int) -> None:
        body: Any = None
        raw = getattr(raw_request, "_read_bytes", None)
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
        content_type = raw_request.headers.get("Content-Type")
        entry = Logged(
            raw_request.method,
            raw_request.path,
            dict(raw_request.query),
            content_type.split(";")[0].strip() if content_type else None,
            status,
            body,
        )
        with self._log_lock:
            self._log.append(entry)

    # ------------------------------------------------------------------ ApiServer

    @property
    def url(self) -> str:
        return self._url

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
            "users": [{"name": "gfd", "user": {"token": token}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "gfd"}}],
            "current-context": "kmock",
        }
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        return path

    def _key(self, resource: str, name: str, namespace: str) -> tuple[Any, str | None, str]:
        return (self._kmock.resource(resource), namespace or None, name)

    def put_object(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as a server would have created it (kmock assigns no uid or
        resourceVersion, so the seed carries them, as gfd reads them)."""
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata.setdefault("resourceVersion", "1")
        key = self._key(resource, metadata["name"], metadata.get("namespace", ""))
        self._on_loop(lambda: self._handler.objects.__setitem__(key, obj))
        return copy.deepcopy(obj)

    def seed(
        self, *, node: str, namespace: str, pod: str, token: str, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        # kmock takes any token: gfd's permissions cannot be modelled there.
        del token
        created_node = self.put_object(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": dict(labels)},
                "spec": {},
                "status": {"conditions": []},
            },
        )
        selector = {"app.kubernetes.io/name": "gfd"}
        daemonset = self.put_object(
            DAEMONSETS,
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "gfd", "namespace": namespace},
                "spec": {
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {"labels": selector},
                        "spec": {"containers": [{"name": "gfd", "image": "gfd"}]},
                    },
                },
            },
        )
        owner = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "gfd",
            "uid": daemonset["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        created_pod = self.put_object(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": namespace, "ownerReferences": [owner]},
                "spec": {"containers": [{"name": "gfd", "image": "gfd"}]},
            },
        )
        return {"node": created_node, "daemonset": daemonset, "pod": created_pod}

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        key = self._key(resource, name, namespace)

        def read() -> dict[str, Any] | None:
            objects = self._handler.objects
            if key not in objects or objects[key].deleted:
                return None
            return copy.deepcopy(objects[key].raw)

        found: dict[str, Any] | None = self._on_loop(read)
        return found

    def change_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None:
        patch: dict[str, Any] = {}
        if labels is not None:
            patch["labels"] = dict(labels)
        if annotations is not None:
            patch["annotations"] = dict(annotations)
        key = self._key(NODES, name, "")
        self._on_loop(lambda: self._handler.objects[key].patch({"metadata": patch}))

    def delete(self, resource: str, name: str, namespace: str = "") -> None:
        key = self._key(resource, name, namespace)
        self._on_loop(lambda: self._handler.objects[key].delete())

    def list(self, resource: str, namespace: str) -> list[dict[str, Any]]:
        wanted = self._kmock.resource(resource)

        def read() -> list[dict[str, Any]]:
            return [
                copy.deepcopy(obj.raw)
                for (kind, ns, _), obj in self._handler.objects.items()
                if kind == wanted and ns == (namespace or None) and not obj.deleted
            ]

        found: list[dict[str, Any]] = self._on_loop(read)
        return found

    @property
    def requests(self) -> list[Logged]:
        with self._log_lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()


class _Wrapped:
    """kmock's handler as the HTTP server sees it, with every answer's status logged."""

    def __init__(self, handler: Any, call: Callable[[Any], Any]) -> None:
        self._handler = handler
        self._call = call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handler, name)

    async def __call__(self, raw_request: Any) -> Any:
        return await self._call(raw_request)
