"""Record which processes NVIDIA's config-manager finds to signal, by their command line.

Under the GPU Operator, config-manager (the sidecar that switches sharing configs by node
label) sends SIGHUP to the process whose argv[0] in ``/proc/PID/cmdline`` equals
``PROCESS_TO_SIGNAL`` (``gpu-feature-discovery``). No registry ships config-manager, so CI
cannot ask it; this runner asks a build you have, and writes what it showed to
``tests/records/config-manager/process-lookup.json``, which ``tests/test_operator_dropin.py``
holds gfd to.

Each case runs alone in a fresh PID namespace (``unshare --pid --mount-proc``, root), so the
only candidate config-manager can find is the case's process: a stand-in (``/bin/sleep`` run
under a chosen argv, which SIGHUP ends) or gfd itself, started as the operator starts it or
with ``python -m gfd``. config-manager runs once (``ONESHOT=true``) against a minimal API
server in this process that serves one Node whose label selects a new config, so it switches
the config and looks for the process. Recorded per case: the command line as ``/proc`` showed
it, whether config-manager reported sending the signal, its exit status and last log line, and
whether the candidate got SIGHUP.

    python -m tests.conformance.record_config_manager --config-manager-bin PATH [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.records.store import RECORDS_DIR, Record, inputs_sha256, today, write_record

RECORD = RECORDS_DIR / "config-manager" / "process-lookup.json"
PROGRAM = "NVIDIA config-manager (k8s-device-plugin cmd/config-manager)"
PROCESS_TO_SIGNAL = "gpu-feature-discovery"
NODE = "gpu-node-0"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
ROOT = Path(__file__).resolve().parents[2]
RERECORD = (
    "sudo .venv/bin/python -m tests.conformance.record_config_manager "
    "--config-manager-bin PATH/TO/config-manager"
)

#: Stand-ins: argv as started (argv[0] then arguments), run as /bin/sleep.
STAND_INS: dict[str, list[str]] = {
    "bare-name": ["gpu-feature-discovery", "600"],
    "absolute-path": ["/usr/bin/gpu-feature-discovery", "600"],
    "relative-path": ["./gpu-feature-discovery", "600"],
    "name-with-suffix": ["gpu-feature-discovery.py", "600"],
    # What a Python console script looks like unrenamed: the interpreter, then the script.
    "interpreter-then-script": ["/usr/bin/python3", "/usr/bin/gpu-feature-discovery", "600"],
    "name-with-trailing-space": ["gpu-feature-discovery ", "600"],
}
#: gfd itself: how it is started (``operator``: the command ``gpu-feature-discovery``, as the
#: GPU Operator's container spec starts it; ``module``: ``python -m gfd``).
GFD_STARTS = ("operator", "module")


def stand_in_case(name: str) -> dict[str, Any]:
    return {"kind": "stand-in", "argv": STAND_INS[name], "process_to_signal": PROCESS_TO_SIGNAL}


def gfd_case(start: str) -> dict[str, Any]:
    """gfd's case: its inputs are how it is started; its command line is gfd's own doing."""
    argv = ["gpu-feature-discovery"] if start == "operator" else ["python3", "-m", "gfd"]
    return {"kind": "gfd", "argv": argv, "process_to_signal": PROCESS_TO_SIGNAL}


def all_cases() -> dict[str, dict[str, Any]]:
    cases = {f"stand-in:{name}": stand_in_case(name) for name in STAND_INS}
    cases.update({f"gfd:{start}": gfd_case(start) for start in GFD_STARTS})
    return cases


def case_sha256(case: dict[str, Any]) -> str:
    return inputs_sha256(case)


# --- a minimal API server: one Node, list and watch (watch-list included) -------------------


def _node(label: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": NODE, "resourceVersion": "2", "labels": {CONFIG_LABEL: label}},
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    label = "ts4"

    def log_message(self, format: str, *args: object) -> None:
        pass  # config-manager's log is the one recorded

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path != "/api/v1/nodes":
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404})  # fmt: skip
            return
        node = _node(self.label)
        if query.get("watch", [""])[0] not in ("true", "1"):
            self._send(200, {"kind": "NodeList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": "2"}, "items": [node]})  # fmt: skip
            return
        # A watch: HTTP/1.0, no length; the stream ends when the client goes.
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if query.get("sendInitialEvents", [""])[0] == "true":
            # client-go >= 1.35 lists by watching: the items, then a bookmark ending them.
            bookmark = {"kind": "Node", "apiVersion": "v1", "metadata": {
                "resourceVersion": "2", "annotations": {"k8s.io/initial-events-end": "true"}}}  # fmt: skip
            for event in ({"type": "ADDED", "object": node},
                          {"type": "BOOKMARK", "object": bookmark}):  # fmt: skip
                self.wfile.write(json.dumps(event).encode() + b"\n")
            self.wfile.flush()
        with contextlib.suppress(OSError):
            for _ in range(600):
                time.sleep(0.05)
                self.wfile.write(b"")
                self.wfile.flush()


@contextlib.contextmanager
def api_server(directory: Path) -> Iterator[Path]:
    """Serve the Node on 127.0.0.1; yields a kubeconfig for it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = directory / "kubeconfig"
    server_url = f"http://127.0.0.1:{server.server_port}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server_url}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    kubeconfig.write_text(json.dumps(config), encoding="utf-8")
    try:
        yield kubeconfig
    finally:
        server.shutdown()


