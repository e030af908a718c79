"""Give a copy of a shared library the export set of an older one, by hiding exports from dlsym.

NVIDIA's real ``libnvidia-ml.so`` of an older driver branch lacks some functions a current one
has; pynvml then raises ``NVML_ERROR_FUNCTION_NOT_FOUND`` for them. To emulate that with the mock
NVML, :func:`hide_exports` rewrites the ``st_name`` of each named ``.dynsym`` entry to point one
byte further into ``.dynstr`` (``nvmlX`` becomes ``vmlX``): the dynamic linker's hash lookup for
the old name then finds an entry whose name does not match, so ``dlsym`` fails. Nothing else
changes. This is safe only for a symbol no dynamic relocation refers to by name (checked), as
for the mock's exported NVML functions.

Little-endian ELF64 only (x86-64, aarch64).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

_SHT_DYNSYM = 11
_SHT_RELA = 4
_SHT_REL = 9
_SYM_SIZE = 24


def _sections(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, offset, size, link, entsize) of every section header."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    headers = []
    for i in range(shnum):
        base = shoff + i * shentsize
        _, sh_type, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, base
        )
        headers.append((sh_type, offset, size, link, entsize))
    return headers


def _dynsym(data: bytes) -> tuple[int, int, int, int]:
    """(offset, count, string table offset, string table size) of ``.dynsym``."""
    headers = _sections(data)
    for sh_type, offset, size, link, _ in headers:
        if sh_type == _SHT_DYNSYM:
            _, str_offset, str_size, _, _ = headers[link]
            return offset, size // _SYM_SIZE, str_offset, str_size
    raise ValueError("no .dynsym section")


def _name(data: bytes, str_offset: int, st_name: int) -> str:
    start = str_offset + st_name
    return data[start : data.index(b"\0", start)].decode("ascii", "replace")


def exports(path: Path) -> set[str]:
    """Names of the defined symbols in ``.dynsym``."""
    data = path.read_bytes()
    offset, count, str_offset, _ = _dynsym(data)
    names = set()
    for i in range(1, count):
        st_name, _, _, st_shndx = struct.unpack_from("<IBBH", data, offset + i * _SYM_SIZE)
        if st_shndx != 0:
            names.add(_name(data, str_offset, st_name))
    return names


def hide_exports(source: Path, destination: Path, names: Iterable[str]) -> None:
    """Copy ``source`` to ``destination`` with each of ``names`` no longer found by ``dlsym``."""
    original = source.read_bytes()
    data = bytearray(original)
    offset, count, str_offset, _ = _dynsym(original)
    wanted = set(names)
    indices: dict[str, int] = {}
    for i in range(1, count):
        entry = offset + i * _SYM_SIZE
        st_name, _, _, st_shndx = struct.unpack_from("<IBBH", original, entry)
        name = _name(original, str_offset, st_name)
        if name in wanted and st_shndx != 0:
            indices[name] = i
            struct.pack_into("<I", data, entry, st_name + 1)
    missing = wanted - set(indices)
    if missing:
        raise ValueError(f"{source} does not export {', '.join(sorted(missing))}")
    hidden = set(indices.values())
    for sh_type, rel_offset, size, _, entsize in _sections(original):
        if sh_type not in (_SHT_RELA, _SHT_REL) or not entsize:
            continue
        for r in range(size // entsize):
            info = struct.unpack_from("<Q", original, rel_offset + r * entsize + 8)[0]
            if info >> 32 in hidden:
                raise ValueError(f"{source}: a relocation refers to a symbol to hide by name")
    destination.write_bytes(bytes(data))
    destination.chmod(0o755)
