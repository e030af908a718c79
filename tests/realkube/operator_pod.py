"""The GPU Operator's gpu-feature-discovery pod, laid out as local processes.

Run as ``python -m tests.realkube.operator_pod SPEC.json`` inside a PID namespace of its
own (``unshare --pid --fork --mount-proc``), like a pod with ``shareProcessNamespace:
true``: the init container (NVIDIA's config-manager, ``--oneshot``) runs to completion,
then the gfd container and the config-manager sidecar start side by side, with the
environment the operator gives each. The process lives until SIGTERM, which it passes on
to its children, as the kubelet would stop the pod. Every container logs to its own file.

The spec (written by the test) gives, per container, its argv and its environment.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


def _start(container: dict[str, Any], logs: Path) -> subprocess.Popen[bytes]:
    with (logs / f"{container['name']}.log").open("ab") as log:
        return subprocess.Popen(
            container["argv"],
            env=container["env"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def run(spec: dict[str, Any]) -> int:
    logs = Path(spec["logs"])
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    for init in spec["initContainers"]:
        done = _start(init, logs).wait(timeout=60)
        if done != 0:
            print(f"init container {init['name']} exited {done}", file=sys.stderr)
            return 1
    children = [_start(container, logs) for container in spec["containers"]]
    (logs / "started").write_text("\n".join(str(c.pid) for c in children), encoding="utf-8")
    while not stopping.wait(0.2):
        for child, container in zip(children, spec["containers"], strict=True):
            if child.poll() is not None and not container.get("restart", False):
                continue
            if child.poll() is not None:
                # The kubelet restarts a failed container; so does this pod.
                children[children.index(child)] = _start(container, logs)
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(run(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
