"""The ``gfd`` console script's entry point (and ``python -m gfd``'s).

It pauses the garbage collector (:mod:`gfd.startup_gc`) before anything else is
imported, then hands over to :func:`gfd.cli.main`, which does the rest.
"""

from __future__ import annotations

from gfd.startup_gc import pause_collector


def main() -> int:
    """Run ``gfd`` with the arguments of this process."""
    pause_collector()
    from gfd.cli import main as cli_main

    return cli_main()
