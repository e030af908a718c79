"""The three PATCH forms the API server accepts for built-in objects.

Owns the patch semantics of the emulator:

* JSON merge patch (RFC 7386): maps merge recursively, ``null`` deletes a key
  (deleting an absent key is not an error), any other value replaces.
* Strategic merge patch: as merge patch for maps; lists that Kubernetes declares
  with a merge key (owner references by ``uid``, taints by ``key``, node conditions
  and addresses by ``type``) merge element-wise, ``metadata.finalizers`` merges as a
  set, every other list is replaced. Patch directives (``$patch``,
  ``$retainKeys``, ``$deleteFromPrimitiveList``, ``$setElementOrder``) are refused
  with :class:`UnsupportedPatch` rather than misapplied.
* JSON Patch (RFC 6902, pointers per RFC 6901) through the ``jsonpatch`` package:
  ``test`` is honoured, removing an absent path fails, and any failing operation
  rejects the whole patch. One departure from the RFC, as kube-apiserver's library
  (evanphx/json-patch v4, ``Patch.test``) has it: a ``test`` whose value is ``null``
  passes when the key is missing from an object that exists (the library reads a
  missing key as nil), so a client can make a write conditional on a key's absence;
  it still fails when the parent is missing or the key holds a value.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer


class PatchError(Exception):
    """The patch could not be applied to the object (the API server answers 422)."""


class MalformedPatch(Exception):
    """The patch document itself is invalid (the API server answers 400)."""


class UnsupportedPatch(Exception):
    """A strategic-merge feature this emulator does not implement (answered 400)."""


STRATEGIC_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("spec", "taints"): "key",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
STRATEGIC_SET_LISTS = frozenset({("metadata", "finalizers")})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new document."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Kubernetes strategic merge patch for the subset described in the module doc."""
    if not isinstance(patch, dict):
        if isinstance(patch, list) and isinstance(target, list):
            return _merge_list(target, patch, path)
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise UnsupportedPatch(
                f"strategic merge directive {key!r} at {'.'.join(path) or '(root)'} is not "
                "implemented by the API server emulator"
            )
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, (*path, key))
    return result


def _merge_list(target: list[Any], patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    if path in STRATEGIC_SET_LISTS:
        merged = list(target)
        merged.extend(item for item in patch if item not in merged)
        return merged
    merge_key = STRATEGIC_MERGE_KEYS.get(path)
    if merge_key is None:
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise MalformedPatch(
                f"{'.'.join(path)}: every element must be an object with {merge_key!r}"
            )
        for index, existing in enumerate(merged):
            if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                merged[index] = strategic_merge_patch(existing, item, path)
                break
        else:
            merged.append(copy.deepcopy(item))
    return merged


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON Patch; the whole patch fails if any operation fails."""
    if not isinstance(operations, list):
        raise MalformedPatch("a JSON Patch must be a JSON array of operations")
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise MalformedPatch(f"operation {index} needs 'op' and 'path'")
    document = copy.deepcopy(target)
    try:
        # One operation at a time: a null test is judged against the document as the
        # operations before it left it, as the API server's library does.
        for operation in operations:
            if operation["op"] == "test" and "value" in operation and operation["value"] is None:
                _test_null(document, operation["path"])
                continue
            document = jsonpatch.JsonPatch([operation]).apply(document, in_place=True)
    except jsonpatch.InvalidJsonPatch as exc:
        raise MalformedPatch(str(exc)) from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(str(exc)) from exc
    return document


def _test_null(document: Any, path: Any) -> None:
    """evanphx/json-patch's ``test`` with a null value: the parent must exist; the key
    may be missing or hold null (an array index must exist)."""
    if not isinstance(path, str):
        raise MalformedPatch("a JSON Patch path must be a string")
    pointer = jsonpointer.JsonPointer(path)
    if not pointer.parts:
        raise PatchError(f"testing value {path} failed: the document is not null")
    parent = jsonpointer.JsonPointer.from_parts(pointer.parts[:-1]).resolve(document)
    key = pointer.parts[-1]
    if isinstance(parent, dict):
        value = parent.get(key)
    elif isinstance(parent, list):
        value = pointer.walk(parent, key)
    else:
        raise PatchError(f"test operation does not apply: is missing path: {path}")
    if value is not None:
        raise PatchError(f"testing value {path} failed")
