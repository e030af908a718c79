"""The hostile-input corpus's fixtures.

Its closing line (``hostile corpus: N cases (config a, env b, ...), P passed, F failed``)
is counted by ``tests/closing_lines.py``, with the families of ``tests/suite_tally.py``.
"""

from __future__ import annotations

from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    cluster,
    emulator,
    kubeconfig,
    node_labels,
    request_timeout,
)
