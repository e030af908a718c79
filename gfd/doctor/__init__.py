"""``gfd doctor``: why are my labels missing? Each link of the chain from the GPU to the
labels on the Node, checked, one line each: ok, problem (with its fix) or cannot tell.

The package, one concern a module:

- :mod:`~gfd.doctor.finding`: what a check answers (:class:`~gfd.doctor.finding.Answer`:
  ok, problem, cannot tell) and the report's line (:class:`~gfd.doctor.finding.Finding`);
- :mod:`~gfd.doctor.examination`: what the checks look at, found out once and shared
  (NVML's reading, the labels of this cycle, the API server, the Node);
- :mod:`~gfd.doctor.api`: the doctor's bounded, read-only requests to the API server;
- :mod:`~gfd.doctor.checks`: one module per link;
- :mod:`~gfd.doctor.registry`: what a check is (:class:`DoctorCheck`) and the links in
  chain order (:data:`DOCTOR_CHECKS`);
- :mod:`~gfd.doctor.report`: the text and JSON reports and what makes the exit status.

The doctor writes nothing anywhere: its only writes are the sinks' server-side dry runs.
Every request has a timeout, and a cluster that does not answer costs one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.base.errors import GfdError
from gfd.config import Settings
from gfd.doctor.examination import Examination, examine_node
from gfd.doctor.finding import (
    CANNOT_TELL,
    OK,
    PROBLEM,
    Answer,
    Finding,
    cannot_tell,
)
from gfd.doctor.registry import DOCTOR_CHECKS, DoctorCheck
from gfd.doctor.report import FORMATS, found_a_problem, render

if TYPE_CHECKING:
    from gfd.kube_api import KubeClient

__all__ = [
    "CANNOT_TELL",
    "DOCTOR_CHECKS",
    "FORMATS",
    "OK",
    "PROBLEM",
    "Answer",
    "DoctorCheck",
    "Examination",
    "Finding",
    "diagnose",
    "found_a_problem",
    "render",
]


def _answer(check: DoctorCheck, examination: Examination, log: Any) -> Answer:
    """``check``'s answer; a check that fails never costs the others their line."""
    try:
        return check.examine(examination)
    except GfdError as exc:
        return cannot_tell(f"{exc}")
    except Exception as exc:
        log.debug("doctor check failed", check=check.name, exc_info=exc)
        return cannot_tell(
            f"internal error (a bug in gfd): {type(exc).__name__}: {exc}",
            "--log-level debug shows the traceback",
        )


def diagnose(
    settings: Settings,
    *,
    environment: Mapping[str, str],
    checks: Sequence[DoctorCheck] = DOCTOR_CHECKS,
    default_driver_root: Path | None = None,
    connect_kubernetes: Callable[..., KubeClient] | None = None,
    wall_clock: Callable[[], float] = time.time,
    is_mount: Callable[[str], bool] = os.path.ismount,
    log: Any = None,
) -> list[Finding]:
    """Every check's finding for this node as ``settings`` would run gfd on it, in order.

    ``environment`` is the process's (it says whether this is a pod); the other keywords
    are what reaches outside the process, for tests.
    """
    if log is None:
        from gfd.base.logs import get_logger

        log = get_logger()
    with examine_node(
        settings,
        environment=environment,
        default_driver_root=default_driver_root,
        connect_kubernetes=connect_kubernetes,
        wall_clock=wall_clock,
        is_mount=is_mount,
        log=log,
    ) as examination:
        return [Finding(check.name, _answer(check, examination, log)) for check in checks]
