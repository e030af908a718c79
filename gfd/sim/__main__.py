"""``python -m gfd.sim PROFILE DIRECTORY``: prepare a simulated machine for other processes.

Writes the machine file, the fake sysfs tree and ``lib/libnvidia-ml.so.1`` into
DIRECTORY and prints the shell ``export`` lines that make any NVML consumer
started from that shell (pynvml, a Go program, an ``nvidia-smi``-like tool) load
the simulator and see the machine.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from gfd.base.errors import GfdError
from gfd.sim import BUNDLED_PROFILES, prepare_machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gfd.sim",
        description="Prepare a simulated NVML machine for other processes.",
        epilog=f"bundled profiles: {', '.join(BUNDLED_PROFILES)}",
    )
    parser.add_argument("profile", help="a bundled profile name or a profile file")
    parser.add_argument("directory", type=Path, help="where to write the machine (created)")
    args = parser.parse_args(argv)
    try:
        machine = prepare_machine(args.profile, args.directory.resolve())
    except GfdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, value in machine.environment().items():
        print(f"export {name}={shlex.quote(value)}")
    print(f"# sysfs root: {machine.sysfs_root}")
    print(f"# machine type file: {machine.machine_type_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
