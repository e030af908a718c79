"""A reader of NFD feature files that follows NFD's rules, held to NFD's record.

Tests use it to check that what gfd writes is read by NFD as the labels gfd meant. The
worker's local source: lines split on newline and trimmed, '#' comments, ``# +expiry-time=``
sticky directives that drop expired lines, ``# +no-label`` for the next key line that is not
expired (it also drops the same key set earlier in that file), keys split on the first '=', a
bare key meaning ``true``, dot-files skipped, files merged in lexical order, and the 64 KiB
file limit. Then nfd-master: unprefixed keys get ``feature.node.kubernetes.io/``, and each
label whose key or value Kubernetes rejects, or whose namespace is ``kubernetes.io`` (or a
subdomain of it but NFD's own), is dropped on its own.
``tests/sinks/test_nfd_record.py`` holds this model to ``tests/records/nfd/``.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

NFD_MAX_FILE_BYTES = 65536
NFD_DEFAULT_PREFIX = "feature.node.kubernetes.io/"
#: Namespaces under kubernetes.io that nfd-master lets through: its own.
_NFD_NAMESPACES = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
_NFD_SUBNAMESPACE_SUFFIXES = (".feature.node.kubernetes.io", ".profile.node.kubernetes.io")

# Kubernetes' label rules (apimachinery's IsQualifiedName and IsValidLabelValue).
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: Go's time.RFC3339 layout: a full date, a time, and a zone (Z or an offset).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def _parse_expiry(value: str) -> dt.datetime | None:
    value = value.strip()
    if not _RFC3339.fullmatch(value):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def worker_labels(content: bytes, now: dt.datetime) -> dict[str, str] | None:
    """The keys the worker's local source takes from one file, as written (no prefix added,
    nothing validated); None when it skips the whole file."""
    if len(content) > NFD_MAX_FILE_BYTES:
        return None
    labels: dict[str, str] = {}
    # The worker starts each file with an expiry of "now", which is never before now.
    expiry: dt.datetime | None = None
    skip_next_label = False
    for raw in content.decode("utf-8", errors="replace").split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                name, _, value = line[3:].partition("=")
                if name == "expiry-time":
                    # An unparsable expiry is logged by NFD, and the previous one stays.
                    expiry = _parse_expiry(value) or expiry
                elif name == "no-label":
                    skip_next_label = True
            continue
        if expiry is not None and expiry < now:
            # An expired line is passed over before the no-label directive is consumed.
            continue
        key, sep, value = line.partition("=")
        if not sep:
            value = "true"
        if skip_next_label:
            skip_next_label = False
            labels.pop(key, None)
            continue
        labels[key] = value
    return labels


def _valid_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _NAME.fullmatch(name) is not None


def _allowed_namespace(key: str) -> bool:
    namespace = key.rpartition("/")[0]
    if namespace == "kubernetes.io" or namespace.endswith(".kubernetes.io"):
        return namespace in _NFD_NAMESPACES or namespace.endswith(_NFD_SUBNAMESPACE_SUFFIXES)
    return True


def master_labels(labels: dict[str, str]) -> dict[str, str]:
    """What nfd-master puts on the Node from the worker's keys: unprefixed keys get NFD's
    prefix (unless that prefixed key is also there), then each invalid label is dropped."""
    prefixed: dict[str, str] = {}
    for key, value in labels.items():
        if "/" in key:
            prefixed[key] = value
        elif NFD_DEFAULT_PREFIX + key not in labels:
            prefixed[NFD_DEFAULT_PREFIX + key] = value
    return {
        key: value
        for key, value in prefixed.items()
        if _valid_key(key)
        and _allowed_namespace(key)
        and len(value) <= 63
        and (value == "" or _NAME.fullmatch(value) is not None)
    }


def parse_feature_file(content: bytes, now: dt.datetime) -> dict[str, str] | None:
    """Labels NFD would put on the Node from one file; None when NFD skips the whole file."""
    taken = worker_labels(content, now)
    return None if taken is None else master_labels(taken)


def read_features_dir(directory: Path, now: dt.datetime) -> dict[str, str]:
    """All labels of a features.d directory: top level only, dot-files skipped, lexical order
    (a later file's key wins), then nfd-master's prefix and checks."""
    taken: dict[str, str] = {}
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.name.startswith(".") or not path.is_file():
            continue
        parsed = worker_labels(path.read_bytes(), now)
        if parsed is not None:
            taken.update(parsed)
    return master_labels(taken)
