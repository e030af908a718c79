"""Runs measured commands from a small launcher process, for honest peak RSS.

Shared by the benchmarks that time whole gfd processes (``agent_cost.py``,
``kube_sinks.py``, ``startup.py``); not a benchmark itself (``run_all.py`` skips ``_`` files).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: A small process that starts every measured command. A child's ``ru_maxrss``
#: includes what it held before ``exec``, which after a fork is its parent's RSS: this
#: benchmark holds the emulator and the kubernetes client (~50 MiB), the launcher only
#: a bare interpreter (below ``python -c pass`` itself), so peaks are the commands' own.
_LAUNCHER = """
import os, sys, time
for line in sys.stdin:
    argv = line.rstrip("\\n").split("\\t")
    started = time.perf_counter()
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=quiet)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    print(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, code, flush=True)
"""


class Launcher:
    """Runs commands from a small process and reports wall time, CPU time and peak RSS."""

    def __init__(self, env: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-S", "-c", _LAUNCHER],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, command: list[str]) -> dict[str, float]:
        assert self._process.stdin is not None and self._process.stdout is not None
        if any("\t" in word or "\n" in word for word in command):
            raise ValueError(f"cannot pass {command!r} to the launcher")
        self._process.stdin.write("\t".join(command) + "\n")
        self._process.stdin.flush()
        wall, cpu, maxrss_kib, code = self._process.stdout.readline().split()
        if int(code) != 0:
            raise SystemExit(f"{' '.join(command)} exited with {code}")
        return {"wall_s": float(wall), "cpu_s": float(cpu), "peak_rss_mib": int(maxrss_kib) / 1024}

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=10)


def child_environment(workdir: Path) -> dict[str, str]:
    """The measured processes' environment: this checkout, and compiled bytecode.

    An installed gfd (wheel, container image) has its modules compiled; a checkout run
    with ``PYTHONDONTWRITEBYTECODE`` would compile them from source on every start. So
    bytecode goes to a private cache (``PYTHONPYCACHEPREFIX``) that the warm-up fills,
    for gfd and its dependencies alike.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GFD_") and k not in ("KUBECONFIG", "PYTHONDONTWRITEBYTECODE")
    }
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def installed_python(workdir: Path) -> Path:
    """An interpreter that sees this environment's packages as an installed gfd's sees
    its own: a virtual environment whose one ``.pth`` file names this environment's
    site-packages directories.

    A checkout's environment holds gfd as an editable install, whose ``.pth`` file
    imports a finder (``importlib.util``, ``pathlib``: a few milliseconds) in every
    process, the floor's too; no installed gfd (wheel, container image) has it. Named
    in a ``.pth`` file, a directory is only put on the path: the ``.pth`` files in it
    are not run. gfd itself comes from ``PYTHONPATH`` (:func:`child_environment`)."""
    home = workdir / "installed"
    python = home / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(home)
        purelib = sysconfig.get_path("purelib", vars={"base": str(home)})
        directories = [path for path in site.getsitepackages() if Path(path).is_dir()]
        (Path(purelib) / "this-environment.pth").write_text(
            "".join(f"{path}\n" for path in directories), encoding="utf-8"
        )
    return python


def console_script(
    workdir: Path, *, checkout: Path = ROOT, name: str = "gfd", prelude: str = ""
) -> Path:
    """The ``gfd`` command as pip installs it (the container's entry point): a script
    that imports the entry point ``pyproject.toml`` names and calls it, without
    ``runpy`` as ``-m`` has. ``checkout``: another checkout's gfd (put first on the
    path, its own entry point); ``prelude``: lines run before the import (``sys`` is
    imported)."""
    with (checkout / "pyproject.toml").open("rb") as file:
        module, _, function = tomllib.load(file)["project"]["scripts"]["gfd"].partition(":")
    if checkout != ROOT:
        prelude = f"sys.path.insert(0, {str(checkout)!r})\n{prelude}"
    script = workdir / "bin" / name
    if not script.exists():
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(
            f"import sys\n{prelude}from {module} import {function}\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
            f"    sys.exit({function}())\n",
            encoding="utf-8",
        )
    return script
