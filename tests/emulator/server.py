"""A stateful Kubernetes API server emulator speaking real HTTP on loopback.

Owns the emulator's state (objects and the ``resourceVersion`` counter), its HTTP
front end, authentication, authorisation, fault injection and the request log. See
the package docstring for which API behaviours it reproduces and which it does not.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tests.emulator.patching import (
    MalformedPatch,
    PatchError,
    UnsupportedPatch,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from tests.emulator.validation import Cause, go_quote, validate_metadata

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: What the API server says when a JSON Patch cannot be applied (a failed ``test``, a
#: missing path): its generic 422 message; the patch library's own text is not returned.
JSON_PATCH_FAILED = "the server rejected our request due to an error in our request"


@dataclass(frozen=True)
class ResourceType:
    """One kind of object the emulator serves."""

    plural: str
    group: str
    version: str
    kind: str
    namespaced: bool
    #: Custom resources refuse strategic merge patch and unconditional updates.
    custom: bool = False
    #: Verbs allowed over HTTP (the rest answer 405).
    verbs: frozenset[str] = frozenset({"get", "list"})

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[str, ResourceType] = {
    "nodes": ResourceType(
        "nodes",
        "",
        "v1",
        "Node",
        namespaced=False,
        verbs=frozenset({"get", "list", "patch", "update"}),
    ),
    "pods": ResourceType("pods", "", "v1", "Pod", namespaced=True),
    "events": ResourceType(
        "events", "", "v1", "Event", namespaced=True, verbs=frozenset({"get", "list", "create"})
    ),
    "daemonsets": ResourceType("daemonsets", "apps", "v1", "DaemonSet", namespaced=True),
    "replicasets": ResourceType("replicasets", "apps", "v1", "ReplicaSet", namespaced=True),
    # NVIDIA's DRA driver publishes a node's GPUs in these (written by the driver; gfd
    # only lists them, by field selector).
    "resourceslices": ResourceType(
        "resourceslices", "resource.k8s.io", "v1", "ResourceSlice", namespaced=False
    ),
    "nodefeatures": ResourceType(
        "nodefeatures",
        "nfd.k8s-sigs.io",
        "v1alpha1",
        "NodeFeature",
        namespaced=True,
        custom=True,
        verbs=frozenset({"get", "list", "create", "update", "patch", "delete"}),
    ),
    # The admission policies the emulator runs (arranged by add_validating_policy; read only).
    "validatingadmissionpolicies": ResourceType(
        "validatingadmissionpolicies",
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        namespaced=False,
    ),
}
#: The reviews every authenticated user may create (kube-apiserver's ClusterRole
#: system:basic-user, bound to system:authenticated): answered, never stored.
REVIEWS: dict[str, tuple[str, str, str]] = {
    "selfsubjectaccessreviews": ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
    "selfsubjectreviews": ("authentication.k8s.io", "v1", "SelfSubjectReview"),
}
#: The one value of the ``dryRun`` query parameter the API server accepts.
DRY_RUN_ALL = "All"
#: The admission operation of each write verb.
OPERATIONS = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}

_ROUTE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<subresource>status))?)?$"
)
#: The resources whose ``status`` subresource the emulator serves (get and patch).
STATUS_SUBRESOURCES = frozenset({"nodes"})
#: The fields a list's ``fieldSelector`` may name, per resource, as the API server
#: registers them: every resource has ``metadata.name`` (and a namespaced one
#: ``metadata.namespace``); a ResourceSlice also its node and driver.
SELECTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "resourceslices": ("spec.nodeName", "spec.driver"),
    # Some of the fields the API server registers for Pods (pkg/registry/core/pod).
    "pods": ("spec.nodeName", "spec.schedulerName", "status.phase"),
}


@dataclass(frozen=True)
class Principal:
    """Who a bearer token authenticates as, and what it may do.

    ``rules`` holds ``(verb, resource)`` pairs, or ``(verb, resource, namespace)`` for a
    rule a Role grants in that namespace only; ``"*"`` matches any verb or resource. A
    subresource is named as RBAC names it: ``nodes/status``.
    """

    user: str
    rules: frozenset[tuple[str, ...]] = frozenset({("*", "*")})
    #: As RBAC binds a Role: when set, the two-part rules grant namespaced resources only
    #: in this namespace (cluster-scoped ones, as a ClusterRole would, everywhere).
    namespace: str | None = None
    #: The token's extra claims (``authentication.kubernetes.io/node-name`` and the pod's,
    #: for a pod-bound token), as admission sees ``request.userInfo.extra``.
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @property
    def groups(self) -> list[str]:
        """The groups the API server adds: a ServiceAccount's two, then everyone's."""
        parts = self.user.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            return [
                "system:serviceaccounts",
                f"system:serviceaccounts:{parts[2]}",
                "system:authenticated",
            ]
        return ["system:authenticated"]

    def allows(self, verb: str, resource: str, namespace: str = "") -> bool:
        for rule in self.rules:
            rule_verb, rule_resource = rule[0], rule[1]
            if rule_verb not in ("*", verb) or rule_resource not in ("*", resource):
                continue
            scope = rule[2] if len(rule) > 2 else self.namespace
            if not namespace or scope is None or scope == namespace:
                return True
        return False


#: The permissions gfd's Kubernetes sinks need (see docs/sinks.md), with the GPU
#: health condition and its Events (docs/health.md).
GFD_RULES: frozenset[tuple[str, ...]] = frozenset(
    {
        ("get", "nodes"),
        ("patch", "nodes"),
        ("patch", "nodes/status"),
        ("create", "events", "default"),
        ("list", "resourceslices"),
        ("get", "pods"),
        ("get", "nodefeatures"),
        ("create", "nodefeatures"),
        ("update", "nodefeatures"),
    }
)


@dataclass
class Fault:
    """A misbehaviour for the next matching requests.

    Exactly one effect: ``status`` answers that status (with ``Retry-After`` when
    given) and applies nothing; ``raw`` answers 200 with exactly those bytes (a
    malformed object, or no JSON at all) and applies nothing; ``delay`` holds the request that long, then handles
    it normally (a client that timed out never sees the result, but the change is
    made, as with a real server); ``drop`` handles the request, then closes the
    connection halfway through the response body. ``times`` = None repeats until
    :meth:`ApiServerEmulator.clear_faults`.
    """

    status: int | None = None
    retry_after: str | None = None
    delay: float = 0.0
    drop: bool = False
    raw: bytes | None = None
    method: str | None = None
    path_contains: str | None = None
    times: int | None = 1
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        effects = (self.status is not None) + (self.delay > 0) + self.drop + (self.raw is not None)
        if effects != 1:
            raise ValueError("a Fault needs exactly one of status, delay, drop or raw")

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if self.method is not None and self.method != method:
            return False
        return self.path_contains is None or self.path_contains in path


@dataclass(frozen=True)
class AdmissionAttributes:
    """What a validating admission policy judges: one write, as the API server hands it on
    (``operation`` CREATE, UPDATE or DELETE; a PATCH is an UPDATE of the patched object)."""

    operation: str
    group: str
    resource: str
    #: ``status`` for ``nodes/status``; "" for the resource itself.
    subresource: str
    namespace: str
    name: str
    user: str
    extra: Mapping[str, tuple[str, ...]]
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool


@dataclass(frozen=True)
class ValidatingPolicy:
    """A ValidatingAdmissionPolicy with its binding, as the emulator runs it: ``judge``
    answers the denial message of a write it refuses, None for one it admits (or does not
    match). Its object is served at ``validatingadmissionpolicies/<name>``."""

    name: str
    judge: Callable[[AdmissionAttributes], str | None]
    binding: str = ""

    @property
    def binding_name(self) -> str:
        return self.binding or self.name


@dataclass
class _Hook:
    action: Callable[[ApiServerEmulator], object]
    method: str | None
    path_contains: str | None
    times: int | None
    user: str | None = None
    fired: int = 0


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the emulator saw and answered it."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str | None
    status: int
    timestamp: float
    user: str | None
    fault: str | None = None
    body: Any = None

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS


@dataclass
class _Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    raw: bytes | None = None


class _ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}


class _RawReply(Exception):
    def __init__(self, raw: bytes) -> None:
        super().__init__("raw reply")
        self.raw = raw


def status_body(
    status: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` object as the API server sends with every error."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if status >= 300 else "Success",
        "message": message,
        "reason": reason,
        "code": status,
    }
    if details:
        body["details"] = dict(details)
    return body


_FAULT_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    502: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiServerEmulator:
    """Serve Nodes, Pods, DaemonSets, ReplicaSets and NodeFeatures over HTTP(S).

    Use as a context manager (or :meth:`start`/:meth:`stop`). Tests arrange state
    with the direct methods (:meth:`add_node`, :meth:`set_token`, ...), which bypass
    HTTP, auth and faults, and read back :attr:`requests`.
    """

    def __init__(
        self,
        *,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        clock: Callable[[], float] = time.time,
        watch_cache_lag: float = 0.0,
    ) -> None:
        """``watch_cache_lag``: for this many seconds after a write (PATCH or PUT), a GET
        with ``resourceVersion=0`` still sees the object as it was before, as the real
        server's watch cache does until the write's event reaches it (measured there:
        writers racing on one node get real 409s from it)."""
        self._tls = (tls_cert, tls_key) if tls_cert and tls_key else None
        self._clock = clock
        self._watch_cache_lag = watch_cache_lag
        #: Per object, its version before the last write and when that write happened.
        self._before_write: dict[tuple[str, str, str], tuple[dict[str, Any], float]] = {}
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._cache: dict[tuple[str, str, str], dict[str, Any]] | None = None
        self._revision = 1
        self._tokens: dict[str, Principal] = {}
        self._faults: list[Fault] = []
        self._hooks: list[_Hook] = []
        self._policies: list[ValidatingPolicy] = []
        self._log: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ApiServerEmulator:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.block_on_close = False
        if self._tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self._tls[0]), str(self._tls[1]))
            server.socket = context.wrap_socket(server.socket, server_side=True)
        server.emulator = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="api-server-emulator",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> ApiServerEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the emulator is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def write_kubeconfig(
        self,
        path: Path,
        token: str,
        *,
        ca_file: Path | None = None,
        insecure_skip_tls_verify: bool = False,
    ) -> Path:
        """Write a kubeconfig that points at this emulator with ``token`` (trusting
        ``ca_file``, or with ``insecure-skip-tls-verify: true``)."""
        cluster: dict[str, Any] = {"server": self.url}
        if ca_file is not None:
            cluster["certificate-authority"] = str(ca_file)
        if insecure_skip_tls_verify:
            cluster["insecure-skip-tls-verify"] = True
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": cluster}],
            "users": [{"name": "gfd", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "gfd"}}],
            "current-context": "emulator",
        }
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        return path

    # ---------------------------------------------------------------- credentials

    def set_token(self, token: str, principal: Principal) -> None:
        with self._lock:
            self._tokens[token] = principal

    def revoke_token(self, token: str) -> None:
        with self._lock:
            self._tokens.pop(token, None)

    # ---------------------------------------------------------------------- state

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {"metadata": metadata, "spec": {}, "status": {"conditions": []}}
        return self._create_direct("nodes", "", body)

    def add_pod(
        self, namespace: str, name: str, *, controller: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """A Pod, owned (as controller) by ``controller`` (an object from this emulator)."""
        metadata: dict[str, Any] = {"name": name}
        if controller is not None:
            meta = controller["metadata"]
            metadata["ownerReferences"] = [
                {
                    "apiVersion": controller["apiVersion"],
                    "kind": controller["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        spec = {"containers": [{"name": "gfd", "image": "gfd"}]}
        return self._create_direct("pods", namespace, {"metadata": metadata, "spec": spec})

    def add_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Any object of a resource the emulator serves, stored as given (with its
        metadata filled in), without admission."""
        return self._create_direct(plural, namespace, dict(body))

    def add_resource_slice(
        self,
        name: str,
        *,
        node_name: str,
        driver: str,
        devices: Iterable[Mapping[str, Any]],
        pool: str | None = None,
        generation: int = 1,
    ) -> dict[str, Any]:
        """A ResourceSlice as a DRA driver publishes it: ``devices`` of ``node_name``, in
        the pool named after the node unless ``pool`` is given."""
        spec = {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": [copy.deepcopy(dict(device)) for device in devices],
        }
        return self._create_direct("resourceslices", "", {"metadata": {"name": name}, "spec": spec})

    def add_daemonset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._create_direct("daemonsets", namespace, _workload(name))

    def add_replicaset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._create_direct("replicasets", namespace, _workload(name))

    def add_validating_policy(self, policy: ValidatingPolicy) -> dict[str, Any]:
        """Run ``policy`` on every write made over HTTP from now on (dry runs included),
        after validation, as the API server runs its ValidatingAdmissionPolicies; and serve
        its object (name only) at ``validatingadmissionpolicies``."""
        with self._lock:
            self._policies.append(policy)
        body = {"metadata": {"name": policy.name}, "spec": {"failurePolicy": "Fail"}}
        return self._create_direct("validatingadmissionpolicies", "", body)

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """A deep copy of a stored object, or None."""
        with self._lock:
            found = self._objects.get((plural, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def node(self, name: str) -> dict[str, Any]:
        found = self.get("nodes", name)
        if found is None:
            raise KeyError(f"no node {name!r} in the emulator")
        return found

    def node_condition(self, name: str, condition_type: str) -> dict[str, Any] | None:
        """The node's condition of ``condition_type``, or None."""
        for condition in self.node(name).get("status", {}).get("conditions", []):
            if condition.get("type") == condition_type:
                return dict(condition)
        return None

    def set_node_status(self, name: str, **status: Any) -> dict[str, Any]:
        """The kubelet's write: set these fields of the node's status (``allocatable=...``)."""

        def change(node: dict[str, Any]) -> None:
            node.setdefault("status", {}).update(copy.deepcopy(status))

        return self.edit_object("nodes", name, mutate=change)

    def events(self, namespace: str = "default") -> list[dict[str, Any]]:
        """The Events recorded in ``namespace``, oldest first."""
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (plural, ns, _), obj in self._objects.items()
                if plural == "events" and ns == namespace
            ]

    def node_labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def node_annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("nodefeatures", name, namespace)

    def change_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Another writer's merge patch of a node's metadata (``None`` deletes a key)."""
        patch: dict[str, Any] = {}
        if labels is not None:
            patch["labels"] = dict(labels)
        if annotations is not None:
            patch["annotations"] = dict(annotations)
        with self._lock:
            current = self._objects[("nodes", "", name)]
            changed = merge_patch(current, {"metadata": patch})
            return self._store_update(RESOURCES["nodes"], ("nodes", "", name), current, changed)

    def edit_object(
        self,
        plural: str,
        name: str,
        namespace: str = "",
        *,
        mutate: Callable[[dict[str, Any]], None],
    ) -> dict[str, Any]:
        """Another writer's update: ``mutate`` edits a copy, stored with a new version."""
        with self._lock:
            key = (plural, namespace, name)
            current = self._objects[key]
            changed = copy.deepcopy(current)
            mutate(changed)
            return self._store_update(RESOURCES[plural], key, current, changed)

    def delete_object(self, plural: str, name: str, namespace: str = "") -> None:
        with self._lock:
            del self._objects[(plural, namespace, name)]
            self._revision += 1

    @property
    def revision(self) -> int:
        """The latest ``resourceVersion`` handed out."""
        with self._lock:
            return self._revision

    def freeze_cache(self) -> None:
        """From now on, reads with ``resourceVersion=0`` see the objects as they are now."""
        with self._lock:
            self._cache = copy.deepcopy(self._objects)

    def thaw_cache(self) -> None:
        with self._lock:
            self._cache = None

    # --------------------------------------------------------------- faults, hooks

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def before(
        self,
        action: Callable[[ApiServerEmulator], object],
        *,
        method: str | None = None,
        path_contains: str | None = None,
        times: int | None = 1,
        user: str | None = None,
    ) -> None:
        """Run ``action`` just before handling matching requests (a racing writer);
        ``user`` limits it to the requests of the principal of that name (gfd's, say,
        while other writers use the same server)."""
        with self._lock:
            self._hooks.append(_Hook(action, method, path_contains, times, user))

    # ------------------------------------------------------------------------ log

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def count(
        self,
        *,
        writes: bool | None = None,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> int:
        """How many logged requests match all the given filters."""
        return sum(
            1
            for r in self.requests
            if (writes is None or r.is_write == writes)
            and (method is None or r.method == method)
            and (path_contains is None or path_contains in r.path)
        )

    # ------------------------------------------------------------------- handling

    def handle(self, method: str, target: str, headers: Mapping[str, str], raw: bytes) -> _Reply:
        """Answer one HTTP request (called from the server's handler threads)."""
        split = urlsplit(target)
        path = split.path
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip() or None
        user: str | None = None
        fault_name: str | None = None
        body: Any = None
        try:
            self._run_hooks(method, path, headers)
            fault = self._take_fault(method, path)
            if fault is not None:
                fault_name = self._describe(fault)
                if fault.status is not None:
                    raise self._fault_error(fault)
                if fault.raw is not None:
                    raise _RawReply(fault.raw)
                if fault.delay > 0:
                    self._closing.wait(fault.delay)
            principal = self._authenticate(headers)
            user = principal.user
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    raise _ApiError(
                        400, "BadRequest", f"the request body is not JSON: {exc}"
                    ) from exc
            reply = self._dispatch(principal, method, path, query, content_type, body)
            reply.drop = fault is not None and fault.drop
        except _ApiError as exc:
            reply = _Reply(
                exc.status, status_body(exc.status, exc.reason, exc.message, exc.details)
            )
            reply.headers.update(exc.headers)
        except _RawReply as exc:
            reply = _Reply(200, {}, raw=exc.raw)
        with self._lock:
            self._log.append(
                RecordedRequest(
                    method,
                    path,
                    query,
                    content_type,
                    reply.status,
                    self._clock(),
                    user,
                    fault_name,
                    body,
                )
            )
        return reply

    def _run_hooks(self, method: str, path: str, headers: Mapping[str, str]) -> None:
        with self._lock:
            user = self._user_of(headers)
            due = [
                hook
                for hook in self._hooks
                if (hook.times is None or hook.fired < hook.times)
                and (hook.method is None or hook.method == method)
                and (hook.path_contains is None or hook.path_contains in path)
                and (hook.user is None or hook.user == user)
            ]
            for hook in due:
                hook.fired += 1
        for hook in due:
            hook.action(self)

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.fired += 1
                    return fault
        return None

    @staticmethod
    def _describe(fault: Fault) -> str:
        if fault.status is not None:
            return f"status {fault.status}"
        if fault.raw is not None:
            return f"raw {len(fault.raw)} bytes"
        return f"delay {fault.delay}s" if fault.delay > 0 else "drop"

    @staticmethod
    def _fault_error(fault: Fault) -> _ApiError:
        status = fault.status or 500
        reason = _FAULT_REASONS.get(status, "InternalError")
        if status == 429:
            details: dict[str, Any] = {}
            if fault.retry_after is not None and fault.retry_after.isdigit():
                details["retryAfterSeconds"] = int(fault.retry_after)
            error = _ApiError(429, reason, "Too many requests, please try again later.", **details)
            if fault.retry_after is not None:
                error.headers["Retry-After"] = fault.retry_after
            return error
        return _ApiError(status, reason, f"emulated fault: HTTP {status}")

    def _principal_of(self, headers: Mapping[str, str]) -> Principal | None:
        authorization = headers.get("Authorization") or headers.get("authorization") or ""
        scheme, _, token = authorization.partition(" ")
        with self._lock:
            return self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    def _user_of(self, headers: Mapping[str, str]) -> str | None:
        principal = self._principal_of(headers)
        return principal.user if principal is not None else None

    def _authenticate(self, headers: Mapping[str, str]) -> Principal:
        principal = self._principal_of(headers)
        if principal is None:
            raise _ApiError(401, "Unauthorized", "Unauthorized")
        return principal

    def _dispatch(
        self,
        principal: Principal,
        method: str,
        path: str,
        query: Mapping[str, str],
        content_type: str | None,
        body: Any,
    ) -> _Reply:
        match = _ROUTE.match(path)
        resource = None
        if match:
            group = match["group"] or ""
            version = match["core"] or match["version"]
            if match["plural"] in REVIEWS and (group, version) == REVIEWS[match["plural"]][:2]:
                return self._review(principal, method, match, body)
            resource = RESOURCES.get(match["plural"])
        if (
            match is None
            or resource is None
            or (resource.group, resource.version) != (group, version)
            or (
                resource.namespaced != (match["namespace"] is not None)
                # A namespaced resource's list across every namespace (kubectl get -A).
                and not (resource.namespaced and method == "GET" and match["name"] is None)
            )
        ):
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = unquote(match["namespace"] or "")
        name = unquote(match["name"]) if match["name"] else None
        verb = _verb(method, name is not None)
        subresource = match["subresource"]
        if subresource is not None and resource.plural not in STATUS_SUBRESOURCES:
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        if (
            verb is None
            or verb not in resource.verbs
            or (subresource is not None and verb not in ("get", "patch"))
        ):
            raise _ApiError(
                405, "MethodNotAllowed", f"{method} is not supported on {resource.plural}"
            )
        rbac_resource = f"{resource.plural}/{subresource}" if subresource else resource.plural
        if not principal.allows(verb, rbac_resource, namespace):
            # Details as the real server gives them: no empty name or group.
            details = {"name": name, "group": resource.group, "kind": resource.plural}
            raise _ApiError(
                403,
                "Forbidden",
                _forbidden(principal, verb, resource, rbac_resource, name, namespace),
                **{key: value for key, value in details.items() if value},
            )
        dry_run = _dry_run(verb, query)
        key = (resource.plural, namespace, name or "")

        def admit(old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            self._admit(
                AdmissionAttributes(
                    operation=OPERATIONS[verb],
                    group=resource.group,
                    resource=resource.plural,
                    subresource=subresource or "",
                    namespace=namespace,
                    name=str((new.get("metadata") or {}).get("name") or name or ""),
                    user=principal.user,
                    extra=dict(principal.extra),
                    object=copy.deepcopy(new),
                    old_object=copy.deepcopy(old),
                    dry_run=dry_run,
                ),
                resource,
            )

        with self._lock:
            if verb == "list":
                selector = _field_selector(resource, query.get("fieldSelector", ""))
                listing = self._list(resource, namespace, selector)
                return _Reply(200, _page(listing, query))
            if verb == "create":
                return _Reply(201, self._create(resource, namespace, body, admit, dry_run))
            current = self._objects.get(key)
            if verb == "get" and query.get("resourceVersion") == "0" and self._cache is not None:
                current = self._cache.get(key)
            elif (
                verb == "get" and query.get("resourceVersion") == "0" and key in self._before_write
            ):
                previous, written = self._before_write[key]
                if self._clock() - written < self._watch_cache_lag:
                    current = previous
            if current is None:
                raise _ApiError(
                    404,
                    "NotFound",
                    f'{resource.qualified} "{name}" not found',
                    **_details(resource, name or ""),
                )
            if verb == "get":
                return _Reply(200, copy.deepcopy(current))
            if verb == "delete":
                if not dry_run:
                    del self._objects[key]
                    self._revision += 1
                return _Reply(
                    200, status_body(200, "", "", {"name": name, "kind": resource.plural})
                )
            if verb == "update":
                return _Reply(200, self._update(resource, key, current, body, admit, dry_run))
            return _Reply(
                200,
                self._patch(
                    resource,
                    key,
                    current,
                    content_type,
                    body,
                    status_only=subresource is not None,
                    admit=admit,
                    dry_run=dry_run,
                ),
            )

    def _review(self, principal: Principal, method: str, match: re.Match[str], body: Any) -> _Reply:
        """A SelfSubjectAccessReview or SelfSubjectReview: answered about the caller, with
        201 Created as for any create, and stored nowhere."""
        plural = match["plural"]
        group, version, kind = REVIEWS[plural]
        if match["namespace"] is not None or match["name"] is not None:
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        if method != "POST":
            raise _ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        review: dict[str, Any] = {
            "kind": kind,
            "apiVersion": f"{group}/{version}",
            "metadata": {"creationTimestamp": None},
        }
        if plural == "selfsubjectreviews":
            user_info: dict[str, Any] = {"username": principal.user, "groups": principal.groups}
            if principal.extra:
                user_info["extra"] = {k: list(v) for k, v in principal.extra.items()}
            review["status"] = {"userInfo": user_info}
            return _Reply(201, review)
        spec = body.get("spec")
        attributes = spec.get("resourceAttributes") if isinstance(spec, dict) else None
        non_resource = spec.get("nonResourceAttributes") if isinstance(spec, dict) else None
        if (attributes is None) == (non_resource is None):
            raise _ApiError(
                422,
                "Invalid",
                f'{kind}.{group} "" is invalid: spec.resourceAttributes: Invalid value: '
                '"null": exactly one of nonResourceAttributes or resourceAttributes must be '
                "specified",
            )
        review["spec"] = copy.deepcopy(spec)
        allowed = False
        if isinstance(attributes, dict):
            resource = str(attributes.get("resource") or "")
            subresource = str(attributes.get("subresource") or "")
            allowed = principal.allows(
                str(attributes.get("verb") or ""),
                f"{resource}/{subresource}" if subresource else resource,
                str(attributes.get("namespace") or ""),
            )
        # RBAC names the binding that allowed it in "reason"; the emulator's rules have no
        # binding to name, and a denial by RBAC (no opinion) carries no reason.
        review["status"] = {"allowed": allowed}
        return _Reply(201, review)

    def _admit(self, request: AdmissionAttributes, resource: ResourceType) -> None:
        """Run the validating policies on ``request``; the first denial answers 403 as
        kube-apiserver words a ValidatingAdmissionPolicy's denial with reason Forbidden."""
        for policy in list(self._policies):
            denial = policy.judge(request)
            if denial is None:
                continue
            subject = f'{resource.qualified} "{request.name}"'
            details = {"name": request.name, "group": resource.group, "kind": resource.plural}
            raise _ApiError(
                403,
                "Forbidden",
                f"{subject} is forbidden: ValidatingAdmissionPolicy '{policy.name}' with "
                f"binding '{policy.binding_name}' denied request: {denial}",
                **{key: value for key, value in details.items() if value},
            )

    def _list(
        self,
        resource: ResourceType,
        namespace: str,
        selector: Iterable[tuple[str, str, bool]] = (),
    ) -> dict[str, Any]:
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _), obj in sorted(self._objects.items())
            if plural == resource.plural
            # A namespaced resource listed without a namespace: every namespace's (-A).
            and (not resource.namespaced or not namespace or ns == namespace)
            and all(
                (_field_value(obj, path) == value) == wanted for path, value, wanted in selector
            )
        ]
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(self._revision)},
            "items": items,
        }

    def _create(
        self,
        resource: ResourceType,
        namespace: str,
        body: Any,
        admit: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        self._check_type(resource, body)
        metadata = body.setdefault("metadata", {})
        name = metadata.get("name")
        if not name:
            raise _ApiError(
                422,
                "Invalid",
                f'{resource.kind} "" is invalid: metadata.name: '
                "Required value: name or generateName is required",
            )
        if metadata.get("namespace", namespace) != namespace:
            raise _ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not "
                "match the namespace sent on the request",
            )
        if (resource.plural, namespace, name) in self._objects:
            raise _ApiError(
                409,
                "AlreadyExists",
                f'{resource.qualified} "{name}" already exists',
                **_details(resource, name),
            )
        self._validate(resource, name, metadata)
        if resource.plural == "events":
            _check_event(body, namespace)
        return self._create_direct(resource.plural, namespace, body, admit, dry_run)

    def _create_direct(
        self,
        plural: str,
        namespace: str,
        body: dict[str, Any],
        admit: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Store a new object; ``admit`` judges it first (an HTTP create), and a dry run
        stores nothing and hands out no resourceVersion, as the API server's dry run."""
        resource = RESOURCES[plural]
        obj = copy.deepcopy(body)
        obj["apiVersion"] = resource.api_version
        obj["kind"] = resource.kind
        metadata = obj.setdefault("metadata", {})
        with self._lock:
            metadata.update(
                uid=str(uuid.uuid4()),
                creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock())),
            )
            if resource.namespaced:
                metadata["namespace"] = namespace
            if resource.custom:
                metadata["generation"] = 1
            if admit is not None:
                admit(None, obj)
            if dry_run:
                return copy.deepcopy(obj)
            self._revision += 1
            metadata["resourceVersion"] = str(self._revision)
            self._objects[(plural, namespace, metadata["name"])] = obj
            return copy.deepcopy(obj)

    def _update(
        self,
        resource: ResourceType,
        key: tuple[str, str, str],
        current: dict[str, Any],
        body: Any,
        admit: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        self._check_type(resource, body)
        metadata = body.get("metadata") or {}
        if metadata.get("name") != key[2]:
            raise _ApiError(
                400,
                "BadRequest",
                f"the name of the object ({metadata.get('name')}) "
                f"does not match the name on the URL ({key[2]})",
            )
        if resource.custom and not metadata.get("resourceVersion"):
            # The generic registry names the resource (plural.group) where a kind belongs,
            # and prints the missing version as 0 (kube-apiserver 1.36.2's captured answer).
            problem = "Invalid value: 0: must be specified for an update"
            raise _ApiError(
                422,
                "Invalid",
                f'{resource.qualified} "{key[2]}" is invalid: metadata.resourceVersion: {problem}',
                **_details(resource, key[2]),
                causes=[
                    {
                        "reason": "FieldValueInvalid",
                        "message": problem,
                        "field": "metadata.resourceVersion",
                    }
                ],
            )
        return self._store_update(resource, key, current, body, admit, dry_run)

    def _patch(
        self,
        resource: ResourceType,
        key: tuple[str, str, str],
        current: dict[str, Any],
        content_type: str | None,
        body: Any,
        *,
        status_only: bool = False,
        admit: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        accepted = [JSON_PATCH, MERGE_PATCH] + ([] if resource.custom else [STRATEGIC_MERGE_PATCH])
        if content_type not in accepted:
            raise _ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an "
                f"unknown format - accepted media types include: {', '.join(accepted)}",
            )
        try:
            if content_type == JSON_PATCH:
                patched = json_patch(current, body)
            elif content_type == MERGE_PATCH:
                if not isinstance(body, dict):
                    raise MalformedPatch("a merge patch must be a JSON object")
                patched = merge_patch(current, body)
            else:
                if not isinstance(body, dict):
                    raise MalformedPatch("a strategic merge patch must be a JSON object")
                patched = strategic_merge_patch(current, body)
        except (MalformedPatch, UnsupportedPatch) as exc:
            raise _ApiError(400, "BadRequest", str(exc)) from exc
        except PatchError as exc:
            # The API server keeps the patch library's text to itself: its generic 422.
            raise _ApiError(422, "Invalid", JSON_PATCH_FAILED) from exc
        if not isinstance(patched, dict):
            raise _ApiError(422, "Invalid", "the patch replaced the whole object with a non-object")
        for immutable in ("name", "namespace", "uid"):
            before = current["metadata"].get(immutable)
            after = (patched.get("metadata") or {}).get(immutable)
            if after != before and not (immutable == "uid" and after is None):
                raise _ApiError(
                    422,
                    "Invalid",
                    f'{resource.kind} "{key[2]}" is invalid: '
                    f"metadata.{immutable}: Invalid value: {after!r}: field is immutable",
                )
        if status_only:
            # The status subresource writes status alone; the rest of the patch is ignored.
            patched = {**copy.deepcopy(current), "status": patched.get("status") or {}}
        elif resource.plural in STATUS_SUBRESOURCES:
            # ...and the main resource everything but status.
            patched = {**patched, "status": copy.deepcopy(current.get("status") or {})}
        return self._store_update(resource, key, current, patched, admit, dry_run)

    def _store_update(
        self,
        resource: ResourceType,
        key: tuple[str, str, str],
        current: dict[str, Any],
        new: dict[str, Any],
        admit: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Store ``new`` over ``current``. ``admit`` judges it after validation (an HTTP
        write: no-op writes are admitted too, as by the API server); a dry run stores
        nothing and keeps the version, and so does a write that changes nothing."""
        new = copy.deepcopy(new)
        metadata = new.setdefault("metadata", {})
        wanted = metadata.get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise _ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.qualified} "{key[2]}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                **_details(resource, key[2]),
            )
        self._validate(resource, key[2], metadata)
        for kept in ("uid", "creationTimestamp", "resourceVersion", "generation", "namespace"):
            if kept in current["metadata"]:
                metadata[kept] = current["metadata"][kept]
            else:
                metadata.pop(kept, None)
        new["apiVersion"] = resource.api_version
        new["kind"] = resource.kind
        if admit is not None:
            admit(current, new)
        if new == current or dry_run:
            # The real server skips no-op writes: no new resourceVersion, no event.
            return copy.deepcopy(new)
        self._revision += 1
        metadata["resourceVersion"] = str(self._revision)
        if self._watch_cache_lag > 0:
            self._before_write[key] = (copy.deepcopy(current), self._clock())
        if resource.custom and new.get("spec") != current.get("spec"):
            metadata["generation"] = int(current["metadata"].get("generation", 1)) + 1
        self._objects[key] = new
        return copy.deepcopy(new)

    @staticmethod
    def _check_type(resource: ResourceType, body: Mapping[str, Any]) -> None:
        if (
            body.get("kind", resource.kind) != resource.kind
            or body.get("apiVersion", resource.api_version) != resource.api_version
        ):
            raise _ApiError(
                400,
                "BadRequest",
                f"the body is a {body.get('apiVersion')} "
                f"{body.get('kind')}, not a {resource.api_version} {resource.kind}",
            )

    @staticmethod
    def _validate(resource: ResourceType, name: str, metadata: Mapping[str, Any]) -> None:
        causes: list[Cause] = validate_metadata(metadata)
        if causes:
            summary = ", ".join(
                f"{c.field}: Invalid value: {go_quote(c.value)}: {c.message}" for c in causes
            )
            raise _ApiError(
                422,
                "Invalid",
                f'{resource.kind} "{name}" is invalid: {summary}',
                name=name,
                kind=resource.kind,
                causes=[c.to_status_cause() for c in causes],
            )


def _field_selector(resource: ResourceType, text: str) -> list[tuple[str, str, bool]]:
    """A list's ``fieldSelector`` as (field, value, equal) terms: ``a=b``, ``a==b`` and
    ``a!=b`` joined by commas, as apimachinery's fields.ParseSelector reads them (no
    escapes). A field the resource does not register answers 400, as the API server does."""
    terms: list[tuple[str, str, bool]] = []
    selectable = {"metadata.name", *SELECTABLE_FIELDS.get(resource.plural, ())}
    if resource.namespaced:
        selectable.add("metadata.namespace")
    for term in filter(None, text.split(",")):
        operator = next((op for op in ("!=", "==", "=") if op in term), None)
        if operator is None:
            raise _ApiError(
                400, "BadRequest", f"invalid selector: '{text}'; can't understand '{term}'"
            )
        path, _, value = term.partition(operator)
        if path not in selectable:
            raise _ApiError(400, "BadRequest", f'field label not supported: "{path}"')
        terms.append((path, value, operator != "!="))
    return terms


def _page(listing: dict[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
    """One page of a list, as the API server pages it with ``limit`` and ``continue``: the
    token is opaque to clients (here the offset of the next item and the revision), and
    the last page has none."""
    limit_text = query.get("limit", "")
    token = query.get("continue", "")
    start = 0
    if token:
        offset, _, revision = token.partition(":")
        if not offset.isdigit() or revision != listing["metadata"]["resourceVersion"]:
            raise _ApiError(410, "Expired", "The provided continue parameter is too old")
        start = int(offset)
    items = listing["items"]
    if not limit_text.isdigit() or int(limit_text) == 0:
        listing["items"] = items[start:]
        return listing
    end = start + int(limit_text)
    listing["items"] = items[start:end]
    if end < len(items):
        listing["metadata"]["continue"] = f"{end}:{listing['metadata']['resourceVersion']}"
        listing["metadata"]["remainingItemCount"] = len(items) - end
    return listing


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value a field selector compares: the field's text, "" when it is absent."""
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return "" if node is None else str(node)


def _check_event(event: Mapping[str, Any], namespace: str) -> None:
    """The API server's rule for a legacy Event (no ``eventTime``) about an object: the
    Event lives in its object's namespace, and one about a cluster-scoped object (a
    Node) in ``default``."""
    involved = event.get("involvedObject")
    if not isinstance(involved, Mapping) or not involved.get("kind") or not involved.get("name"):
        raise _ApiError(422, "Invalid", "Event is invalid: involvedObject: Required value")
    wanted = involved.get("namespace") or "default"
    if event.get("eventTime") is None and namespace != wanted:
        raise _ApiError(
            422,
            "Invalid",
            f'Event "{event["metadata"]["name"]}" is invalid: involvedObject.namespace: '
            f'Invalid value: "{involved.get("namespace") or ""}": does not match event.namespace',
        )


def _workload(name: str) -> dict[str, Any]:
    """A minimal DaemonSet/ReplicaSet body that the client's models accept."""
    selector = {"app.kubernetes.io/name": name}
    template = {
        "metadata": {"labels": selector},
        "spec": {"containers": [{"name": name, "image": name}]},
    }
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": selector}, "template": template},
    }


