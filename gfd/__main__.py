"""``python -m gfd``: the same entry point as the ``gfd`` console script."""

from gfd.console import main

raise SystemExit(main())
