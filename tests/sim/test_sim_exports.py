"""The simulator library exports exactly the NVML calls its C sources define.

The library is one shared object compiled with ``-fvisibility=default`` from one C file
per NVML area (``gfd/sim/sim_*.c``); what the files share goes through
``gfd/sim/nvmlsim.h`` with hidden visibility. These tests read the built library's
dynamic symbol table (the ELF ``.dynsym``, parsed by ``gfd.sim.branch_library``, so no
``nm`` is needed; where ``nm`` is installed the parse is held against it) and the
function definitions of the C sources, and catch:

- an ``nvml*`` function defined in a C file but not exported (made ``static``, or its
  file left out of ``setup.py``'s sources);
- anything exported besides those and ``gfdsim_configure``/``gfdsim_last_error`` (a
  shared internal or global that lost its ``SIM_INTERNAL``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gfd.sim import library_path
from gfd.sim.branch_library import dynamic_exports

CONFIG_CALLS = {"gfdsim_configure", "gfdsim_last_error"}

# A function definition starts at column 0: return type, name, parameters, then "{".
_DEFINITION = re.compile(
    r"^(?P<head>[A-Za-z_][\w \t*]*?)\b(?P<name>[A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.MULTILINE
)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def defined_functions(sources: list[Path]) -> dict[str, tuple[Path, bool]]:
    """Every function the C files define: name -> (file, whether it is static)."""
    found: dict[str, tuple[Path, bool]] = {}
    for source in sources:
        # Comments become blank lines so that definitions stay at the start of a line.
        text = _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), source.read_text())
        for match in _DEFINITION.finditer(text):
            name = match["name"]
            assert name not in found, (
                f"{name} is defined in {found[name][0].name} and {source.name}"
            )
            found[name] = (source, "static" in match["head"].split())
    return found


@pytest.fixture(scope="module")
def library() -> Path:
    return library_path()


@pytest.fixture(scope="module")
def functions(library: Path) -> dict[str, tuple[Path, bool]]:
    sources = sorted(library.parent.glob("*.c"))
    assert sources, f"no C sources next to {library}"
    found = defined_functions(sources)
    # The parser found the library's functions at all (not a silently empty match).
    assert found.keys() >= CONFIG_CALLS
    assert sum(name.startswith("nvml") for name in found) >= 60
    return found


def test_every_nvml_function_in_the_sources_is_exported(
    library: Path, functions: dict[str, tuple[Path, bool]]
) -> None:
    nvml = {name: where for name, where in functions.items() if name.startswith("nvml")}
    static = sorted(
        f"{name} ({where.name})" for name, (where, is_static) in nvml.items() if is_static
    )
    assert not static, f"nvml* functions defined static, so never exported: {static}"
    exported = {s for s in dynamic_exports(library) if s.startswith("nvml")}
    missing = sorted(f"{name} ({nvml[name][0].name})" for name in nvml.keys() - exported)
    assert not missing, f"defined in the C sources but not exported by {library.name}: {missing}"
    assert exported == nvml.keys(), f"exported but not defined: {sorted(exported - nvml.keys())}"


def test_nothing_but_nvml_calls_and_the_config_calls_is_exported(
    library: Path, functions: dict[str, tuple[Path, bool]]
) -> None:
    exported = dynamic_exports(library)
    leaked = sorted(s for s in exported if not s.startswith("nvml") and s not in CONFIG_CALLS)
    assert not leaked, f"internal symbols exported from {library.name}: {leaked}"
    assert exported >= CONFIG_CALLS
    for name in CONFIG_CALLS:
        assert not functions[name][1], f"{name} is static"


def test_elf_reader_agrees_with_nm(library: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed; the ELF reader is checked against it where it is")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True
    ).stdout
    assert dynamic_exports(library) == {line.split()[-1] for line in out.splitlines() if line}