def _dry_run(verb: str | None, query: Mapping[str, str]) -> bool:
    """Whether a write is a dry run. ``dryRun=All`` is the only value the API server takes;
    any other fails its options' validation (apimachinery's ValidateDryRun, wrapped as the
    options kind's Invalid; derived from the source, not recorded)."""
    if "dryRun" not in query:
        return False
    value = query["dryRun"]
    if value != DRY_RUN_ALL:
        options = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}
        kind = options.get(verb or "", "DeleteOptions")
        raise _ApiError(
            422,
            "Invalid",
            f'{kind}.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{{{go_quote(value)}}}: '
            f'supported values: "{DRY_RUN_ALL}"',
        )
    return True


def _verb(method: str, has_name: bool) -> str | None:
    if has_name:
        return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    return {"GET": "list", "POST": "create"}.get(method)


def _forbidden(
    principal: Principal,
    verb: str,
    resource: ResourceType,
    rbac_resource: str,
    name: str | None,
    namespace: str,
) -> str:
    """The message of an RBAC denial: the subject names the resource alone, the rule it
    lacks names the subresource too (``nodes/status``), as the API server writes them."""
    subject = f'{resource.qualified} "{name}"' if name else resource.qualified
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return (
        f'{subject} is forbidden: User "{principal.user}" cannot {verb} resource '
        f'"{rbac_resource}" in API group "{resource.group}" {scope}'
    )


