"""A Kubernetes API server emulator for gfd's tests and benchmarks.

No real API server can run here, so this package stands in for one: a stateful
server on 127.0.0.1 speaking real HTTP/1.1 (keep-alive; optionally TLS), which the
official ``kubernetes`` client talks to unchanged.

Reproduced (documented API behaviour):

* Objects: Nodes (get, list, patch, update; and their ``status`` subresource, get
  and patch, which writes status alone while the main resource writes all but
  status), Pods, DaemonSets and ReplicaSets (get, list; enough for owner
  references), core/v1 Events (create, with the server's rule that an Event about a
  cluster-scoped object lives in ``default``), ``resource.k8s.io/v1`` ResourceSlices
  (get, list; arranged directly, as a DRA driver would publish them), and
  ``nfd.k8s-sigs.io/v1alpha1`` NodeFeatures in namespaces (get, list, create, update,
  patch, delete). Unknown paths answer 404, unsupported verbs 405.
* Field selectors on lists (``a=b``, ``a==b``, ``a!=b``, comma-joined) on the fields the
  API server registers: ``metadata.name`` everywhere, ``metadata.namespace`` for
  namespaced resources, ``spec.nodeName`` and ``spec.driver`` for ResourceSlices; any
  other field answers 400.
* ``resourceVersion``: one cluster-wide counter, bumped by every write that changes
  an object; a write that changes nothing keeps the version (as the real server
  skips no-op updates). A ``metadata.resourceVersion`` in a patch or update body is a
  precondition: a stale one answers 409 Conflict. An update of a custom resource
  without ``resourceVersion`` is refused (422), as for CRDs; a create of an existing
  name answers 409 AlreadyExists.
* PATCH: JSON merge patch, strategic merge patch (built-in objects only; custom
  resources answer 415, as for CRDs) and JSON Patch (RFC 6902 with ``test``, RFC 6901
  escaping, a remove of an absent path or a failed ``test`` fails the whole patch with
  the server's generic 422; a ``test`` of ``null`` passes on a missing key, as
  kube-apiserver's evanphx/json-patch does). A JSON Patch carries no
  ``resourceVersion``: it applies to the object as it is, whatever its version. Other
  media types answer 415.
* Validation: label keys and values and annotation keys by apimachinery's rules and
  the 256 KiB annotation limit; any problem rejects the whole write with a 422
  ``Status`` whose ``details.causes`` name each field, and nothing is applied.
  ``name``, ``namespace`` and ``uid`` are immutable.
* Authentication by bearer token (401 ``Status`` when missing or unknown; tokens can
  be rotated and revoked) and per-token permissions by verb and resource, subresources as RBAC names them
  (``nodes/status``), namespaced rules as a Role grants them (403
  ``Status`` with the real message shape).
* ``GET ...?resourceVersion=0`` is served from a "watch cache" that can be frozen
  (:meth:`~ApiServerEmulator.freeze_cache`) to reproduce stale cached reads.
* Faults: any status (500, 503, 429 with ``Retry-After`` and
  ``details.retryAfterSeconds``) with nothing applied; responses slower than the
  client's timeout (the change is still made); connections dropped halfway through
  the response body (the change is made). A hook can run "another writer" just
  before a matching request (of one user, if asked), to stage races.
* A request log (method, path, query, content type, status, timestamp, user,
  injected fault, parsed body) for assertions and request counting.
* ``SelfSubjectAccessReview`` (``authorization.k8s.io/v1``) and ``SelfSubjectReview``
  (``authentication.k8s.io/v1``), which any authenticated token may create: answered
  201 about the caller by its rules (no ``reason``: the emulator has no bindings to name)
  and its user name and groups, stored nowhere.
* Server-side dry runs (``dryRun=All`` on create, update, patch and delete): validated,
  admitted and answered as the real write would be, nothing stored, no version handed
  out; any other value fails with the options' 422.
* Validating admission policies (:class:`ValidatingPolicy`, arranged with
  :meth:`~ApiServerEmulator.add_validating_policy`): run on every write over HTTP after
  validation, no-op writes and dry runs included, each judging the operation, the
  resource, the user and the token's extra claims (:attr:`Principal.extra`), the object
  and the old object; a denial answers 403 Forbidden in kube-apiserver's words for a
  ValidatingAdmissionPolicy. The policy's object is served (name only) for reads.

Held to: kube-apiserver 1.36's answers to the request shapes gfd and its tests make,
recorded in ``tests/records/kube-apiserver/answers.json`` (re-recorded against a real
server by :mod:`tests.emulator.record_answers`; replayed by ``test_recorded_answers.py``),
and, live, by ``tests/realkube/test_emulator_parity.py`` when a real server is given.

The review and dry-run answers follow Kubernetes' API reference and source; the record
of kube-apiserver's answers holds none of them yet (they were not in its script when it
was captured).

Not reproduced: watches, list pagination, label selectors, server-side
apply, admission webhooks and the CEL of real ValidatingAdmissionPolicy objects (a
:class:`ValidatingPolicy` judges in Python; tests pass the project's policies through
``tests/deploy/admission_model.py``), RBAC objects (permissions
are set per token directly), strategic-merge directives (``$patch`` and friends are
refused with 400 rather than misapplied), most of each kind's schema (only
metadata is validated; ``spec`` and ``status`` are stored as given), status
subresources, ``generateName``, finalizers and garbage collection, API discovery,
protobuf, priority-and-fairness queuing (429 only when injected), and a watch cache
that lags by itself (it is either fresh or explicitly frozen).
"""

from tests.emulator.server import (
    GFD_RULES,
    AdmissionAttributes,
    ApiServerEmulator,
    Fault,
    Principal,
    RecordedRequest,
    ValidatingPolicy,
    seed_gfd_cluster,
    status_body,
)

__all__ = [
    "GFD_RULES",
    "AdmissionAttributes",
    "ApiServerEmulator",
    "Fault",
    "Principal",
    "RecordedRequest",
    "ValidatingPolicy",
    "seed_gfd_cluster",
    "status_body",
]
