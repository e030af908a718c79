"""docs/nvml.md lists exactly the NVML calls the reader may make, with their roles and branches."""

from __future__ import annotations

import re
from pathlib import Path

from gfd.nvml.branches import FIRST_EXPORTED_IN, OLDEST_BRANCH
from gfd.nvml.reader import NVML_CALLS

DOC = Path(__file__).resolve().parents[2] / "docs" / "nvml.md"
ROW = re.compile(r"^\| `(nvml\w+)` \| ([a-z-]+) \| (\d+) \|", re.MULTILINE)


def test_the_table_matches_the_reader() -> None:
    documented = {name: (role, int(branch)) for name, role, branch in ROW.findall(DOC.read_text())}
    expected = {
        call.symbol: (call.role, FIRST_EXPORTED_IN.get(call.symbol, OLDEST_BRANCH))
        for call in NVML_CALLS
    }
    assert documented == expected