def _details(resource: ResourceType, name: str) -> dict[str, str]:
    """``details`` of a NotFound, AlreadyExists, Conflict or Invalid about an object: the
    group is left out when empty, as the API server's JSON omits it."""
    details = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return details


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm on, the
    # body waits for the client's delayed ACK (~40 ms per request on loopback).
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr log; the emulator keeps its own."""

    def _serve(self) -> None:
        emulator: ApiServerEmulator = self.server.emulator  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        reply = emulator.handle(self.command, self.path, dict(self.headers.items()), raw)
        payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if reply.drop:
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (timed out) before the answer was ready.
            self.close_connection = True


def seed_gfd_cluster(
    emulator: ApiServerEmulator,
    *,
    node_name: str,
    namespace: str = "gpu-operator",
    token: str = "gfd-token",
    pod_name: str = "gfd-abcde",
    node_labels: Mapping[str, str] | None = None,
    node_annotations: Mapping[str, str] | None = None,
    rules: Iterable[tuple[str, ...]] = GFD_RULES,
) -> dict[str, Any]:
    """A node, gfd's DaemonSet and Pod, and a token with gfd's permissions.

    Returns the created objects by role (``node``, ``daemonset``, ``pod``).
    """
    emulator.set_token(
        token,
        Principal(f"system:serviceaccount:{namespace}:gfd", frozenset(rules), namespace=namespace),
    )
    node = emulator.add_node(node_name, labels=node_labels, annotations=node_annotations)
    daemonset = emulator.add_daemonset(namespace, "gfd")
    pod = emulator.add_pod(namespace, pod_name, controller=daemonset)
    return {"node": node, "daemonset": daemonset, "pod": pod}
