"""Fixtures: the API server emulator with gfd's node, Pod and token (tests.kube_fixtures),
and :func:`doctor`, which runs ``gfd doctor --format json`` in process and reads its report."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gfd.config.host import HostPaths
from tests.host import gfd_main as main
from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    cluster,
    emulator,
    kubeconfig,
    node_labels,
)


@dataclass(frozen=True)
class Report:
    """What one ``gfd doctor`` run printed, and its exit status."""

    code: int
    lines: list[dict[str, str]]

    @property
    def by_check(self) -> dict[str, dict[str, str]]:
        return {line["check"]: line for line in self.lines}

    def state(self, check: str) -> str:
        return self.by_check[check]["state"]

    def message(self, check: str) -> str:
        return self.by_check[check]["message"]

    def fix(self, check: str) -> str:
        return self.by_check[check]["fix"]

    @property
    def problems(self) -> list[str]:
        return [line["check"] for line in self.lines if line["state"] == "problem"]


def doctor(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, host: HostPaths | None = None
) -> Report:
    """``gfd doctor ARGS --format json`` with only ``env`` as its environment, on the test's
    host (or ``host``)."""
    out = io.StringIO()
    code = main(["doctor", *args, "--format", "json"], env=dict(env or {}), stdout=out, host=host)
    return Report(code, json.loads(out.getvalue()))
