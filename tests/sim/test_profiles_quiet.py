"""A simulated run of any bundled profile is quiet at the default log level.

The bundled profiles model healthy machines read with privileges (but one, whose facts are
a fault: ``tests.sim.FAULTY_PROFILES``), so nothing of a run on them deserves a warning: ``labels``, ``topo`` and ``facts`` print nothing on stderr, and a
one-shot run logs only at info (its health verdict and what it published). A warning here
means a profile lacks a fact its labels or checks need, or the simulated run reads
something of the host. Each run is in-process, at the default log level (no
``--log-level``), with an empty environment.
"""

from __future__ import annotations

import io
import json

import pytest

from gfd.sim import BUNDLED_PROFILES
from tests.host import gfd_main
from tests.sim import FAULTY_PROFILES

PROFILES = sorted(BUNDLED_PROFILES)


def run(capfd: pytest.CaptureFixture[str], *args: str) -> str:
    """gfd's stderr for ``args`` (exit status 0 checked)."""
    capfd.readouterr()
    out = io.StringIO()
    code = gfd_main(list(args), env={}, stdout=out)
    err = capfd.readouterr().err
    assert code == 0, f"gfd {' '.join(args)} exited {code}: {err}"
    assert out.getvalue(), f"gfd {' '.join(args)} printed nothing on stdout"
    return err


def test_every_bundled_profile_is_checked() -> None:
    assert len(PROFILES) >= 15


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("command", [["labels"], ["topo"], ["facts"]], ids=lambda c: c[0])
def test_a_subcommand_on_a_bundled_profile_prints_nothing_on_stderr(
    capfd: pytest.CaptureFixture[str], profile: str, command: list[str]
) -> None:
    assert run(capfd, "--simulate", profile, *command) == ""


@pytest.mark.parametrize("profile", PROFILES)
def test_a_one_shot_run_on_a_bundled_profile_warns_of_nothing(
    capfd: pytest.CaptureFixture[str], profile: str
) -> None:
    err = run(capfd, "--simulate", profile, "--oneshot", "--output-file", "-")
    # Logs to a stream that is no terminal are JSON lines: every one of them info, but
    # the health problem a faulty profile models (tests.sim.FAULTY_PROFILES).
    lines = [json.loads(line) for line in err.splitlines()]
    warned = [line.get("reason") for line in lines if line["level"] != "info"]
    assert warned == ([FAULTY_PROFILES[profile]] if profile in FAULTY_PROFILES else [])
    assert "labels published" in [line["event"] for line in lines]
