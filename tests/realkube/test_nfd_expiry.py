"""The feature file's expiry directive on the real NFD: labels of an agent that stopped
refreshing its file leave the Node within NFD's bound, and not before the file expired.

NFD evaluates ``# +expiry-time=`` only on its periodic pass (an expiry is no file event),
so a label goes at most one worker sleep interval (plus its one-second event tick and
nfd-master's one-second batching) after the time written in the file. This module runs
its own pipeline with a 2 s sleep interval, so the bound is seconds, not the minute of
NFD's default (the suite's other pipeline, at 60 s, would make this case a minute long).
"""

from __future__ import annotations

import datetime as dt
import io
import time
from collections.abc import Iterator

import pytest

from gfd.sinks.featurefile import EXPIRY_DIRECTIVE
from tests.controlplane import ControlPlane
from tests.host import gfd_main
from tests.realkube.nfd_pipeline import NfdPipeline, running_pipeline
from tests.reliability.agent_process import expected_labels

pytestmark = [pytest.mark.oracle("kube"), pytest.mark.oracle("nfd")]

SLEEP_SECONDS = 2.0
#: nfd-master applies NodeFeature changes to Nodes in batches, once a second.
MASTER_BATCH_SECONDS = 1.0
EXPIRY = "4s"


@pytest.fixture(scope="module")
def short_pipeline(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[NfdPipeline]:
    workdir = tmp_path_factory.mktemp("nfd-expiry")
    with running_pipeline(control_plane, workdir, sleep_interval=f"{SLEEP_SECONDS:.0f}s") as nfd:
        yield nfd


def test_a_stopped_agent_loses_its_labels_within_nfd_s_bound(short_pipeline: NfdPipeline) -> None:
    pipeline = short_pipeline
    labels = expected_labels("t4-single")
    output = pipeline.features / "gfd"
    started = time.monotonic()
    # One run and the agent is gone: nothing refreshes the file after this.
    code = gfd_main(
        [
            "--simulate", "t4-single", "--oneshot", "--no-timestamp", "--log-level", "error",
            "--output-file", str(output), "--output-file-expiry", EXPIRY,
        ],
        env={},
        stdout=io.StringIO(),
    )  # fmt: skip
    assert code == 0
    first = output.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(EXPIRY_DIRECTIVE)
    expires_at = dt.datetime.fromisoformat(first.removeprefix(EXPIRY_DIRECTIVE)).timestamp()
    pipeline.wait_for(labels, started, 3.0)
    bound = expires_at + SLEEP_SECONDS + 1.0 + MASTER_BATCH_SECONDS
    while pipeline.published():
        assert time.time() < bound + 0.5, (
            f"labels still on the Node {time.time() - expires_at:.1f} s after the file expired"
            f"\n{pipeline.logs()}"
        )
        time.sleep(0.05)
    gone = time.time()
    # Not before the file said (the clocks are one machine's), and within NFD's bound.
    assert gone >= expires_at - 0.05, f"labels gone {expires_at - gone:.2f} s early"
    print(f"\nNFD expiry: labels gone {gone - expires_at:.2f} s after the file expired")
