"""The NVML simulator: serve a facts file through a fake ``libnvidia-ml.so.1``.

This package owns the simulator's Python side: the bundled profiles (facts files
that model real machines, in ``profiles/``, each with its parsed twin in
``profiles/parsed/``, :mod:`gfd.sim.parsed_profiles`), loading a profile with its optional
``faults:`` section, and :func:`simulate`, which writes the machine file and a
fake sysfs tree into a temporary directory and points the C library
(``_nvmlsim``, built from ``sim_*.c``) at them. The reader then runs its normal
code path against ``SimulatedMachine.library_path`` and ``sysfs_root``.

The library exports what the real library of the machine's driver branch exports
(:mod:`gfd.nvml.branches`): a machine with driver 470.256.02 has no
``nvmlDeviceGetNumaNodeId``, as on a real node. For an older branch the library is a
copy with the missing functions hidden (:mod:`gfd.sim.branch_library`). A driver of a
branch not emulated is served with the export set of the nearest emulated branch at or
below it; one older than 470 with 470's, said in one warning line.

pynvml keeps one library per process and caches its symbols, so the library is
loaded once (``ctypes.CDLL`` of the same path returns the same ``dlopen``
handle pynvml gets) and reconfigured for each machine. One simulated machine is
active per process at a time.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.machinery
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.base.errors import ConfigError, GfdError
from gfd.base.frozen import frozen_dataclass
from gfd.facts import (
    DERIVED_KEY,
    NodeFacts,
    facts_from_dict,
    facts_to_dict,
    parse_document,
    read_facts_text,
)
from gfd.facts.limits import check_document_bounds
from gfd.nvml.branches import LATEST_BRANCH, driver_branch, older_than_emulated
from gfd.sim.gpu_health import with_default_memory_health
from gfd.sim.machine_file import check_servable, render_machine_file
from gfd.sim.parsed_profiles import parsed_twin
from gfd.sim.sysfs_tree import write_sysfs_tree

if TYPE_CHECKING:
    from gfd.sim.branch_library import BranchLibraries
    from gfd.sim.faults import Faults

__all__ = [
    "BUNDLED_PROFILES",
    "CONFIG_ENV",
    "CallDelay",
    "CallError",
    "CriticalXid",
    "EccRising",
    "Faults",
    "GpuLost",
    "GpuVanished",
    "NvLinkDown",
    "RowRemapping",
    "SimulatedMachine",
    "SimulationProfile",
    "library_path",
    "load_profile",
    "prepare_machine",
    "profile_path",
    "simulate",
    "with_default_memory_health",
]

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
#: Environment variable the library reads at ``nvmlInit`` when nothing configured it.
CONFIG_ENV = "GFD_SIM_CONFIG"
#: Name under which consumers that ``dlopen`` the driver's library find the simulator.
NVML_SONAME = "libnvidia-ml.so.1"

BUNDLED_PROFILES: tuple[str, ...] = tuple(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))

#: The fault model's names that this package also gives (``from gfd.sim import CallError``).
#: They are imported on first use (:func:`__getattr__`): a profile without a ``faults:``
#: section never loads the fault model, which is most of the simulator's import time.
_FAULT_NAMES = frozenset(
    {
        "CallDelay",
        "CallError",
        "CriticalXid",
        "EccRising",
        "Faults",
        "GpuLost",
        "GpuVanished",
        "NvLinkDown",
        "RowRemapping",
    }
)


def __getattr__(name: str) -> Any:
    """The names of :data:`_FAULT_NAMES`, from :mod:`gfd.sim.faults` (PEP 562)."""
    if name in _FAULT_NAMES:
        import gfd.sim.faults

        return getattr(gfd.sim.faults, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@frozen_dataclass
class SimulationProfile:
    """A machine to simulate: its facts, what goes wrong on it, and where it came from."""

    facts: NodeFacts
    #: None: nothing goes wrong (the profile has no ``faults:`` section).
    faults: Faults | None = None
    source: str = "<profile>"


@frozen_dataclass
class SimulatedMachine:
    """A prepared machine; one from :func:`simulate` is valid inside its block only."""

    library_path: Path
    sysfs_root: Path
    machine_type_file: Path
    profile: SimulationProfile
    #: The machine file the library reads (also for other processes, via CONFIG_ENV).
    config_path: Path
    #: A directory holding ``libnvidia-ml.so.1`` (a link to the simulator).
    nvml_dir: Path

    def environment(self) -> dict[str, str]:
        """Variables that make another process (``dlopen("libnvidia-ml.so.1")``) see this machine."""
        library_dirs = [str(self.nvml_dir), os.environ.get("LD_LIBRARY_PATH", "")]
        return {
            CONFIG_ENV: str(self.config_path),
            "LD_LIBRARY_PATH": os.pathsep.join(d for d in library_dirs if d),
        }


def profile_path(name_or_path: str) -> Path:
    """The file of a bundled profile name, or ``name_or_path`` itself if it is an existing file."""
    if name_or_path in BUNDLED_PROFILES:
        return PROFILES_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if path.is_file():
        return path
    # A flag's value that names nothing: a usage error (exit 2), as a missing --config-file.
    raise ConfigError(
        f"simulation profile {name_or_path!r} is neither a bundled profile "
        f"({', '.join(BUNDLED_PROFILES)}) nor an existing file"
    )


def load_profile(name_or_path: str) -> SimulationProfile:
    """Load a profile: a NodeFacts document plus an optional top-level ``faults:`` section."""
    path = profile_path(name_or_path)
    source = str(path)
    text = read_facts_text(path)
    if name_or_path not in BUNDLED_PROFILES:
        # A document of more GPUs than a node can have is refused before it is parsed
        # (a bundled profile is gfd's own: its tests hold it within the bounds).
        check_document_bounds(text, source)
    # One parse serves both parts: a bundled profile's twin while it is current (JSON,
    # without importing YAML: :mod:`gfd.sim.parsed_profiles`), else the YAML.
    document = parsed_twin(path, text) if name_or_path in BUNDLED_PROFILES else None
    if document is None:
        document = parse_document(text, source)
    faults_data = None
    if isinstance(document, Mapping):
        faults_data = document.get("faults")
        # What ``gfd facts`` derives from the facts (the topology) is output only: a
        # captured file replays as it was written.
        document = {
            key: value for key, value in document.items() if key not in ("faults", DERIVED_KEY)
        }
    facts = facts_from_dict(document, source)
    faults = None
    if faults_data is not None:
        from gfd.sim.faults import parse_faults

        faults = parse_faults(faults_data, source, facts.gpus)
    check_servable(facts, source)
    return SimulationProfile(facts=facts, faults=faults, source=source)


def library_path() -> Path:
    """The built simulator library (``gfd/sim/_nvmlsim*.so``)."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"_nvmlsim{suffix}"
        if candidate.is_file():
            return candidate
    raise GfdError(
        f"the NVML simulator library is missing from {here} (expected _nvmlsim"
        f"{importlib.machinery.EXTENSION_SUFFIXES[0]}): gfd was not built; run "
        "'python setup.py build_ext --inplace' in a source checkout, or install gfd from a wheel"
    )


