"""The ``rbac`` link: gfd's credentials may make every call its configured parts make.

The calls are :func:`gfd.app.api_access.required_access` of the settings; each is asked of
the API server as a ``SelfSubjectAccessReview`` (``authorization.k8s.io/v1``), which any
authenticated user may create. Each one refused is named, with what needs it and the
RBAC rule of ``deploy/`` (and the chart) that grants it.
"""

from __future__ import annotations

from gfd.app.api_access import ApiAccess, required_access
from gfd.base.errors import GfdError
from gfd.doctor.api import DoctorApi, NoCluster
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, cannot_tell, ok, problem


def can_i(access: ApiAccess, user: str | None) -> str:
    """The kubectl command that asks the same question."""
    command = f"kubectl auth can-i {access.verb} {access.resource}"
    if access.group:
        command += f".{access.group}"
    if access.subresource:
        command += f" --subresource={access.subresource}"
    if access.namespace:
        command += f" -n {access.namespace}"
    if user:
        command += f" --as={user}"
    return command


def examine(examination: Examination) -> Answer:
    needed = required_access(examination.settings)
    if not needed:
        sinks = ", ".join(examination.wanted_sinks) or "none"
        return ok(f"the configured sinks ({sinks}) make no API call")
    api = examination.api
    if isinstance(api, NoCluster) or api.unreachable is not None:
        return cannot_tell("no answer from the API server (see the cluster line)")
    assert isinstance(api, DoctorApi)
    refused: list[tuple[ApiAccess, str]] = []
    try:
        for access in needed:
            allowed, why = api.may(access)
            if not allowed:
                refused.append((access, why))
    except GfdError as exc:
        return cannot_tell(f"the API server could not review gfd's access: {exc}")
    try:
        user = api.user()
    except GfdError:
        user = None
    who = user or api.credentials
    if not refused:
        asked = ", ".join(access.describe() for access in needed)
        return ok(f"{who} may {asked}")
    missing = "; ".join(
        f"{access.describe()} (for {access.needed_by}){f': {why}' if why else ''}"
        for access, why in refused
    )
    rules = []
    for access, _ in refused:
        if access.granted_by not in rules:
            rules.append(access.granted_by)
    return problem(
        f"{who} may not: {missing}",
        f"grant it with {' and '.join(rules)} bound to gfd's ServiceAccount; "
        f"check with {can_i(refused[0][0], user)}",
    )
