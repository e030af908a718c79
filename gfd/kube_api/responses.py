"""What comes back from the API server, read with bounds and checked before use.

This module owns the response side of a request: the body read as raw bytes, never more
than :data:`MAX_RESPONSE_BYTES` (gfd never builds the client's model objects, which would
cost time and memory for nothing); the server's ``Status`` message for an error; and the
shape check of an object's metadata, so that a proxy or a broken server that sends
garbage fails one cycle with one line saying what was wrong, never the agent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from gfd.base.errors import SinkError, echo, shorten
from gfd.base.frozen import frozen_dataclass

#: The most of one response body gfd reads. etcd stores objects of at most 1.5 MiB,
#: so a Node or NodeFeature is far smaller; a larger answer is not an object of ours.
MAX_RESPONSE_BYTES = 8 << 20


@frozen_dataclass
class KubeResponse:
    """An HTTP response from the API server, body kept as bytes."""

    status: int
    body: bytes
    #: Header names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` when it is not, or is nested absurdly deep)."""
        try:
            return json.loads(self.body) if self.body else None
        except RecursionError as exc:
            raise ValueError("JSON nested too deeply") from exc

    def json_object(self, what: str) -> dict[str, Any]:
        """The body as a Kubernetes object whose metadata has the shapes the API defines.

        Raises :class:`SinkError` with one line naming ``what`` and the first thing that
        is wrong: a proxy or a broken server that sends garbage fails one cycle, never
        the agent.
        """
        try:
            data = self.json()
        except ValueError as exc:
            raise SinkError(
                f"{what}: API server sent invalid JSON: {shorten(str(exc), 120)}"
            ) from exc
        problem = object_shape_problem(data)
        if problem is not None:
            raise SinkError(f"{what}: API server sent a malformed object: {problem}")
        assert isinstance(data, dict)
        return data


def read_response(raw: Any, method: str, path: str) -> KubeResponse:
    """The client's raw urllib3 response as a :class:`KubeResponse`, its body bounded."""
    data = _read_bounded_body(raw, method, path)
    headers = {name.lower(): value for name, value in raw.headers.items()}
    return KubeResponse(status=raw.status, body=data or b"", headers=headers)


def _read_bounded_body(raw: Any, method: str, path: str) -> bytes:
    """The response body, at most :data:`MAX_RESPONSE_BYTES`; a larger one fails the request."""
    declared = raw.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
        raise SinkError(
            f"{method} {path}: the API server announced a {declared}-byte answer, over "
            f"gfd's limit of {MAX_RESPONSE_BYTES}"
        )
    response = getattr(raw, "response", None)
    if response is None or not hasattr(response, "read"):
        return bytes(raw.read() or b"")
    data = bytes(response.read(MAX_RESPONSE_BYTES + 1) or b"")
    if len(data) > MAX_RESPONSE_BYTES:
        # Bytes remain unread: close the connection rather than hand it back to the pool.
        response.close()
        raise SinkError(
            f"{method} {path}: the API server's answer is over gfd's limit of "
            f"{MAX_RESPONSE_BYTES} bytes"
        )
    return data


def status_message(body: bytes) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, or the body itself, shortened."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    text = body.decode("utf-8", "replace").strip()
    return text[:300] if text else "(empty body)"


def _kind_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else f"a {type(value).__name__}"
    )


def object_shape_problem(data: Any) -> str | None:
    """What is wrong with the shape of an object's metadata, or None when nothing is."""
    if not isinstance(data, dict):
        return f"{_kind_name(data)}, not an object"
    metadata = data.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return f"metadata is {_kind_name(metadata)}, not an object"
    for field_name in ("labels", "annotations"):
        value = metadata.get(field_name)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"metadata.{field_name} is {_kind_name(value)}, not a map of strings"
        for key, item in value.items():
            if not isinstance(item, str):
                return f"metadata.{field_name}[{echo(key)}] is {_kind_name(item)}, not a string"
    for field_name in ("resourceVersion", "name", "uid"):
        value = metadata.get(field_name)
        if value is not None and not isinstance(value, str):
            return f"metadata.{field_name} is {_kind_name(value)}, not a string"
    owners = metadata.get("ownerReferences")
    if owners is not None and (
        not isinstance(owners, list) or not all(isinstance(o, dict) for o in owners)
    ):
        return "metadata.ownerReferences is not a list of objects"
    return None
