"""The feature-file cases whose outcome on the Node is recorded from node-feature-discovery.

Each case is a features.d directory (file name -> bytes) and what NFD put on the Node from
it: the worker's "local" source parses the files, nfd-master filters and prefixes the keys.
CI replays the record against the project's model of those rules (``tests/nfd_rules.py``,
which the feature-file tests use to judge what gfd writes); with NFD's worker and master
built (``NFD_WORKER_BIN``, ``NFD_RUN_PIPELINE``, ``KUBEBUILDER_ASSETS``),
``tests/realkube/test_nfd_record.py`` runs the same cases through the real pipeline, and
``python -m tests.records.nfd_cases --record`` rewrites the record from what it saw.

Expiry times are fixed far in the past or the future, so a case's outcome does not depend
on the day it runs.
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.records.store import RECORDS_DIR, inputs_sha256

RECORD = RECORDS_DIR / "nfd" / "local-source.json"
RERECORD = (
    "NFD_WORKER_BIN=... NFD_RUN_PIPELINE=... KUBEBUILDER_ASSETS=... "
    "python -m tests.records.nfd_cases --record"
)
PAST = "2000-01-01T00:00:00Z"
FUTURE = "2999-01-01T00:00:00Z"


@dataclass(frozen=True)
class FeatureCase:
    case_id: str
    #: What the case is about, for a reader of the record and of a failure.
    about: str
    files: dict[str, bytes]

    def inputs(self) -> dict[str, Any]:
        return {
            "files": {
                name: base64.b64encode(content).decode("ascii")
                for name, content in sorted(self.files.items())
            }
        }

    @property
    def inputs_hash(self) -> str:
        return inputs_sha256(self.inputs())

    def write(self, directory: Path) -> None:
        for name, content in self.files.items():
            (directory / name).write_bytes(content)


def _case(case_id: str, about: str, **files: str | bytes) -> FeatureCase:
    encoded = {
        name.replace("__", "."): content if isinstance(content, bytes) else content.encode()
        for name, content in files.items()
    }
    return FeatureCase(case_id, about, encoded)


def _sized(size: int) -> bytes:
    """A valid file of exactly ``size`` bytes: one label, then padding comment lines."""
    head = b"nvidia.com/size-probe=yes\n"
    filler = size - len(head)
    lines = []
    while filler > 0:
        line = min(filler, 1000)
        lines.append(b"#" + b"x" * (line - 2) + b"\n" if line >= 2 else b"\n")
        filler -= line
    return head + b"".join(lines)


CASES: tuple[FeatureCase, ...] = (
    _case(
        "plain-lines",
        "key=value lines; a bare key means true; a value may itself hold '='",
        gfd="nvidia.com/gpu.count=8\nnvidia.com/gpu.present\nnvidia.com/a=b=c\n",
    ),
    _case(
        "no-prefix",
        "a key without a prefix gets feature.node.kubernetes.io/",
        gfd="plain-key=1\nnvidia.com/gpu.count=2\n",
    ),
    _case(
        "trimmed-lines",
        "lines are trimmed (CR, tabs, spaces); blank lines and '#' comments are skipped",
        gfd="  nvidia.com/gpu.count=4\r\n\n\t# a comment\n#nvidia.com/hidden=1\nnvidia.com/x=y  \n",
    ),
    _case(
        "spaces-around-equals",
        "no trimming around '=': 'key = v' is the key 'key ', which nfd-master rejects",
        gfd="nvidia.com/bad = 1\nnvidia.com/good=1\n",
    ),
    _case(
        "invalid-lines-dropped-one-by-one",
        "an invalid key or value drops that line only",
        gfd=(
            "nvidia.com/ok=1\nnvidia.com/has space=1\nnvidia.com/v=not valid\n"
            f"nvidia.com/long={'a' * 64}\nnvidia.com/max={'a' * 63}\nnvidia.com/empty=\n"
        ),
    ),
    _case(
        "denied-namespace",
        "kubernetes.io namespaces are denied but for feature.node.kubernetes.io",
        gfd=(
            "kubernetes.io/arch=x\nnode.kubernetes.io/x=1\nfeature.node.kubernetes.io/f=1\n"
            "nvidia.com/ok=1\n"
        ),
    ),
    _case(
        "no-label-next-line-only",
        "'# +no-label' skips the next key line only",
        gfd="# +no-label\nnvidia.com/skipped=1\nnvidia.com/kept=1\n",
    ),
    _case(
        "no-label-removes-an-earlier-value",
        "a skipped key also drops the same key set earlier in that file",
        gfd="nvidia.com/k=1\n# +no-label\nnvidia.com/k=2\n",
    ),
    _case(
        "expiry-past-and-future",
        "'# +expiry-time=' applies to the lines after it until the next one",
        gfd=(
            f"nvidia.com/before=1\n# +expiry-time={PAST}\nnvidia.com/expired=1\n"
            f"# +expiry-time={FUTURE}\nnvidia.com/fresh=1\n"
        ),
    ),
    _case(
        "expiry-unparsable-keeps-the-previous",
        "an unparsable expiry is logged and the one before stays in force",
        gfd=f"# +expiry-time={PAST}\nnvidia.com/a=1\n# +expiry-time=tomorrow\nnvidia.com/b=1\n",
    ),
    _case(
        "expiry-no-space-is-a-comment",
        "'#+expiry-time' (no space after '#') is a plain comment, not a directive",
        gfd=f"#+expiry-time={PAST}\nnvidia.com/a=1\n",
    ),
    _case(
        "no-label-outlives-expired-lines",
        "a '# +no-label' before expired lines applies to the first line that is not expired",
        gfd=(
            f"# +expiry-time={PAST}\n# +no-label\nnvidia.com/old=1\n"
            f"# +expiry-time={FUTURE}\nnvidia.com/new=1\nnvidia.com/after=1\n"
        ),
    ),
    _case(
        "unknown-directive",
        "an unknown directive is logged and ignored",
        gfd="# +no-such-directive\nnvidia.com/a=1\n",
    ),
    _case(
        "dot-files-skipped",
        "files whose names start with '.' are not read",
        __staging="nvidia.com/staged=1\n",
        gfd="nvidia.com/a=1\n",
    ),
    _case(
        "later-file-wins",
        "several files setting one key: lexical file order, the later wins",
        a_first="nvidia.com/k=first\nnvidia.com/only-a=1\n",
        b_second="nvidia.com/k=second\n",
    ),
    _case("size-at-the-limit", "a file of 65536 bytes is read", gfd=_sized(65536)),
    _case("size-over-the-limit", "a file of 65537 bytes is skipped whole", gfd=_sized(65537)),
)


def record_path() -> Path:
    return RECORD


def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record",
        action="store_true",
        help="run every case through the real NFD pipeline and rewrite the record",
    )
    parser.add_argument(
        "--built",
        default="",
        help="with --record: what was run (NFD's tag and commit, its client libraries, anything "
        "changed to build it), kept as the record's provenance",
    )
    args = parser.parse_args()
    if args.record and not args.built:
        parser.error("--record needs --built: the record must say what NFD build it captured")
    if not args.record:
        for case in CASES:
            print(f"{case.case_id}: {case.about}")
        return 0
    env = {**os.environ, "GFD_RECORD_NFD": str(RECORD), "GFD_RECORD_NFD_BUILT": args.built}
    return subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/realkube/test_nfd_record.py"],
        env=env, cwd=RECORDS_DIR.parents[1],
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(_main())
