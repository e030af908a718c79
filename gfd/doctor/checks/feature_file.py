"""The ``feature-file`` link: the folder of gfd's feature file, where NFD's worker reads.

With the feature-file sink configured (the default), the folder of ``--output-file`` must
exist and be writable by this user, or be creatable by it; what is at the file's own path
must be a regular file if anything. In a pod the folder must be a mount (the host's
``features.d``): a folder of the container's own filesystem takes the file, and NFD's
worker, which reads the host's folder, never sees it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gfd.config.options import DEFAULT_OUTPUT_FILE
from gfd.doctor.api import IN_CLUSTER_HOST
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, ok, problem

#: The host's folder that NFD's worker reads (and gfd writes into by default).
HOST_FEATURES_DIR = str(Path(DEFAULT_OUTPUT_FILE).parent)
#: What writing a file into a folder takes.
WRITABLE = os.W_OK | os.X_OK
RUN_AS_ROOT = (
    "run gfd as root (NFD's worker and the kubelet create features.d as root, mode 0755; "
    "deploy/components/feature-file runs gfd with runAsUser 0 and no capabilities), or "
    "point --output-file at a folder this user may write"
)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _nearest_existing(folder: Path) -> Path:
    for candidate in (folder, *folder.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _mounted(examination: Examination, folder: Path) -> bool:
    """Whether ``folder`` or a folder above it (below ``/``) is a mount point."""
    return any(
        examination.is_mount(str(candidate))
        for candidate in (folder, *folder.parents)
        if candidate != Path(candidate.anchor)
    )


def examine(examination: Examination) -> Answer:
    settings = examination.settings
    if "feature-file" not in examination.wanted_sinks:
        if settings.no_output_file:
            return ok("not used (--no-output-file)")
        return ok("not used: the labels go to stdout (--output-file -)")
    target = Path(settings.output_file)
    folder = target.parent
    user = f"uid {os.geteuid()}"
    try:
        mode: int | None = os.lstat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        return problem(f"this user ({user}) may not look at {target}: {exc.strerror}", RUN_AS_ROOT)
    if mode is not None and not stat.S_ISREG(mode):
        return problem(
            f"{target} exists and is {_kind(mode)}: gfd never writes through or replaces it",
            "remove it, or choose another --output-file",
        )
    in_pod = bool(examination.environment.get(IN_CLUSTER_HOST))
    if in_pod and not _mounted(examination, folder):
        return problem(
            f"{folder} is no mount in this container: gfd's file would stay inside the "
            "container, where NFD's worker (which reads the host's folder) never sees it",
            f"mount the host's {HOST_FEATURES_DIR} at {folder} (a hostPath volume, as "
            "deploy/components/feature-file does), the folder nfd-worker reads",
        )
    existing = _nearest_existing(folder)
    if existing != folder:
        if not os.path.isdir(existing) or not os.access(existing, WRITABLE):
            return problem(
                f"{folder} does not exist, and this user ({user}) may not create it in {existing}",
                RUN_AS_ROOT,
            )
        return ok(f"{folder} does not exist yet; this user ({user}) may create it in {existing}")
    if not os.path.isdir(folder):
        return problem(
            f"{folder}, the folder of --output-file, is not a directory",
            "point --output-file into NFD's features.d folder",
        )
    if not os.access(folder, WRITABLE):
        return problem(
            f"this user ({user}) may not write {folder} (its permissions, or a read-only mount)",
            RUN_AS_ROOT,
        )
    written = examination.feature_file
    if written.labels is None:
        state = "gfd has written no feature file there yet"
    else:
        state = (
            f"it holds gfd's file ({len(written.labels)} labels, written {written.age:.0f} s ago)"
        )
    return ok(f"{folder} exists and this user ({user}) may write it; {state}")