# --- one case, inside its PID namespace -------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _portable(argv: list[str], directory: Path) -> list[str]:
    """``argv`` without this machine's paths: the interpreter and the case's folder."""
    return [
        "<python>" if part == sys.executable else part.replace(str(directory), "<dir>")
        for part in argv
    ]


def _start(case: dict[str, Any], directory: Path) -> tuple[subprocess.Popen[bytes], Path | None]:
    """Start the candidate; for gfd, wait for its first labels (it is then named)."""
    if case["kind"] == "stand-in":
        stand_in = subprocess.Popen(case["argv"], executable="/bin/sleep")
        # Until it has exec'd, /proc shows the forked recorder (or nothing).
        deadline = time.monotonic() + 10
        while _cmdline(stand_in.pid) != case["argv"] and time.monotonic() < deadline:
            time.sleep(0.01)
        return stand_in, None
    output, log = directory / "features", directory / "gfd.log"
    bin_dir = Path(sys.executable).parent
    argv = [*case["argv"]]
    if argv[0] == "python3":
        argv[0] = sys.executable
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(ROOT),
        "HOME": str(directory),
    }
    flags = ["--simulate", "t4-single", "--sleep-interval", "60s", "--no-timestamp",
             "--output-file", str(output)]  # fmt: skip
    with log.open("wb") as sink:
        agent = subprocess.Popen([*argv, *flags], env=env, stdout=sink, stderr=sink, cwd=ROOT)
    deadline = time.monotonic() + 30
    while not output.exists() and time.monotonic() < deadline and agent.poll() is None:
        time.sleep(0.05)
    return agent, log


def _reloaded_by_signal(log: Path) -> bool:
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "configuration reloaded" and event.get("reason") == "signal":
                return True
    return False


_KLOG_HEADER = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]*\] ")


