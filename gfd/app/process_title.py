"""The process's name as other programs see it: what makes gfd findable under the GPU Operator.

NVIDIA's config-manager (the operator's sidecar that switches sharing configs) finds the
process to send SIGHUP to by an exact match of argv[0] in ``/proc/PID/cmdline`` against
``PROCESS_TO_SIGNAL`` (``gpu-feature-discovery``). gfd is a Python console script: the
kernel runs it as ``python3 /usr/bin/gpu-feature-discovery ...``, so argv[0] is the
interpreter and the signal never comes. When gfd is started under that name, it rewrites
its command line (setproctitle) to that name alone, as a Go binary's would read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

#: The command the GPU Operator runs, and the process name config-manager signals.
OPERATOR_COMMAND = "gpu-feature-discovery"


def name_process(argv0: str, *, set_title: Callable[[str], None] | None = None) -> bool:
    """Make argv[0] ``gpu-feature-discovery`` when started as ``gpu-feature-discovery``.

    Returns whether the title was set. ``set_title`` defaults to setproctitle's.
    """
    if Path(argv0).name != OPERATOR_COMMAND:
        return False
    if set_title is None:
        try:
            from setproctitle import setproctitle
        except ImportError:
            print(
                "gfd: warning: setproctitle is not installed; NVIDIA's config-manager "
                f"will not find this process by the name {OPERATOR_COMMAND}",
                file=sys.stderr,
            )
            return False
        set_title = setproctitle
    set_title(OPERATOR_COMMAND)
    return True