_loaded: dict[Path, ctypes.CDLL] = {}
_active = threading.Lock()
_branch_libraries: BranchLibraries | None = None


def machine_branch(facts: NodeFacts) -> int:
    """The driver branch whose NVML exports the simulator emulates for ``facts``.

    The nearest emulated branch at or below the driver's (:func:`driver_branch`);
    ``check_servable`` has already refused a text that is no driver version.
    """
    if facts.driver_version is None:
        return LATEST_BRANCH
    return driver_branch(facts.driver_version)


#: The directories of the machines simulate() serves now (one at a time, see _active).
_live_directories: set[Path] = set()


def remove_simulated_files() -> None:
    """Remove, now, the files this process's simulated machines put on disk: the machine
    file and sysfs tree of an active :func:`simulate` block and the per-branch library
    copies. For a process about to end without running its ``finally`` blocks and
    ``atexit`` handlers (``os._exit``: a watchdog ending a run held in a call that does not
    return), which would otherwise leave them in the temporary directory. Never raises: the
    process is on its way out; a thread still inside the library keeps its mapping."""
    for directory in list(_live_directories):
        shutil.rmtree(directory, ignore_errors=True)
    if _branch_libraries is not None:
        with contextlib.suppress(OSError):
            _branch_libraries.remove()


def branch_library_path(branch: int) -> Path:
    """This process's simulator library exporting what ``branch`` exports."""
    global _branch_libraries
    if branch == LATEST_BRANCH:
        # The built library itself: no copy, and no ELF reader to import.
        return library_path()
    if _branch_libraries is None:
        from gfd.sim.branch_library import BranchLibraries

        _branch_libraries = BranchLibraries(library_path())
        atexit.register(_branch_libraries.remove)
    return _branch_libraries.path(branch)


def _library(path: Path) -> ctypes.CDLL:
    if path not in _loaded:
        try:
            library = ctypes.CDLL(str(path))
        except OSError as exc:
            raise GfdError(f"cannot load the NVML simulator {path}: {exc}") from exc
        _loaded[path] = library
    return _loaded[path]


def configure_library(library: ctypes.CDLL, config_path: Path | None) -> None:
    """Point a loaded simulator at a machine file (None: no machine, like no driver)."""
    library.gfdsim_configure.argtypes = [ctypes.c_char_p]
    library.gfdsim_configure.restype = ctypes.c_int
    library.gfdsim_last_error.argtypes = []
    library.gfdsim_last_error.restype = ctypes.c_char_p
    encoded = os.fsencode(config_path) if config_path is not None else None
    if library.gfdsim_configure(encoded) != 0:
        detail = library.gfdsim_last_error().decode("utf-8", "replace")
        raise GfdError(f"the NVML simulator rejected its machine file: {detail}")


