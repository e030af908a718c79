"""NFD's record, checked (or re-recorded) on the real pipeline: each features.d case of
``tests/records/nfd_cases.py`` goes through nfd-worker and nfd-master, and the labels that
reach the Node are compared with ``tests/records/nfd/local-source.json``.

With ``GFD_RECORD_NFD`` set (``python -m tests.records.nfd_cases --record``), what the Node
showed replaces the record instead. The worker re-reads every 3 s here, so each case is
judged after two whole passes whatever its file events did.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane
from tests.realkube.nfd_pipeline import NfdPipeline, running_pipeline
from tests.records.nfd_cases import CASES, RECORD, RERECORD, FeatureCase
from tests.records.store import Record, load_record, recorded_case, today, write_record

pytestmark = [pytest.mark.oracle("kube"), pytest.mark.oracle("nfd"), pytest.mark.slow]

INTERVAL_S = 3.0
RECORD_ENV = "GFD_RECORD_NFD"
_seen: dict[str, dict[str, object]] = {}


@pytest.fixture(scope="module")
def pipeline(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NfdPipeline]:
    workdir = tmp_path_factory.mktemp("nfd-record")
    with running_pipeline(control_plane, workdir, sleep_interval=f"{INTERVAL_S:.0f}s") as nfd:
        yield nfd
    target = os.environ.get(RECORD_ENV)
    if target and len(_seen) == len(CASES):
        old = load_record(RECORD)
        write_record(
            Path(target),
            Record(
                program=old.program,
                version=os.environ.get("NFD_VERSION", old.version),
                recorded=today(),
                cases=_seen,
                notes={
                    **old.notes,
                    "source": "captured from the real pipeline by this runner: "
                    + os.environ.get("GFD_RECORD_NFD_BUILT", "build not described"),
                },
            ),
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_the_node_gets_what_the_record_says(case: FeatureCase, pipeline: NfdPipeline) -> None:
    pipeline.clear()
    case.write(pipeline.features)
    # Two whole periodic passes: whatever the file events did, the worker has read it all.
    time.sleep(2 * INTERVAL_S + 1.5)
    seen = pipeline.published()
    pipeline.clear()
    if os.environ.get(RECORD_ENV):
        _seen[case.case_id] = {
            "inputs_sha256": case.inputs_hash,
            "about": case.about,
            "labels": seen,
        }
        return
    recorded = recorded_case(RECORD, case.case_id, case.inputs_hash, RERECORD)
    assert seen == recorded["labels"], case.about
