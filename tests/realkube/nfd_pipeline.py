"""NFD's real worker and master against the suite's real control plane.

This module owns one run of node-feature-discovery's pipeline for the NFD suite: a Node of
its own on the session's kube-apiserver (with a label and an annotation, without which
nfd-master's JSON patches fail), a scratch ``features.d`` that the nfd oracle's
``run-pipeline.sh`` bind-mounts as the worker's, and nfd-worker and nfd-master started by
that script (their pids are theirs to stop, by the same script). The worker's sleep
interval is chosen per run: 60 s, NFD's default, makes a missed inotify event show as a
change a minute late.

Every wait is bounded and fails with the end of both NFD logs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gfd.sinks.featurefile import EVENT_SPACING
from tests.controlplane import ControlPlane
from tests.oracles import PROJECT_ROOT, oracle_path
from tests.realkube.cluster import GfdCluster

#: Where the worker writes its NodeFeature (nfd-master reads every namespace).
NFD_NAMESPACE = "node-feature-discovery"
#: nfd-master's record of the keys it set on a Node.
NFD_FEATURE_LABELS = "nfd.node.kubernetes.io/feature-labels"
RUN_PIPELINE_ENV = "NFD_RUN_PIPELINE"
#: The shared oracle notes' script, used when the variable is unset.
DEFAULT_RUN_PIPELINE = PROJECT_ROOT.parent / "shared" / "oracles" / "nfd" / "run-pipeline.sh"


class NfdPipeline:
    """features.d -> nfd-worker -> NodeFeature -> nfd-master -> labels of :attr:`node`."""

    def __init__(self, kube: GfdCluster, workdir: Path, *, sleep_interval: str) -> None:
        oracle_path("nfd")
        script = os.environ.get(RUN_PIPELINE_ENV, "") or str(DEFAULT_RUN_PIPELINE)
        if not Path(script).is_file():
            pytest.fail(f"{RUN_PIPELINE_ENV} does not name NFD's run-pipeline.sh ({script})")
        self.script = Path(script)
        self.kube = kube
        self.sleep_interval = sleep_interval
        self.node = kube.node(
            "nfd-node",
            annotations={"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        )
        self.baseline = kube.labels(self.node)
        self.features = workdir / "features.d"
        self.features.mkdir(parents=True)
        self.state = workdir / "nfd-state"
        self._started = False

    def start(self) -> None:
        self.kube.admin.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NFD_NAMESPACE}}
        )
        env = {
            **os.environ,
            "NFD_SLEEP_INTERVAL": self.sleep_interval,
            "NFD_NAMESPACE": NFD_NAMESPACE,
        }
        done = subprocess.run(
            [
                str(self.script),
                "start",
                str(self.kube.plane.admin_kubeconfig),
                self.node,
                str(self.features),
                str(self.state),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"NFD pipeline did not start: {done.stderr[-3000:]}")
        self._started = True

    def stop(self) -> None:
        if self._started:
            subprocess.run(
                [str(self.script), "stop", str(self.state)],
                capture_output=True,
                timeout=60,
                check=False,
            )
            self._started = False

    def logs(self, lines: int = 30) -> str:
        parts = []
        for name in ("nfd-worker", "nfd-master"):
            path = self.state / "logs" / f"{name}.log"
            text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            parts.append(f"--- {name}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    # ---------------------------------------------------------------- the Node

    def published(self) -> dict[str, str]:
        """The Node's labels that are not its baseline ones: what NFD published."""
        labels = self.kube.labels(self.node)
        return {k: v for k, v in labels.items() if self.baseline.get(k) != v}

    def wait_for(self, expected: Mapping[str, str], since: float, timeout: float) -> float:
        """Seconds from ``since`` (``time.monotonic()``) until the Node's published labels
        are exactly ``expected``; fails after ``timeout`` with what was there instead."""
        want = dict(expected)
        deadline = since + timeout
        while True:
            got = self.published()
            now = time.monotonic()
            if got == want:
                return now - since
            if now > deadline:
                missing = sorted(set(want.items()) - set(got.items()))[:5]
                extra = sorted(set(got.items()) - set(want.items()))[:5]
                pytest.fail(
                    f"node {self.node}: labels not as expected {timeout:.1f} s after the write "
                    f"(missing {missing}, extra {extra})\n{self.logs()}"
                )
            time.sleep(0.02)

    # ---------------------------------------------------------------- features.d

    def quiet(self) -> None:
        """Wait until features.d has been still long enough for the worker's next event."""
        changed = os.stat(self.features).st_mtime
        delay = min(changed + EVENT_SPACING - time.time(), EVENT_SPACING)
        if delay > 0:
            time.sleep(delay)

    def clear(self) -> None:
        """Remove every feature file (spaced, so the worker sees each removal) and wait
        until the Node has none of their labels."""
        for path in self.features.iterdir():
            if not path.name.startswith("."):
                # One removal per tick of the worker's: a second one in the same tick
                # would be dropped, and the file's labels would stay for a minute.
                self.quiet()
                path.unlink()
        self.wait_for({}, time.monotonic(), timeout=5.0)


@contextlib.contextmanager
def running_pipeline(
    control_plane: ControlPlane, workdir: Path, *, sleep_interval: str
) -> Iterator[NfdPipeline]:
    """A started pipeline on a Node of its own of ``control_plane``, stopped on exit."""
    kube = GfdCluster(control_plane, control_plane.workdir / "gfd")
    pipeline = NfdPipeline(kube, workdir, sleep_interval=sleep_interval)
    pipeline.start()
    try:
        yield pipeline
    finally:
        pipeline.stop()
