"""Per-branch copies of the simulator library: the export set of a real driver branch.

A real ``libnvidia-ml.so`` of branch 470 does not export ``nvmlDeviceGetNumaNodeId``;
a consumer that calls it gets NVML_ERROR_FUNCTION_NOT_FOUND from pynvml (``dlsym``
fails). To let tests and users see exactly that, this module writes a copy of a shared
library in which chosen functions are no longer found by name: the name offset of each
one's ``.dynsym`` entry is moved one byte on (``nvmlX`` reads ``vmlX``), so the dynamic
linker's hash lookup of the old name finds an entry whose name does not match. Code,
string and hash tables are left as the linker laid them out. That is safe only for a
symbol that no dynamic relocation refers to, which is checked. Which functions a branch
lacks is the fact table of :mod:`gfd.nvml.branches`.

The same reader lists a library's exports (:func:`dynamic_exports`). Only 64-bit
little-endian ELF (x86-64 and arm64 Linux) is handled; anything else is refused with a
clear error.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gfd.base.errors import GfdError
from gfd.base.frozen import frozen_dataclass
from gfd.nvml.branches import FIRST_EXPORTED_IN, LATEST_BRANCH, exported_in

#: Section types (elf.h).
_SHT_DYNSYM = 11
_SHT_RELA = 4
_SHT_REL = 9
_SYMBOL_SIZE = 24


class BranchLibraryError(GfdError):
    """A shared library could not be read, or given a branch's export set."""


def hidden_in(branch: int) -> frozenset[str]:
    """The simulator functions that the library of ``branch`` does not export."""
    return frozenset(name for name in FIRST_EXPORTED_IN if not exported_in(name, branch))


@frozen_dataclass
class _Section:
    kind: int
    offset: int
    size: int
    link: int
    entry_size: int


@frozen_dataclass
class _Symbol:
    index: int
    #: Offset of the entry in the file.
    entry: int
    name_offset: int
    name: str
    defined: bool


def _sections(data: bytes, source: str) -> list[_Section]:
    if data[:4] != b"\x7fELF" or len(data) < 0x40 or data[4] != 2 or data[5] != 1:
        raise BranchLibraryError(f"{source}: not a 64-bit little-endian ELF file")
    (table,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(count):
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, table + i * entry_size
        )
        sections.append(_Section(kind, offset, size, link, entsize))
    return sections


def _dynamic_symbols(data: bytes, source: str) -> tuple[list[_Symbol], list[_Section]]:
    sections = _sections(data, source)
    tables = [s for s in sections if s.kind == _SHT_DYNSYM]
    if len(tables) != 1:
        raise BranchLibraryError(f"{source}: expected one dynamic symbol table")
    table = tables[0]
    strings = sections[table.link].offset
    symbols = []
    for i in range(1, table.size // _SYMBOL_SIZE):
        entry = table.offset + i * _SYMBOL_SIZE
        name_offset, info, other, section_index = struct.unpack_from("<IBBH", data, entry)
        start = strings + name_offset
        name = data[start : data.index(b"\0", start)].decode("ascii", "replace")
        # Exported: defined, bound globally (or weak, or unique), visible by default or protected.
        exported = section_index != 0 and info >> 4 in (1, 2, 10) and other & 0x3 in (0, 3)
        symbols.append(_Symbol(i, entry, name_offset, name, defined=exported))
    return symbols, sections


def dynamic_exports(path: Path) -> set[str]:
    """Names of the symbols a shared library defines in its dynamic symbol table."""
    symbols, _ = _dynamic_symbols(path.read_bytes(), str(path))
    return {s.name for s in symbols if s.defined}


def write_without_exports(source: Path, destination: Path, hidden: Iterable[str]) -> None:
    """Copy the shared library ``source`` to ``destination`` with ``hidden`` not exported.

    The copy is written to a temporary file beside ``destination`` and renamed into
    place, so a concurrent reader never sees a half-written library.
    """
    original = source.read_bytes()
    data = bytearray(original)
    wanted = set(hidden)
    symbols, sections = _dynamic_symbols(original, str(source))
    found = {s.name: s for s in symbols if s.defined and s.name in wanted}
    missing = wanted - set(found)
    if missing:
        raise BranchLibraryError(f"{source}: does not export {', '.join(sorted(missing))}")
    for symbol in found.values():
        struct.pack_into("<I", data, symbol.entry, symbol.name_offset + 1)
    indices = {s.index for s in found.values()}
    for section in sections:
        if section.kind not in (_SHT_RELA, _SHT_REL) or not section.entry_size:
            continue
        for r in range(section.size // section.entry_size):
            (info,) = struct.unpack_from(
                "<Q", original, section.offset + r * section.entry_size + 8
            )
            if info >> 32 in indices:
                raise BranchLibraryError(
                    f"{source}: a relocation refers to a function to hide; it cannot be hidden"
                )
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".branch-", dir=destination.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o755)
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class BranchLibraries:
    """Per-branch copies of one simulator library, written once per process on demand."""

    def __init__(self, full_library: Path) -> None:
        self.full_library = full_library
        self._directory: Path | None = None

    def path(self, branch: int) -> Path:
        """The library exporting what ``branch`` exports (the full one for the latest)."""
        if branch == LATEST_BRANCH:
            return self.full_library
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="gfd-sim-branches-"))
        destination = self._directory / f"libnvidia-ml-{branch}.so.1"
        if not destination.exists():
            write_without_exports(self.full_library, destination, hidden_in(branch))
        return destination

    def remove(self) -> None:
        """Delete the copies (a process that loaded one keeps its mapping)."""
        if self._directory is not None:
            for child in self._directory.iterdir():
                child.unlink(missing_ok=True)
            self._directory.rmdir()
            self._directory = None
