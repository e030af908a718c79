"""Kubernetes label syntax, and the reference's value sanitiser made safe.

This module owns what a valid label is (apimachinery's rules, see
``reference/NFD-AND-K8S.md``) and how free text from the hardware (product
names, DMI strings) becomes a label value; a product value keeps its
``-MIG-<profile>`` / ``-SHARED`` suffix within 63 characters. Everything that leaves the labels
layer has passed :func:`is_valid_key` and :func:`is_valid_value`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_VALUE_LENGTH = 63
MAX_NAME_LENGTH = 63
MAX_PREFIX_LENGTH = 253

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The reference keeps only these characters before splitting on white space.
_REFERENCE_DROPPED = re.compile(r"[^A-Za-z0-9\-_. ]")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
#: The product of a GPU whose name sanitises to nothing (only punctuation, or non-ASCII).
FALLBACK_PRODUCT = "unknown"


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key, or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and "/" in prefix:
        return "a key has at most one '/'"
    if slash:
        if not prefix:
            return "the prefix before '/' is empty"
        if len(prefix) > MAX_PREFIX_LENGTH:
            return f"the prefix is longer than {MAX_PREFIX_LENGTH} characters"
        if not _DNS_SUBDOMAIN.match(prefix):
            return "the prefix is not a lower-case DNS subdomain"
    if not name:
        return "the name is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"the name is longer than {MAX_NAME_LENGTH} characters"
    if not _NAME.match(name):
        return "the name must be alphanumeric, '-', '_' or '.', starting and ending alphanumeric"
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None when it is."""
    if len(value) > MAX_VALUE_LENGTH:
        return f"longer than {MAX_VALUE_LENGTH} characters"
    if not _VALUE.match(value):
        return "must be empty or alphanumeric, '-', '_' or '.', starting and ending alphanumeric"
    return None


def is_valid_key(key: str) -> bool:
    return key_problem(key) is None


def is_valid_value(value: str) -> bool:
    return value_problem(value) is None


def reference_sanitise(text: str) -> str:
    """The reference's sanitiser: keep ``[A-Za-z0-9-_. ]``, split on white space, join with '-'.

    ``NVIDIA-TITAN-X-(Pascal)`` → ``NVIDIA-TITAN-X-Pascal``.
    """
    return "-".join(_REFERENCE_DROPPED.sub("", text).split())


def sanitise_value(text: str) -> str:
    """A valid label value made from free text, equal to the reference's where that is valid.

    After the reference's sanitiser, characters that may not start or end a value
    are trimmed and the result is cut to 63 characters (then trimmed again), so
    a hostile or very long name still yields a valid value. May return "".
    """
    value = _EDGE.sub("", reference_sanitise(text))
    if len(value) > MAX_VALUE_LENGTH:
        value = _EDGE.sub("", value[:MAX_VALUE_LENGTH])
    return value


def product_value(
    name: str, suffixes: Sequence[str] = (), *, max_length: int = MAX_VALUE_LENGTH
) -> str:
    """``<model>[-<suffix>...]``: a valid product value of at most ``max_length`` characters.

    The model is ``name`` sanitised (:func:`sanitise_value`), or :data:`FALLBACK_PRODUCT`
    when nothing is left of it. The suffixes (``MIG``, ``1g.10gb``, ``SHARED``, all valid
    inside a value) carry the meaning a selector depends on, so when the whole would be
    too long the model part is cut instead: to the characters that leave room for
    ``-<suffixes>``, then trimmed to an alphanumeric end. The same name and suffixes always
    give the same value.
    """
    model = sanitise_value(name) or FALLBACK_PRODUCT
    tail = "".join(f"-{suffix}" for suffix in suffixes)
    room = max_length - len(tail)
    if len(model) > room:
        model = _EDGE.sub("", model[: max(room, 1)])
    return model + tail
