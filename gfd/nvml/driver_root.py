"""Finding the driver's ``libnvidia-ml.so.1`` under a mounted driver root.

Where the GPU Operator runs NVIDIA's driver in a container, the driver's files live under
a directory of the host (``/run/nvidia/driver``), not in the host's own library
directories, and a pod can be given that whole tree as a volume: the *driver root*,
mounted in the container at the path NVIDIA's device plugin and GFD call
``--driver-root-ctr-path`` (default ``/driver-root``). This module owns the lookup of NVML
in such a tree: which directories of it to search, in the order the root's own dynamic
linker would (its ``/etc/ld.so.conf``, includes followed, then the standard directories of
this process's architecture), how links inside it resolve (an absolute link means the
root's path, never the container's), which candidate is loadable here (a 64-bit ELF of
this machine: the 32-bit copy an Ubuntu driver also installs is skipped), and the one
clear error, naming the root and each directory tried, when none is.

Every read is bounded (:data:`CONF_FILE_LIMIT`, :data:`MAX_CONF_FILES`,
:data:`MAX_SEARCH_DIRS`, :data:`MAX_LINK_HOPS`), as a tree the driver container writes is
input gfd did not write. Without a driver root, gfd loads ``libnvidia-ml.so.1`` through the
dynamic linker's search, where the NVIDIA container toolkit injects it.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import platform
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pynvml

from gfd.base.errors import NvmlNotReady
from gfd.base.frozen import frozen_dataclass
from gfd.base.inputs import InputRejected, read_bounded_text
from gfd.config.host import NODE_PATHS

#: Where NVIDIA's device plugin and GFD expect the driver root by default
#: (``--driver-root-ctr-path``); gfd looks there only when it is a directory.
DEFAULT_DRIVER_ROOT = Path(NODE_PATHS.driver_root)
NVML_LIBRARY = "libnvidia-ml.so.1"
#: One ``ld.so.conf`` file: a real one is a few lines.
CONF_FILE_LIMIT = 64 << 10
#: ``ld.so.conf`` and the files it includes, in all.
MAX_CONF_FILES = 64
#: Directories searched, the standard ones included.
MAX_SEARCH_DIRS = 128
#: Symbolic links followed while resolving one path (the kernel's own limit is 40).
MAX_LINK_HOPS = 40
#: How many of the directories tried an error message names before "and N more".
NAMED_IN_ERROR = 12


@frozen_dataclass
class Architecture:
    """What a loadable NVML is for: Debian's multiarch tuple and the ELF machine number."""

    multiarch: str
    elf_machine: int


#: The architectures gfd's image is built for, by ``platform.machine()``.
ARCHITECTURES = {
    "x86_64": Architecture("x86_64-linux-gnu", 62),
    "aarch64": Architecture("aarch64-linux-gnu", 183),
}


def standard_dirs(architecture: Architecture) -> tuple[str, ...]:
    """The directories a driver installs NVML into, for ``architecture``: Debian and
    Ubuntu's multiarch ones, then Red Hat's and SUSE's ``lib64``, then the plain ones."""
    tuple_ = architecture.multiarch
    return (
        f"/usr/lib/{tuple_}",
        f"/lib/{tuple_}",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    )