def run_inside(binary: Path, case: dict[str, Any]) -> dict[str, Any]:
    """The case, in this (fresh) PID namespace: what config-manager did."""
    with tempfile.TemporaryDirectory(prefix="gfd-cm-") as tmp:
        directory = Path(tmp)
        available = directory / "available"
        available.mkdir()
        (available / "default").write_text("version: v1\n", encoding="utf-8")
        (available / "ts4").write_text("version: v1\n", encoding="utf-8")
        candidate, log = _start(case, directory)
        try:
            seen = _portable(_cmdline(candidate.pid), directory)
            with api_server(directory) as kubeconfig:
                env = {
                    "PATH": "/usr/bin:/bin", "HOME": str(directory), "KUBECONFIG": str(kubeconfig),
                    "NODE_NAME": NODE, "NODE_LABEL": CONFIG_LABEL,
                    "CONFIG_FILE_SRCDIR": str(available),
                    "CONFIG_FILE_DST": str(directory / "config.yaml"),
                    "DEFAULT_CONFIG": "default", "FALLBACK_STRATEGIES": "empty",
                    "ONESHOT": "true", "SEND_SIGNAL": "true", "SIGNAL": "1",
                    "PROCESS_TO_SIGNAL": case["process_to_signal"],
                }  # fmt: skip
                done = subprocess.run(
                    [str(binary)], env=env, capture_output=True, text=True, timeout=60
                )
            log_lines = [_KLOG_HEADER.sub("", x) for x in done.stderr.strip().splitlines()]
            if log is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    candidate.wait(timeout=2)
                signalled = candidate.returncode == -1  # SIGHUP ended the stand-in
            else:
                deadline = time.monotonic() + 5
                signalled = _reloaded_by_signal(log)
                while not signalled and time.monotonic() < deadline:
                    time.sleep(0.1)
                    signalled = _reloaded_by_signal(log)
        finally:
            if candidate.poll() is None:
                candidate.terminate()
                candidate.wait(timeout=10)
    return {
        "cmdline": seen,
        "config_manager_exit": done.returncode,
        "config_manager_sent_signal": "Successfully sent signal" in done.stderr,
        "config_manager_last_line": log_lines[-1] if log_lines else "",
        "candidate_got_sighup": signalled,
    }


def record_case(binary: Path, case_id: str, case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a fresh PID namespace (a child of this module, ``--inside``)."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--kill-child=SIGTERM", "--mount-proc",
         sys.executable, "-m", "tests.conformance.record_config_manager",
         "--config-manager-bin", str(binary), "--inside", json.dumps(case)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{case_id}: the case did not run:\n{done.stderr[-3000:]}")
    return {"inputs_sha256": case_sha256(case), "inputs": case, **json.loads(done.stdout)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config-manager-bin", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=RECORD.parent, help="default: %(default)s")
    parser.add_argument("--version", default="v0.20.0", help="the release built")
    parser.add_argument("--commit", default="1b826acc", help="its commit")
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    binary = options.config_manager_bin.resolve()
    if options.inside is not None:
        print(json.dumps(run_inside(binary, json.loads(options.inside))))
        return 0
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        parser.error("needs root and unshare: each case runs in a PID namespace of its own")
    cases = {case_id: record_case(binary, case_id, c) for case_id, c in all_cases().items()}
    notes = {
        "upstream": "NVIDIA/k8s-device-plugin",
        "how": (
            "per case, a fresh PID namespace (unshare --pid --fork --mount-proc) holding only the "
            "candidate, config-manager and the recorder (argv[0] the Python interpreter); "
            "config-manager ONESHOT=true SEND_SIGNAL=true SIGNAL=1 PROCESS_TO_SIGNAL="
            f"{PROCESS_TO_SIGNAL}, against a minimal API server (the recorder's) serving one "
            f"Node labelled {CONFIG_LABEL}=ts4, so it switches config and then looks for the "
            "process. Stand-ins are /bin/sleep under the given argv (SIGHUP ends them); gfd runs "
            "--simulate t4-single and counts as signalled when it logs a reload for 'signal'"
        ),
        "cmdline": (
            "argv as /proc/PID/cmdline showed it when config-manager ran (<python>: the "
            "interpreter's path, <dir>: the case's folder)"
        ),
        "rerecord": RERECORD,
    }
    record = Record(
        program=PROGRAM,
        version=f"{options.version} (commit {options.commit})",
        recorded=today(),
        cases=cases,
        notes=notes,
    )
    write_record(options.out / RECORD.name, record)
    for case_id, case in cases.items():
        print(f"{case_id}: {case['cmdline']} -> found {case['config_manager_sent_signal']}",
              file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
