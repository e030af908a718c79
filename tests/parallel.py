"""How make test runs the suite in parallel (pytest-xdist, ``-n auto``): how many workers,
which tests one worker runs together, and which start first.

Loaded by ``tests/conftest.py`` before the command line is read (the worker count is
decided then). Its pytest-xdist hooks are optional: with ``-p no:xdist`` the suite runs
serially without them.
"""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two workers per CPU: most of the suite waits (on gfd processes, agents' cycles, the
    emulator), not computes; a serial run kept 2 CPUs half idle."""
    return 2 * len(os.sched_getaffinity(0))


def scheduling_scope(nodeid: str) -> str:
    """The unit of work one worker runs whole: the tests that share an expensive fixture.

    A module by default (module-scoped fixtures run once: the reference differential's
    batch, the chart's renders); the real-server suite as one (its control plane is per
    session, so per worker); each image test on its own (they share only cheap look-ups, and
    the emulated architecture's are the slowest tests of CI).
    """
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/realkube/"):
        return "tests/realkube"
    if path.startswith("tests/deploy/test_image"):
        return nodeid
    return path


def _started_first(nodeid: str) -> bool:
    """The longest units, handed out first so that none is the run's tail: the images' tests
    under emulation, and the reference differential's batch."""
    return (
        nodeid.startswith("tests/deploy/test_image") and "[arm64" in nodeid
    ) or nodeid.startswith("tests/conformance/test_differential.py")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # After pytest's own ordering by session-scoped parameters; sorted() is stable, so every
    # worker (each collects alone) gets the same order, as pytest-xdist requires.
    items[:] = sorted(items, key=lambda item: not _started_first(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_scope(nodeid)

    return SharedFixtureScheduling(config, log)
