"""The doctor's conversation with the API server: bounded, read-only, one attempt a request.

This module owns how ``gfd doctor`` reaches the cluster: where credentials come from
(``--kubeconfig``, else the pod's service account when ``KUBERNETES_SERVICE_HOST`` says it
runs in a pod), a client whose every request has a timeout (:data:`REQUEST_TIMEOUT`) and
is tried once, and the questions it asks: who am I (``SelfSubjectReview``), may I
(``SelfSubjectAccessReview``), and plain reads. After the first request that gets no
answer at all (refused, timed out, TLS), every later one fails at once with the same
reason: a cluster that is down costs one timeout, not one per check. Writes are only
ever sent by the sinks as dry runs (:mod:`gfd.doctor.checks.admission`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from gfd.app.api_access import ApiAccess
from gfd.base.errors import ConfigError, GfdError, SinkError
from gfd.kube_api import JSON, KubeApiError, KubeApiPermanentError, KubeClient, KubeResponse

#: Seconds one request may take; the doctor never waits longer for an answer.
REQUEST_TIMEOUT = 5.0
#: Where a pod learns the API server's address (set by the kubelet in every pod).
IN_CLUSTER_HOST = "KUBERNETES_SERVICE_HOST"
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SELF_SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class NoCluster(GfdError):
    """The doctor has no way to the API server (no credentials, or they cannot be read)."""


class DoctorApi:
    """Requests to the API server for the doctor's checks, each tried once.

    ``client`` is the doctor's own :class:`~gfd.kube_api.KubeClient` (its retry policy's
    deadline bounds the sinks' dry runs, which send through it directly).
    """

    def __init__(self, client: KubeClient, *, credentials: str) -> None:
        self.client = client
        #: Where the credentials came from (``--kubeconfig PATH``, the pod's service account).
        self.credentials = credentials
        self.stop = threading.Event()
        #: Why the API server cannot be reached, once a request found out.
        self.unreachable: str | None = None
        self._unanswered: KubeApiError | KubeApiPermanentError | None = None
        self._user: str | None = None
        self._asked_user = False

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        accept_statuses: Collection[int] = (),
    ) -> KubeResponse:
        """One attempt; raises :class:`~gfd.kube_api.KubeApiError` (no answer, or a 5xx)
        or :class:`~gfd.kube_api.KubeApiPermanentError` (a 4xx)."""
        if self._unanswered is not None:
            # The request that found the server silent, as it failed: nothing is sent.
            raise self._unanswered
        try:
            # A deadline of now: the client's retry loop makes exactly one attempt.
            return self.client.request(
                method,
                path,
                stop=self.stop,
                deadline=self.client.clock(),
                query=query,
                body=body,
                content_type=JSON,
                accept_statuses=accept_statuses,
            )
        except (KubeApiError, KubeApiPermanentError) as exc:
            # No status: refused, timed out, or TLS (no request could be sent).
            if exc.status is None:
                self.unreachable, self._unanswered = str(exc), exc
            raise

    def user(self) -> str | None:
        """The user name the API server knows these credentials as (``SelfSubjectReview``,
        Kubernetes 1.28+); None where the server does not serve the review. Raises what
        :meth:`request` raises otherwise (401 for rejected credentials)."""
        if not self._asked_user:
            response = self.request(
                "POST",
                SELF_SUBJECT_REVIEWS,
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                accept_statuses=(404,),
            )
            name = None
            if response.status != 404:
                status = response.json_object("SelfSubjectReview").get("status")
                info = status.get("userInfo") if isinstance(status, Mapping) else None
                found = info.get("username") if isinstance(info, Mapping) else None
                name = found if isinstance(found, str) and found else None
            self._user, self._asked_user = name, True
        return self._user

    def may(self, access: ApiAccess) -> tuple[bool, str]:
        """Whether these credentials may do ``access`` (``SelfSubjectAccessReview``, which
        every authenticated user may create), and the server's reason or evaluation error."""
        response = self.request(
            "POST",
            SELF_SUBJECT_ACCESS_REVIEWS,
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": access.review_attributes()},
            },
        )
        status = response.json_object("SelfSubjectAccessReview").get("status")
        if not isinstance(status, Mapping):
            raise SinkError("SelfSubjectAccessReview: the API server sent no status")
        why = status.get("evaluationError") or status.get("reason") or ""
        return status.get("allowed") is True, why if isinstance(why, str) else ""

    def close(self) -> None:
        self.client.close()


def credentials_source(kubeconfig: str | None, environment: Mapping[str, str]) -> str | None:
    """How the doctor would authenticate: ``--kubeconfig PATH``, the pod's service account,
    or None when there is neither (not in a pod, no kubeconfig)."""
    if kubeconfig is not None:
        return f"--kubeconfig {kubeconfig}"
    if environment.get(IN_CLUSTER_HOST):
        return "the pod's service account"
    return None


def connect(
    kubeconfig: str | None,
    environment: Mapping[str, str],
    *,
    connect_kubernetes: Callable[..., KubeClient],
) -> DoctorApi:
    """The doctor's API, or :class:`NoCluster` saying why there is none."""
    from gfd.kube_api import RetryPolicy

    source = credentials_source(kubeconfig, environment)
    if source is None:
        raise NoCluster("no --kubeconfig, and not in a pod (KUBERNETES_SERVICE_HOST is unset)")
    # The sinks' dry runs go through the client itself: one short deadline bounds them.
    policy = RetryPolicy(initial_delay=0.5, max_delay=1.0, deadline=REQUEST_TIMEOUT)
    try:
        client = connect_kubernetes(
            kubeconfig=kubeconfig,
            request_timeout=REQUEST_TIMEOUT,
            retry_policy=policy,
            in_cluster_host_env=environment,
        )
    except ConfigError as exc:
        raise NoCluster(f"{source}: {exc}") from exc
    return DoctorApi(client, credentials=source)