def _checked(facts: NodeFacts, source: str) -> None:
    """Facts built in code get the checks a loaded file gets."""
    facts_from_dict(facts_to_dict(facts), source)
    check_servable(facts, source)


def _as_profile(profile: str | Path | SimulationProfile | NodeFacts) -> SimulationProfile:
    if isinstance(profile, SimulationProfile):
        _checked(profile.facts, profile.source)
        if profile.faults is not None:
            from gfd.sim.faults import check_faults

            check_faults(profile.faults, profile.source, profile.facts.gpus)
        return profile
    if isinstance(profile, NodeFacts):
        _checked(profile, "<facts>")
        return SimulationProfile(facts=profile, source="<facts>")
    return load_profile(str(profile))


def prepare_machine(
    profile: str | Path | SimulationProfile | NodeFacts,
    directory: Path,
    *,
    library: Path | None = None,
) -> SimulatedMachine:
    """Write the machine file, sysfs tree and ``lib/libnvidia-ml.so.1`` into ``directory``.

    ``lib/libnvidia-ml.so.1`` exports what the machine's driver branch exports: a link to
    ``library`` when given (it must be that branch's library), else a link to the built
    simulator for the latest branch, or a copy of it with the missing functions hidden.
    Nothing is configured: this is what another process needs, through
    :meth:`SimulatedMachine.environment` (``python -m gfd.sim`` prints it).
    """
    resolved = _as_profile(profile)
    _warn_if_older_than_emulated(resolved)
    return _prepare(resolved, directory, library)


def _warn_if_older_than_emulated(profile: SimulationProfile) -> None:
    """One warning line when the driver predates every emulated branch (it is served as 470)."""
    if profile.facts.driver_version is None:
        return
    note = older_than_emulated(profile.facts.driver_version)
    if note is not None:
        from gfd.base.logs import get_logger

        get_logger().warning(
            "driver older than every emulated branch", note=note, source=profile.source
        )


def _prepare(
    resolved: SimulationProfile,
    directory: Path,
    library: Path | None,
    *,
    for_other_programs: bool = True,
) -> SimulatedMachine:
    full = library_path()
    branch = machine_branch(resolved.facts)
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "machine.conf"
    config_path.write_text(render_machine_file(resolved.facts, resolved.faults), encoding="utf-8")
    sysfs_root = directory / "sys"
    machine_type_file = write_sysfs_tree(
        resolved.facts, sysfs_root, for_other_programs=for_other_programs
    )
    nvml_dir = directory / "lib"
    nvml_dir.mkdir(exist_ok=True)
    link = nvml_dir / NVML_SONAME
    if link.is_symlink() or link.exists():
        link.unlink()
    if library is not None or branch == LATEST_BRANCH:
        served = library if library is not None else full
        link.symlink_to(served)
    else:
        from gfd.sim.branch_library import hidden_in, write_without_exports

        write_without_exports(full, link, hidden_in(branch))
        served = link
    return SimulatedMachine(
        library_path=served,
        sysfs_root=sysfs_root,
        machine_type_file=machine_type_file,
        profile=resolved,
        config_path=config_path,
        nvml_dir=nvml_dir,
    )


@contextlib.contextmanager
def simulate(
    profile: str | Path | SimulationProfile | NodeFacts,
    *,
    workdir: Path | None = None,
    library: Path | None = None,
    for_other_programs: bool = True,
) -> Iterator[SimulatedMachine]:
    """Serve ``profile`` through the simulator library for the duration of the block.

    ``profile`` is a bundled name, a profile file, a loaded profile or bare facts.
    The machine file and sysfs tree go to a new directory under ``workdir`` (the
    system temporary directory by default), removed afterwards; the library is
    left unconfigured on exit, so a late ``nvmlInit`` fails like a driverless host.
    ``library`` serves the machine through that simulator library (e.g. the full
    :func:`library_path`, whatever the driver branch) instead of the branch's own.
    ``for_other_programs`` False: the sysfs tree leaves out the files only other
    programs read (:data:`gfd.sim.sysfs_tree.READ_BY_OTHER_PROGRAMS`), for a machine that
    gfd alone reads (``gfd --simulate``).
    """
    resolved = _as_profile(profile)
    _warn_if_older_than_emulated(resolved)
    served = library or branch_library_path(machine_branch(resolved.facts))
    loaded = _library(served)
    if not _active.acquire(blocking=False):
        raise GfdError(
            "a simulated machine is already active in this process; NVML has one "
            "library per process, so leave the other simulate() block first"
        )
    try:
        directory = Path(tempfile.mkdtemp(prefix="gfd-sim-", dir=workdir))
        _live_directories.add(directory)
        try:
            machine = _prepare(resolved, directory, served, for_other_programs=for_other_programs)
            configure_library(loaded, machine.config_path)
            try:
                yield machine
            finally:
                configure_library(loaded, None)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            _live_directories.discard(directory)
    finally:
        _active.release()