class _Tree:
    """Paths inside ``root`` resolved as if ``root`` were ``/`` (a chroot's view)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve(self, inside: str) -> Path | None:
        """The real path of ``inside`` (a path of the tree), or None when it does not
        exist, a link loops or leads more than :data:`MAX_LINK_HOPS` links deep."""
        pending = [part for part in PurePosixPath(inside).parts if part != "/"]
        pending.reverse()
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = self.root.joinpath(*resolved, part)
            try:
                mode = os.lstat(candidate).st_mode
            except OSError:
                return None
            if not stat.S_ISLNK(mode):
                resolved.append(part)
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                return None
            try:
                target = os.readlink(candidate)
            except OSError:
                return None
            if target.startswith("/"):
                resolved = []
            pending.extend(reversed([p for p in PurePosixPath(target).parts if p != "/"]))
        return self.root.joinpath(*resolved)

    def read_text(self, inside: str) -> str | None:
        """The text of a small regular file of the tree; None when it cannot be read."""
        real = self.resolve(inside)
        if real is None:
            return None
        try:
            return read_bounded_text(real, CONF_FILE_LIMIT)
        except (OSError, InputRejected, UnicodeDecodeError):
            return None

    def matching(self, pattern: str) -> list[str]:
        """The tree's paths that ``pattern`` names, sorted: a wildcard is honoured in the
        last part only, which is where ``include /etc/ld.so.conf.d/*.conf`` has it."""
        directory, _, name = pattern.rpartition("/")
        if not any(mark in name for mark in "*?["):
            return [pattern]
        real = self.resolve(directory or "/")
        if real is None:
            return []
        try:
            with os.scandir(real) as entries:
                names: list[str] = []
                for entry in entries:
                    if len(names) >= MAX_CONF_FILES:
                        break
                    if fnmatch.fnmatchcase(entry.name, name):
                        names.append(entry.name)
        except OSError:
            return []
        return [f"{directory}/{found}" for found in sorted(names)]


@dataclass
class _ConfReader:
    """The directories an ``ld.so.conf`` names, with its includes, bounded."""

    tree: _Tree
    files_read: int = 0
    seen: set[str] = field(default_factory=set)
    dirs: list[str] = field(default_factory=list)

    def read(self, inside: str) -> None:
        if inside in self.seen or self.files_read >= MAX_CONF_FILES:
            return
        self.seen.add(inside)
        self.files_read += 1
        text = self.tree.read_text(inside)
        if text is None:
            return
        here = str(PurePosixPath(inside).parent)
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line or line.startswith("hwcap "):
                continue
            if line.startswith("include") and line[7:8].isspace():
                for pattern in line[8:].split():
                    absolute = pattern if pattern.startswith("/") else f"{here}/{pattern}"
                    for included in self.tree.matching(absolute):
                        self.read(included)
                continue
            # ldconfig also takes several directories on a line, separated by
            # colons, commas or blanks, each optionally followed by "=TYPE".
            for word in line.replace(":", " ").replace(",", " ").split():
                directory = word.split("=", 1)[0]
                if directory.startswith("/"):
                    self.dirs.append(directory)


def search_dirs(root: Path, architecture: Architecture) -> list[str]:
    """Where under ``root`` to look for NVML, first to last, as paths of the tree: the
    directories the root's ``/etc/ld.so.conf`` names (what its ``ldconfig`` would cache),
    then :func:`standard_dirs`; each once, at most :data:`MAX_SEARCH_DIRS`."""
    conf = _ConfReader(_Tree(root))
    conf.read("/etc/ld.so.conf")
    ordered: list[str] = []
    for directory in (*conf.dirs, *standard_dirs(architecture)):
        normal = str(PurePosixPath("/", directory))
        if normal not in ordered:
            ordered.append(normal)
        if len(ordered) >= MAX_SEARCH_DIRS:
            break
    return ordered


def _elf_problem(path: Path, architecture: Architecture) -> str | None:
    """Why the library at ``path`` cannot be loaded by this process, or None when it can."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return f"cannot be opened: {os.strerror(exc.errno or errno.EIO)}"
    try:
        header = os.read(fd, 20)
    except OSError as exc:
        return f"cannot be read: {os.strerror(exc.errno or errno.EIO)}"
    finally:
        os.close(fd)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return "not an ELF library"
    if header[4] != 2 or header[5] != 1:
        return "not a 64-bit little-endian library"
    machine = int.from_bytes(header[18:20], "little")
    if machine != architecture.elf_machine:
        return f"built for ELF machine {machine}, not {platform.machine()}"
    return None


def _not_found(detail: str) -> NvmlNotReady:
    """NVML's own error for a library it cannot find, as the reader raises it on a failed load."""
    return NvmlNotReady(
        "load", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND", detail
    )


def find_nvml_library(root: Path, architecture: Architecture) -> Path:
    """The real path of the loadable ``libnvidia-ml.so.1`` under ``root``.

    Raises :class:`gfd.base.errors.NvmlNotReady` (``NVML_ERROR_LIBRARY_NOT_FOUND``: the agent
    retries, as for a driver still being installed) naming the root and the directories
    tried, with the reason of each candidate that was there but not loadable.
    """
    tree = _Tree(root)
    tried: list[str] = []
    refused: list[str] = []
    for directory in search_dirs(root, architecture):
        tried.append(directory)
        real = tree.resolve(f"{directory}/{NVML_LIBRARY}")
        if real is None:
            continue
        try:
            regular = stat.S_ISREG(os.stat(real).st_mode)
        except OSError:
            continue
        problem = _elf_problem(real, architecture) if regular else "not a regular file"
        if problem is None:
            return real
        refused.append(f"{directory}/{NVML_LIBRARY}: {problem}")
    named = ", ".join(tried[:NAMED_IN_ERROR])
    if len(tried) > NAMED_IN_ERROR:
        named += f" and {len(tried) - NAMED_IN_ERROR} more"
    detail = f"no loadable {NVML_LIBRARY} under the driver root {root} (tried {named})"
    if refused:
        detail += "; refused " + "; ".join(refused[:NAMED_IN_ERROR])
    raise _not_found(detail)


def this_architecture() -> Architecture:
    """The architecture of this process, among :data:`ARCHITECTURES`."""
    machine = platform.machine()
    try:
        return ARCHITECTURES[machine]
    except KeyError:
        raise _not_found(f"no driver-root search for the machine {machine!r}") from None


def nvml_library_path(
    driver_root: str | None, *, default_root: Path = DEFAULT_DRIVER_ROOT
) -> Path | None:
    """The NVML library to load for the ``--driver-root-ctr-path`` setting ``driver_root``,
    or None for the dynamic linker's search (where the container toolkit injects it).

    - not set (None): ``default_root`` if it is a directory (mounted), else the linker;
    - ``""`` or ``/``: the linker, as NVIDIA's plugin does for an empty or ``/`` root;
    - a path: the library under it, or :class:`gfd.base.errors.NvmlNotReady` naming it when the
      path is no directory or holds none: a root that was asked for is never silently
      swapped for another library.
    """
    if driver_root is None:
        if not default_root.is_dir():
            return None
        root = default_root
    elif driver_root in ("", "/") or os.path.realpath(driver_root) == "/":
        return None
    else:
        root = Path(driver_root)
        if not root.is_dir():
            raise _not_found(f"the driver root {root} is not a directory (is it mounted?)")
    return find_nvml_library(root, this_architecture())
