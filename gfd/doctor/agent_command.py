"""The command line of the gfd agent that runs beside the doctor (``gfd doctor --from-pid``).

In gfd's pod the agent is process 1, started with the DaemonSet's arguments (the sinks,
the MIG strategy, ...), which ``kubectl exec ... -- gfd doctor`` does not inherit: only
the environment is shared. This module owns reading that process's arguments back from
``/proc/<pid>/cmdline`` (bounded, and only from a process that is gfd), so the doctor
checks the configuration the agent really runs with.
"""

from __future__ import annotations

from pathlib import Path

from gfd.base.errors import ConfigError
from gfd.base.inputs import InputRejected, read_bounded
from gfd.config.host import NODE_PATHS

#: A command line longer than this is no gfd agent's.
CMDLINE_LIMIT = 64 << 10
#: The names gfd's console scripts are installed under.
PROGRAMS = ("gfd", "gpu-feature-discovery")
PROC_ROOT = Path(NODE_PATHS.proc_root)


def agent_arguments(pid: int, *, proc_root: Path = PROC_ROOT) -> list[str]:
    """The arguments gfd process ``pid`` was started with (its program name dropped).

    Raises :class:`~gfd.base.errors.ConfigError` naming the process when it cannot be read or
    is not gfd (``gfd``, ``gpu-feature-discovery``, or ``python -m gfd``).
    """
    path = proc_root / str(pid) / "cmdline"
    try:
        raw = read_bounded(path, CMDLINE_LIMIT)
    except (OSError, InputRejected) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"--from-pid {pid}: cannot read {path}: {why}") from exc
    words = [word.decode("utf-8", "replace") for word in raw.split(b"\0")]
    if words and words[-1] == "":
        words.pop()
    if not words:
        raise ConfigError(f"--from-pid {pid}: process {pid} has no command line (a zombie?)")
    program = Path(words[0]).name
    if program in PROGRAMS:
        return words[1:]
    if program.startswith("python") and words[1:3] == ["-m", "gfd"]:
        return words[3:]
    raise ConfigError(
        f"--from-pid {pid}: process {pid} is {words[0]!r}, not gfd; in gfd's pod the agent "
        "is process 1"
    )
