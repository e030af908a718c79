"""The host a test's gfd sees: a folder of the test's own, never the machine's ``/etc``.

gfd's entry point takes :class:`gfd.config.host.HostPaths` (where the feature file, sysfs,
the kernel log, ``/proc``, the driver root and the ServiceAccount's folder are by default).
Tests run gfd in-process through :func:`gfd_main`, which gives it a host of the running
test's own (``host-N/etc/kubernetes/...``, ``host-N/sys``, ..., in pytest's temporary
folder), made on first use, so a run with every default writes nothing outside the
test's folders; a fixture's setup or teardown gets the host of the test it serves. The conftest's
autouse fixture says which test is running (:func:`running_test`); a test that wants the
paths themselves asks :func:`test_host`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import pytest

from gfd.cli import main
from gfd.config.host import HostPaths

_running: list[tuple[str, pytest.TempPathFactory]] = []
_hosts: dict[str, HostPaths] = {}


def running_test(nodeid: str, folders: pytest.TempPathFactory) -> None:
    """Called by the conftest's autouse fixture at the start of every test."""
    _running[:] = [(nodeid, folders)]
    _hosts.clear()


def test_host() -> HostPaths:
    """The running test's host: every default path under a folder of its own."""
    if not _running:
        raise RuntimeError("tests.host.test_host() called outside a test")
    nodeid, folders = _running[0]
    if nodeid not in _hosts:
        _hosts[nodeid] = HostPaths.under(folders.mktemp("host"))
    return _hosts[nodeid]


def test_host_seeing_own_processes() -> HostPaths:
    """The running test's host, but with the machine's ``/proc``: for a test of gfd reading
    a process that the test itself started (``doctor --from-pid``)."""
    return dataclasses.replace(test_host(), proc_root="/proc")


def gfd_main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    host: HostPaths | None = None,
) -> int:
    """:func:`gfd.cli.main` on the running test's host (or ``host``)."""
    return main(argv, env=env, stdout=stdout, host=test_host() if host is None else host)


# Not a test, though its name begins with one.
test_host.__test__ = False  # type: ignore[attr-defined]
test_host_seeing_own_processes.__test__ = False  # type: ignore[attr-defined]


#: A node's paths, except that no pod's ServiceAccount is mounted: settings resolved with
#: it do not depend on whether the tests run in a pod.
NOT_IN_A_POD = HostPaths(service_account_dir=str(Path(__file__).parent / "no-such-serviceaccount"))
