"""The bundled profiles within the bounds on absurd machines (gfd.facts.limits).

``load_profile`` skips the bounds pass (one more walk of the YAML) for a bundled profile,
which is gfd's own file: this test is what holds each one within the bounds instead.
"""

from __future__ import annotations

import pytest

from gfd.facts.limits import check_document_bounds
from gfd.sim import BUNDLED_PROFILES, profile_path


@pytest.mark.parametrize("name", BUNDLED_PROFILES)
def test_each_bundled_profile_is_within_the_bounds(name: str) -> None:
    path = profile_path(name)
    check_document_bounds(path.read_text(encoding="utf-8"), str(path))
