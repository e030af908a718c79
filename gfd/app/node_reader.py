"""Where the node's facts come from: NVML on this machine, or the simulator under
``--simulate``; and the checks of the files the reader is pointed at.

One :class:`NodeReader` is kept for the whole run (its NVML session and what it cached
outlive a cycle); the ``labels``, ``facts`` and ``topo`` subcommands read once
(:func:`read_node_once`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.base.errors import ConfigError, NvmlNotReady
from gfd.base.frozen import frozen_dataclass
from gfd.config import NODE_PATHS, Settings

if TYPE_CHECKING:
    from gfd.facts import NodeFacts

#: NVML's error name for a ``libnvidia-ml.so.1`` that cannot be found or loaded.
LIBRARY_NOT_FOUND = "NVML_ERROR_LIBRARY_NOT_FOUND"
#: What a user whose machine has no NVIDIA driver library can do: both ways gfd runs.
NO_NVML_HINT = (
    "no NVIDIA driver library (libnvidia-ml.so.1): on a GPU node, run gfd under the NVIDIA "
    "container runtime or point --driver-root-ctr-path at the mounted driver root; without "
    "a GPU, try --simulate PROFILE (gfd --help lists the profiles)"
)


@frozen_dataclass
class NodeReader:
    """Reads this node's facts: through NVML, or (NVML down) what sysfs alone tells."""

    sysfs_root: Path
    machine_type_file: Path
    #: None: the driver's libnvidia-ml.so.1; else a simulator library.
    library_path: Path | None = None
    #: --driver-root-ctr-path: where the driver's library is looked up when library_path
    #: is None, at each NVML start until found (gfd.nvml.driver_root).
    driver_root: str | None = None
    #: Where the driver's root is looked for when ``driver_root`` is None.
    default_driver_root: Path = Path(NODE_PATHS.driver_root)
    #: Where absent optional facts are logged (gfd's logger when None).
    log: Any = field(default=None, compare=False, repr=False)
    #: (call, cause) of absent optional NVML facts already logged: once per process.
    _reported: set[tuple[str, str]] = field(default_factory=set, compare=False, repr=False)

    #: Holds the :class:`gfd.nvml.reader.NvmlReader` made by the first read, so that its
    #: NVML session and what it cached outlive one cycle (a holder: the class is frozen).
    _nvml: list[Any] = field(default_factory=list, compare=False, repr=False)
    #: Called when an NVML session of the reader starts, before the read asks any GPU
    #: (:meth:`when_nvml_starts`).
    _session_listeners: list[Callable[[], None]] = field(
        default_factory=list, compare=False, repr=False
    )

    def when_nvml_starts(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` each time a read starts an NVML session, right after its
        nvmlInit succeeded and before any GPU is asked, with NVML's library lock held
        (``listener`` must not take it, and must not raise). A session whose nvmlInit
        fails calls nothing: the reader's failure is the one the run acts on."""
        self._session_listeners.append(listener)

    def _session_started(self) -> None:
        for listener in self._session_listeners:
            listener()

    def __call__(self) -> NodeFacts:
        try:
            if not self._nvml:
                from gfd.nvml.reader import NvmlReader

                library = self.library_path
                if library is None:
                    # Only a driver's library is searched for (the simulator's has its path).
                    from gfd.nvml.driver_root import nvml_library_path

                    library = nvml_library_path(
                        self.driver_root, default_root=self.default_driver_root
                    )
                self._nvml.append(
                    NvmlReader(
                        library_path=library,
                        sysfs_root=self.sysfs_root,
                        machine_type_file=self.machine_type_file,
                        on_absent=self._report_absent,
                        on_session_start=self._session_started,
                    )
                )
            facts: NodeFacts = self._nvml[0].read()
        except NvmlNotReady as exc:
            if exc.name != LIBRARY_NOT_FOUND or self.library_path is not None:
                raise
            # No driver library on this machine: say what gfd can do instead, in the one
            # line every subcommand (and each cycle's log) shows.
            detail = f"{exc.detail}; {NO_NVML_HINT}" if exc.detail else NO_NVML_HINT
            raise NvmlNotReady(exc.call, exc.code, exc.name, detail) from exc
        return facts

    def close(self) -> None:
        """Shut down the NVML session this reader holds between cycles, if any."""
        if self._nvml:
            self._nvml[0].close()

    def _report_absent(self, call: str, cause: str) -> None:
        if (call, cause) in self._reported:
            return
        self._reported.add((call, cause))
        log = self.log
        if log is None:
            from gfd.base.logs import get_logger

            log = get_logger()
        log.debug("NVML fact absent", call=call, cause=cause)

    def without_nvml(self) -> NodeFacts:
        from gfd.nvml.reader import read_facts_without_nvml

        return read_facts_without_nvml(
            sysfs_root=self.sysfs_root, machine_type_file=self.machine_type_file
        )


@contextlib.contextmanager
def facts_source(settings: Settings) -> Iterator[NodeReader]:
    """The node's facts reader, on the simulator when ``--simulate`` is set."""
    if settings.simulate:
        from gfd.sim import simulate

        check_facts_file(settings.simulate)
        # Only this process reads the machine: no files for other programs to write.
        with simulate(settings.simulate, for_other_programs=False) as machine:
            reader = NodeReader(
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
                library_path=machine.library_path,
            )
            try:
                yield reader
            finally:
                reader.close()
        return
    reader = host_reader(settings)
    try:
        yield reader
    finally:
        reader.close()


def forced_exit(settings: Settings) -> Callable[[int], object]:
    """How a watchdog ends a run whose facts come from :func:`facts_source`:
    ``os._exit``, which runs no ``finally`` block nor ``atexit`` handler, so that a call
    that never returns cannot hold the process; under ``--simulate`` it first removes the
    simulated machine's files, which :func:`facts_source` would otherwise have removed."""
    if not settings.simulate:
        return os._exit

    def remove_simulated_files_and_exit(status: int) -> None:
        from gfd.sim import remove_simulated_files

        remove_simulated_files()
        os._exit(status)

    return remove_simulated_files_and_exit


def host_reader(settings: Settings) -> NodeReader:
    """Facts from this machine's NVML, sysfs and DMI file, as ``settings`` name them."""
    return NodeReader(
        sysfs_root=Path(settings.sysfs_root),
        machine_type_file=Path(settings.machine_type_file),
        driver_root=settings.driver_root_ctr_path,
        default_driver_root=Path(settings.host.driver_root),
    )


def read_node_once(settings: Settings) -> NodeFacts:
    """The node's facts for ``labels``, ``facts`` and ``topo``. With
    ``--fail-on-init-error=false`` a node whose NVML cannot start (no driver loaded yet) is
    read as the agent reads it then: no GPUs, and what sysfs still tells, so what ``gfd facts``
    captures there replays with ``--simulate`` to the labels the agent published."""
    from gfd.base.errors import NvmlError, NvmlNotReady

    with facts_source(settings) as read:
        try:
            return read()
        except NvmlError as exc:
            init_failure = isinstance(exc, NvmlNotReady) or exc.call == "nvmlInit"
            if settings.fail_on_init_error or not init_failure:
                raise
            return read.without_nvml()


def check_facts_file(name_or_path: str) -> None:
    """Refuse a ``--simulate`` facts file that is not a small regular file of sane YAML.

    Read as the simulator reads it (:func:`gfd.facts.read_facts_text`: bounded by
    :data:`gfd.base.inputs.FACTS_FILE_LIMIT`, the same error for a file it cannot read), then
    checked for depth and aliases before the simulator loads it; a bundled profile name
    passes through. First of all, a file of more GPUs (MIG devices, NVLinks, pairs) than a
    node can have is refused (:mod:`gfd.facts.limits`): its one pass of the parser is
    cheaper than the checks after.
    """
    from gfd.base.inputs import InputRejected, check_yaml
    from gfd.facts import FactsError, read_facts_text
    from gfd.facts.limits import check_document_bounds
    from gfd.sim import BUNDLED_PROFILES

    if name_or_path in BUNDLED_PROFILES or not os.path.lexists(name_or_path):
        return
    text = read_facts_text(name_or_path)
    check_document_bounds(text, name_or_path)
    try:
        check_yaml(text)
    except InputRejected as exc:
        raise FactsError(name_or_path, "", str(exc)) from exc


def check_machine_type_file(settings: Settings) -> None:
    """Refuse a ``--machine-type-file`` that exists and is not a small regular file.

    The reader reads it every cycle: ``/dev/zero`` or a FIFO there would make every
    cycle read for ever. A missing file is fine (``gpu.machine=unknown``).
    """
    from gfd.base.inputs import SYSFS_ATTRIBUTE_LIMIT, InputRejected, check_regular_small_file

    if settings.simulate:
        return
    try:
        check_regular_small_file(settings.machine_type_file, SYSFS_ATTRIBUTE_LIMIT)
    except InputRejected as exc:
        raise ConfigError(f"--machine-type-file {settings.machine_type_file}: {exc}") from exc
