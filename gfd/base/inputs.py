"""Reading what others wrote: every file gfd reads is bounded, and YAML is checked first.

This module owns the limits (documented in ``docs/security.md``) and the two guards:

- :func:`read_bounded` reads at most ``limit`` bytes of a regular file (after
  following symlinks, as a Kubernetes ConfigMap mount needs), opened without
  blocking, so ``/dev/zero``, a FIFO or a multi-GB file is one clear error, never a
  hang or a MemoryError;
- :func:`check_yaml` walks a document's parser events (iteratively: 50,000 levels
  of nesting never reach the recursion limit) and refuses deep nesting, more
  aliases than a small budget, and documents whose aliases would expand past a node
  budget (the "billion laughs"), before anything builds Python objects from it.

Errors are :class:`InputRejected`, a ``ValueError`` with a one-line reason that the
caller prefixes with the file and turns into its own error type.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

#: The config file (``--config-file``): a real one is a few hundred bytes.
CONFIG_FILE_LIMIT = 1 << 20
#: A facts file (``--simulate FILE``): the largest bundled profile is about 35 KB.
FACTS_FILE_LIMIT = 4 << 20
#: A kubeconfig (``--kubeconfig``): a few KB with embedded certificates.
KUBECONFIG_LIMIT = 1 << 20
#: A service-account token: a JWT of one or two KB.
TOKEN_FILE_LIMIT = 64 << 10
#: One sysfs attribute or the DMI product name: the kernel serves at most a page.
SYSFS_ATTRIBUTE_LIMIT = 4096
#: PCI configuration space: 256 bytes conventional, 4096 extended.
PCI_CONFIG_LIMIT = 4096
#: A workload manifest (``gfd explain -f``): a chart's rendered output is a few hundred KB.
MANIFEST_FILE_LIMIT = 16 << 20
#: ``kubectl get nodes,pods -A -o json`` saved (``--cluster-file``): 5,000 nodes and
#: 20,000 pods are about 150 MB.
CLUSTER_FILE_LIMIT = 1 << 30

#: Deepest nesting of mappings and sequences a document may have (a config needs 5).
YAML_MAX_DEPTH = 64
#: Aliases (``*name``) a document may use.
YAML_MAX_ALIASES = 100
#: Nodes a document may stand for once its aliases are expanded.
YAML_MAX_NODES = 1_000_000
#: Digits of a plain integer scalar; Python refuses to convert more than 4,300.
YAML_MAX_INTEGER_DIGITS = 4000


class InputRejected(ValueError):
    """A file or document is refused; the message is one line, without the file name."""


def _size_words(limit: int) -> str:
    if limit >= 1 << 20 and limit % (1 << 20) == 0:
        return f"{limit >> 20} MiB"
    if limit >= 1 << 10 and limit % (1 << 10) == 0:
        return f"{limit >> 10} KiB"
    return f"{limit} bytes"


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path``, refusing one larger than ``limit``.

    Raises :class:`OSError` as ``open`` does (missing, permission denied) and
    :class:`InputRejected` for a file that is not regular or is too large.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a directory"
                if stat.S_ISDIR(mode)
                else "a character device"
                if stat.S_ISCHR(mode)
                else "a FIFO"
                if stat.S_ISFIFO(mode)
                else "not a regular file"
            )
            raise InputRejected(f"is {kind}, not a regular file")
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining <= 0:
            raise InputRejected(f"is larger than {_size_words(limit)}, the most gfd reads")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bounded_text(path: str | os.PathLike[str], limit: int) -> str:
    """:func:`read_bounded`, decoded as UTF-8 (``UnicodeDecodeError`` when it is not)."""
    return read_bounded(path, limit).decode("utf-8")


def check_regular_small_file(path: str | os.PathLike[str], limit: int) -> None:
    """Refuse (``InputRejected``) an existing ``path`` that is not regular or is larger
    than ``limit``; a missing or unreadable one is left to its reader to report."""
    try:
        read_bounded(Path(path), limit)
    except OSError:
        return


def check_yaml(text: str, *, max_depth: int = YAML_MAX_DEPTH) -> None:
    """Refuse a YAML document that is too deep or whose aliases are a bomb.

    Parse errors are left to the loader that runs afterwards, which reports them with
    a line and column.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    aliases = 0
    nodes = 0
    #: Node counts of anchored nodes, and the open anchored collections.
    sizes: dict[str, int] = {}
    open_anchors: list[tuple[int, str | None, int]] = []
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > YAML_MAX_ALIASES:
                    raise InputRejected(
                        f"uses more than {YAML_MAX_ALIASES} YAML aliases; write the values out"
                    )
                nodes += sizes.get(event.anchor or "", 1)
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
                value = event.value
                if (
                    len(value) > YAML_MAX_INTEGER_DIGITS
                    and event.implicit[0]
                    and value.lstrip("+-").replace("_", "").isdigit()
                ):
                    raise InputRejected(
                        f"has an integer of {len(value)} digits (line {_line(event)}); "
                        f"the most is {YAML_MAX_INTEGER_DIGITS}"
                    )
            elif isinstance(event, yaml.CollectionStartEvent):
                nodes += 1
                depth += 1
                if depth > max_depth:
                    raise InputRejected(
                        f"is nested more than {max_depth} levels deep (line {_line(event)})"
                    )
                open_anchors.append((depth, event.anchor, nodes))
            elif isinstance(event, yaml.CollectionEndEvent):
                _, anchor, started = open_anchors.pop()
                if anchor is not None:
                    sizes[anchor] = nodes - started + 1
                depth -= 1
            if nodes > YAML_MAX_NODES:
                raise InputRejected(
                    f"expands to more than {YAML_MAX_NODES:,} YAML nodes through its aliases"
                )
    except yaml.YAMLError as exc:
        # libyaml stops at its own nesting limit (1,000 levels) before ours is seen
        # when the document opens everything on one line.
        if "maximum nesting depth" in str(exc):
            raise InputRejected(f"is nested more than {max_depth} levels deep") from None
        return


def _line(event: Any) -> int:
    mark = getattr(event, "start_mark", None)
    return int(mark.line) + 1 if mark is not None else 0
