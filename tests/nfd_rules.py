"""A reader of NFD feature files that follows NFD's documented rules (reference/NFD-AND-K8S.md).

Tests use it to check that what gfd writes is read by NFD as the labels gfd meant:
lines split on newline and trimmed, '#' comments, ``# +expiry-time=`` sticky
directives that drop expired lines, ``# +no-label`` for the next key line, keys
split on the first '=', a bare key meaning ``true``, and the 64 KiB file limit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path

NFD_MAX_FILE_BYTES = 65536
NFD_DEFAULT_PREFIX = "feature.node.kubernetes.io/"


def parse_feature_file(content: bytes, now: dt.datetime) -> dict[str, str] | None:
    """Labels NFD would take from one file; None when NFD skips the whole file."""
    if len(content) > NFD_MAX_FILE_BYTES:
        return None
    labels: dict[str, str] = {}
    expiry: dt.datetime | None = None
    skip_next_label = False
    for raw in content.decode("utf-8").split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                directive = line[3:]
                if directive.startswith("expiry-time="):
                    # An unparsable expiry is logged by NFD, and the previous one stays.
                    with contextlib.suppress(ValueError):
                        expiry = dt.datetime.fromisoformat(
                            directive[len("expiry-time=") :].replace("Z", "+00:00")
                        )
                elif directive == "no-label":
                    skip_next_label = True
            continue
        if expiry is not None and expiry < now:
            skip_next_label = False
            continue
        key, sep, value = line.partition("=")
        if not sep:
            value = "true"
        if skip_next_label:
            skip_next_label = False
            continue
        if "/" not in key:
            key = NFD_DEFAULT_PREFIX + key
        labels[key] = value
    return labels


def read_features_dir(directory: Path, now: dt.datetime) -> dict[str, str]:
    """All labels of a features.d directory: top level only, dot-files skipped, lexical order."""
    labels: dict[str, str] = {}
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.name.startswith(".") or not path.is_file():
            continue
        parsed = parse_feature_file(path.read_bytes(), now)
        if parsed is not None:
            labels.update(parsed)
    return labels
