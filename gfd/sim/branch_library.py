"""Per-branch copies of the simulator library: the export set of a real driver branch.

A real ``libnvidia-ml.so`` of branch 470 does not export ``nvmlDeviceGetNumaNodeId``;
a consumer that calls it gets NVML_ERROR_FUNCTION_NOT_FOUND from pynvml (``dlsym``
fails). To let tests and users see exactly that, this module writes a copy of the
simulator library in which the functions a branch lacks are no longer found by name:
their names in the dynamic string table are overwritten with names of the same length
(the leading ``nvml`` becomes ``_hid``), so ``dlsym`` and the dynamic
linker no longer match them, while the code, the symbol table and the hash tables stay
as the linker laid them out. Which functions a branch lacks is the fact table of
:mod:`gfd.nvml.branches`.

Only 64-bit little-endian ELF shared objects (the simulator as built on x86-64 and
arm64 Linux) are handled; anything else is refused with a clear error.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gfd.errors import GfdError
from gfd.nvml.branches import FIRST_EXPORTED_IN, LATEST_BRANCH, exported_in

#: Section types (elf.h).
_SHT_DYNSYM = 11
#: Replaces the leading ``nvml`` of a hidden name: same length, never an NVML name.
_HIDDEN_PREFIX = b"_hid"
_NAME_PREFIX = b"nvml"


class BranchLibraryError(GfdError):
    """The simulator library could not be given a branch's export set."""


def hidden_in(branch: int) -> frozenset[str]:
    """The simulator functions that the library of ``branch`` does not export."""
    return frozenset(name for name in FIRST_EXPORTED_IN if not exported_in(name, branch))


def write_without_exports(source: Path, destination: Path, hidden: Iterable[str]) -> None:
    """Copy the shared object ``source`` to ``destination`` with ``hidden`` no longer exported.

    The copy is written to a temporary file beside ``destination`` and renamed into
    place, so a concurrent reader never sees a half-written library.
    """
    data = bytearray(source.read_bytes())
    names = {name.encode() for name in hidden}
    if names:
        _rename_dynamic_symbols(data, names, str(source))
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


def _rename_dynamic_symbols(data: bytearray, names: set[bytes], source: str) -> None:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BranchLibraryError(f"{source}: not a 64-bit little-endian ELF shared object")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    section_size, section_count = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, section_offset + i * section_size)
        for i in range(section_count)
    ]
    dynsym = [s for s in sections if s[1] == _SHT_DYNSYM]
    if len(dynsym) != 1:
        raise BranchLibraryError(f"{source}: expected one dynamic symbol table")
    _, _, _, _, sym_offset, sym_size, link, _, _, sym_entry = dynsym[0]
    strtab_offset = sections[link][4]
    strtab_size = sections[link][5]
    starts: list[int] = []
    for i in range(sym_size // sym_entry):
        (name_offset,) = struct.unpack_from("<I", data, sym_offset + i * sym_entry)
        starts.append(name_offset)
    found: set[bytes] = set()
    for name_offset in starts:
        end = data.index(b"\0", strtab_offset + name_offset)
        name = bytes(data[strtab_offset + name_offset : end])
        if name not in names:
            continue
        # The linker may share a string's tail between names ("fooBar" and "Bar"); a
        # rename in place would then change the other name too.
        shared = [o for o in starts if name_offset < o < name_offset + len(name)]
        if shared or not name.startswith(_NAME_PREFIX) or name_offset >= strtab_size:
            raise BranchLibraryError(f"{source}: cannot hide {name.decode()} in place")
        start = strtab_offset + name_offset
        data[start : start + len(_HIDDEN_PREFIX)] = _HIDDEN_PREFIX
        found.add(name)
    missing = names - found
    if missing:
        raise BranchLibraryError(
            f"{source}: does not export {', '.join(sorted(n.decode() for n in missing))}"
        )


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
