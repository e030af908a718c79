"""The test control plane's etcd part, started from a real etcd binary.

The real-server suite (``tests/realkube/``) starts etcd through :class:`tests.controlplane.Etcd`.
Debian's etcd 3.4 refuses ``--listen-client-urls`` without ``--advertise-client-urls``, and
later releases advertise ``localhost:2379`` by default, where it does not listen; so this
test holds the helper to what etcd itself reports: healthy, storing and reading a key, and
advertising to clients the URL it listens on. It runs with the etcd of ``KUBEBUILDER_ASSETS``
or, without it, the oracle ``etcd`` (``ETCD_BIN``: Debian's ``etcd-server``, which ``.ci/run``
installs, so CI runs this test against etcd 3.4 and fails where it is missing); elsewhere it
skips in one line.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import ControlPlaneError, Etcd
from tests.oracles import oracle_path

pytestmark = [pytest.mark.slow, pytest.mark.oracle("etcd")]


def etcd_binary() -> Path:
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if assets and (Path(assets) / "etcd").is_file():
        return Path(assets) / "etcd"
    return oracle_path("etcd")


def version_of(binary: Path) -> str:
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.splitlines()[0]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    member = Etcd(etcd_binary(), tmp_path)
    try:
        member.start()
    except ControlPlaneError as error:
        member.stop()
        pytest.fail(f"{version_of(etcd_binary())}: {error}", pytrace=False)
    yield member
    member.stop()


def call(etcd: Etcd, path: str, body: dict[str, Any], timeout: float = 5.0) -> Any:
    """etcd's v3 JSON gateway (served by 3.4 and later alike)."""
    request = urllib.request.Request(etcd.url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_etcd_starts_and_advertises_where_it_listens(etcd: Etcd) -> None:
    (member,) = call(etcd, "/v3/cluster/member/list", {})["members"]
    assert member["clientURLs"] == [etcd.url], version_of(etcd_binary())


def test_etcd_stores_and_reads_a_key(etcd: Etcd) -> None:
    call(etcd, "/v3/kv/put", {"key": b64("/registry/gfd"), "value": b64("stored")})
    (kv,) = call(etcd, "/v3/kv/range", {"key": b64("/registry/gfd")})["kvs"]
    assert base64.b64decode(kv["value"]) == b"stored"


def test_a_paused_etcd_answers_nothing_until_it_resumes(etcd: Etcd) -> None:
    with etcd.paused(), pytest.raises((urllib.error.URLError, TimeoutError)):
        call(etcd, "/v3/kv/range", {"key": b64("x")}, timeout=0.5)
    # Resumed, it answers again: waited for as an event, with a generous bound, since a
    # process just continued on a busy machine may take seconds to be scheduled and to
    # work off what queued meanwhile (a fixed 5 s call failed once under load).
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = call(etcd, "/v3/kv/range", {"key": b64("x")})
            break
        except (urllib.error.URLError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert answer.get("kvs") is None


def test_stopping_it_ends_the_process_it_started(etcd: Etcd) -> None:
    pid = etcd.process.pid
    etcd.stop()
    assert not etcd.process.running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
