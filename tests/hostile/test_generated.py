"""Generated hostile documents on top of the table: YAML that hypothesis builds to hurt.

Flow-style YAML with anchors and aliases in random places (bombs of random shape),
nesting of random depth, integers of thousands of digits, durations with and without
units, written into config files and facts files at the places gfd reads. The
contract, whatever the document: exit 0, 1 or 2; on failure exactly one ``gfd: error:``
line of bounded length and the good feature file untouched; never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.host import gfd_main
from tests.reliability.agent_process import file_state, write_previous_file

# Each example runs gfd whole in this process (tens of milliseconds); every run draws new
# documents.
EXAMPLES = int(os.environ.get("HOSTILE_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_scalars = st.one_of(
    st.sampled_from(["60", "60s", "1.5", "-1s", "1e3s", "infinite", "0", "true", "v1", "''"]),
    st.integers(min_value=0, max_value=6000).map(lambda n: "9" * max(n, 1)),
    st.text(alphabet="abcxyz:-_.", min_size=1, max_size=12).map(lambda t: f"'{t}'"),
)


@st.composite
def yaml_nodes(draw: st.DrawFn) -> str:
    """A flow-style YAML node whose aliases refer to anchors defined before them."""
    anchors: list[str] = []

    def node(depth: int) -> str:
        kind = draw(st.sampled_from(["scalar", "scalar", "list", "map", "alias", "deep"]))
        if kind == "alias" and anchors:
            return "*" + draw(st.sampled_from(anchors))
        if kind == "deep":
            levels = draw(st.integers(1, 300))
            return "[" * levels + draw(_scalars) + "]" * levels
        if kind in ("list", "map") and depth < 6:
            width = draw(st.integers(0, 12))
            items = [node(depth + 1) for _ in range(width)]
            if kind == "list":
                text = "[" + ", ".join(items) + "]"
            else:
                text = "{" + ", ".join(f"k{i}: {item}" for i, item in enumerate(items)) + "}"
            if draw(st.booleans()):
                name = f"a{len(anchors)}"
                anchors.append(name)
                # An anchored copy, then a handful of aliases of it: a bomb if nested.
                repeats = draw(st.integers(0, 12))
                return (
                    "[&" + name + " " + text + "".join(", *" + name for _ in range(repeats)) + "]"
                )
            return text
        return draw(_scalars)

    return node(0)


_CONFIG_PLACES = (
    "version: v1\nflags: {{gfd: {{sleepInterval: {node}}}}}\n",
    "version: v1\nflags: {{gfd: {{outputFileExpiry: {node}, sleepInterval: 1m}}}}\n",
    "version: v1\nflags: {{migStrategy: {node}}}\n",
    "version: v1\nsharing: {{timeSlicing: {{resources: [{{name: nvidia.com/gpu, replicas: {node}}}]}}}}\n",
    "version: v1\nsharing: {node}\n",
    "version: v1\nflags: {node}\n",
    "version: v1\nflags: {{gfd: {{healthChecks: {node}, healthGracePeriod: {node}}}}}\n",
    "{node}\n",
)
_FACTS_PLACES = (
    "driver_version: {node}\ngpus: []\n",
    "driver_version: 550.54.15\ncuda_driver_version: {node}\ngpus: []\n",
    "driver_version: 550.54.15\ngpus: {node}\n",
    "driver_version: 550.54.15\ngpus:\n- {{index: {node}, name: X, uuid: GPU-1, bus_id: '00000000:01:00.0'}}\n",
    "{node}\n",
)


@contextlib.contextmanager
def scene(content: str) -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="gfd-hostile-") as directory:
        root = Path(directory)
        (root / "features.d").mkdir()
        good = root / "features.d" / "gfd"
        write_previous_file(good, {"nvidia.com/gpu.product": "GOOD"})
        document = root / "input.yaml"
        document.write_text(content, encoding="utf-8")
        yield document, good


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = gfd_main(argv, env={"GFD_LOG_LEVEL": "error"}, stdout=io.StringIO())
    return code, err.getvalue()


def _assert_contract(code: int, err: str, good: Path, before: tuple[bytes, int, int]) -> None:
    assert "Traceback" not in err, err[-3000:]
    assert code in (0, 1, 2), code
    if code != 0:
        lines = [line for line in err.splitlines() if line.startswith("gfd: error: ")]
        assert len(lines) == 1, err[-3000:]
        assert len(lines[0]) <= 1100
        assert file_state(good) == before


@FUZZ
@given(place=st.sampled_from(_CONFIG_PLACES), node=yaml_nodes())
def test_generated_config_files(place: str, node: str) -> None:
    with scene(place.format(node=node)) as (document, good):
        before = file_state(good)
        code, err = _run(
            ["--config-file", str(document), "--simulate", "t4-single", "--oneshot",
             "--no-timestamp", "-o", str(good)]
        )  # fmt: skip
        _assert_contract(code, err, good, before)


@FUZZ
@given(place=st.sampled_from(_FACTS_PLACES), node=yaml_nodes())
def test_generated_facts_files(place: str, node: str) -> None:
    with scene(place.format(node=node)) as (document, good):
        before = file_state(good)
        code, err = _run(
            ["--simulate", str(document), "--oneshot", "--no-timestamp", "-o", str(good)]
        )
        _assert_contract(code, err, good, before)
