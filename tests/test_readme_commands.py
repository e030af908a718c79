"""The README's "Using it" lines work as printed, and ``make demo`` says how to reach them.

A newcomer runs ``make demo`` and then pastes the README's lines one by one. Here each
shell block of "Using it" is parsed out of README.md and run exactly as printed, line after
line in one bash session, in a scratch folder that holds only a ``.venv`` link to the
environment running these tests (as ``make demo`` leaves the checkout) and with gfd not on
PATH: each line must exit 0. A block that needs a real GPU node is marked in the README
(``<!-- readme-test: REASON -->`` just above it); its lines are checked against gfd's own
command-line parser, and the block is skipped with that reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gfd.cli import parse_command_line

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
MARKER = re.compile(r"<!-- readme-test: (?P<reason>.+?) -->")
#: Shell syntax that ends a command's own words in a README line (a redirection).
REDIRECTIONS = (">", ">>", "<", "|", "2>")


@dataclass(frozen=True)
class Block:
    """One ``sh`` block of the README's "Using it" section."""

    first_line: int  # in README.md, 1-based
    lines: tuple[str, ...]
    #: Why it cannot run here, as the README's marker says; None: it runs.
    needs: str | None


def using_it_blocks(text: str) -> list[Block]:
    section = text.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    offset = text[: text.index("\n## Using it\n")].count("\n") + 2
    lines = section.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```sh":
            index += 1
            continue
        before = next((line for line in reversed(lines[:index]) if line.strip()), "")
        marker = MARKER.fullmatch(before.strip())
        end = lines.index("```", index + 1)
        body = tuple(line for line in lines[index + 1 : end] if line.strip())
        blocks.append(Block(offset + index + 1, body, marker["reason"] if marker else None))
        index = end + 1
    return blocks


BLOCKS = using_it_blocks(README.read_text(encoding="utf-8"))


def gfd_words(line: str) -> list[str] | None:
    """The arguments of a line that runs gfd (None: another command): its words before a
    comment or a redirection."""
    words = shlex.split(line, comments=True)
    if not words or words[0] != "gfd":
        return None
    for position, word in enumerate(words):
        if word in REDIRECTIONS:
            return words[1:position]
    return words[1:]


def test_using_it_has_a_block_that_runs_anywhere_and_one_for_a_gpu_node() -> None:
    assert [block.needs is None for block in BLOCKS] == [True, False]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"README.md:{block.first_line}")
def test_every_line_of_a_using_it_block_exits_0_as_printed(block: Block, tmp_path: Path) -> None:
    for line in block.lines:
        words = gfd_words(line)
        if words is not None:
            parse_command_line(words)  # a flag or subcommand gfd lacks fails here, by name
    if block.needs is not None:
        pytest.skip(f"README.md:{block.first_line} {block.needs}")
    if sys.prefix == sys.base_prefix:
        pytest.skip("the README's lines expect gfd in .venv, as make demo installs it")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    script = "".join(
        f"{line}\nstatus=$?\n"
        f'[ "$status" -eq 0 ] || {{ echo "line {number} exited $status" >&2; exit 1; }}\n'
        for number, line in enumerate(block.lines, 1)
    )
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(
        part for part in os.environ.get("PATH", "").split(os.pathsep) if part != venv_bin
    )
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stderr}\n(the lines: README.md:{block.first_line})"
    # What the lines say they write: the DGX A100 has eight GPUs.
    assert "nvidia.com/gpu.count=8" in (tmp_path / "features.d" / "gfd").read_text().splitlines()
    assert "gpus:" in (tmp_path / "node.yaml").read_text()


def demo_commands() -> list[str]:
    """The commands ``make demo`` runs, as make prints them without running them."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_demo_ends_by_naming_lines_of_the_first_block() -> None:
    hints = [
        match[1] for line in demo_commands() if (match := re.fullmatch(r'echo "   (\S.*)"', line))
    ]
    shown = [hint for hint in hints if not hint.startswith("(")]
    commands = {line.split("#", 1)[0].strip() for line in BLOCKS[0].lines}
    assert shown and set(shown) <= commands, (shown, commands)


def test_make_demo_shows_each_command_exactly_as_it_runs() -> None:
    lines = demo_commands()
    shown = [
        (position, match["command"])
        for position, line in enumerate(lines)
        if (match := re.fullmatch(r'echo "== [^:]+: (?P<command>.+)"', line))
    ]
    assert len(shown) == 2
    for position, command in shown:
        assert lines[position + 1] == command
