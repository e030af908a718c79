"""The cyclic garbage collector's pause while a gfd process starts.

Starting is where a gfd process allocates most of what it keeps: about a hundred
modules, their classes and functions, the settings and the assembled agent. The
collector walked those objects again and again while the imports ran, and would again
at each full collection for as long as the agent runs, to find nothing (what the pause
saves: ``docs/benchmarks.md``, "Start-up"). So the console entry
point (:mod:`gfd.console`) pauses it before importing anything, and it is resumed when
start-up is over: by a run once its agent is assembled, just before the first cycle; by
``cleanup`` and ``doctor``, which may page through a large cluster, before they start.
``labels``, ``facts`` and ``topo`` read the node once and end with it paused. Resuming
first moves everything alive into the permanent generation (:func:`gc.freeze`), which no
collection scans again; a periodic agent collects start-up's garbage before that, so
that none of it is kept for life.

Only a pause this module made is resumed: gfd used as a library (the tests call
:func:`gfd.cli.main` in process) never touches its host's collector.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collector() -> None:
    """Disable the collector if it is enabled, remembering that this module did."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collector(*, collect_first: bool) -> None:
    """Freeze what start-up allocated and enable the collector, if :func:`pause_collector`
    paused it; ``collect_first``: free start-up's cyclic garbage before freezing, which a
    process that runs for long wants (frozen garbage is never freed) and a one-shot run
    does not (it ends before that memory matters; the collection takes tens of ms)."""
    global _paused
    if _paused:
        _paused = False
        if collect_first:
            gc.collect()
        gc.freeze()
        gc.enable()
