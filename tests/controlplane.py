"""A real Kubernetes control plane for tests, started as controller-runtime's envtest does.

This module owns the processes and files of one test control plane: etcd and
kube-apiserver (and, when asked, kube-controller-manager and kube-scheduler) from the
directory named by
``KUBEBUILDER_ASSETS``, on 127.0.0.1 with free ports, with their own certificate
authority, serving certificate, service-account signing key and issuer, RBAC
authorization, the default admission plugins (ValidatingAdmissionPolicy among them)
and an audit log of every request. It stops exactly the processes it started, by
their ids, and nothing else. Its :class:`Etcd` runs etcd 3.4 (the one Debian ships) as
well as later releases.

The :class:`AdminClient` here is deliberately independent of gfd's own Kubernetes
client: what judges gfd must not share its code. :class:`AuditLog` counts what the
server saw, so a test can state how many reads and writes gfd made without asking gfd.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: Where bound service-account tokens say they come from.
ISSUER = "https://kubernetes.default.svc.cluster.local"
START_SECONDS = 60.0


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or answer; the message holds its log tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {done.stderr[-1000:]}")


@dataclass(frozen=True)
class Pki:
    """The control plane's keys and certificates (files under ``directory``)."""

    directory: Path

    ca_cert = property(lambda self: self.directory / "ca.crt")
    ca_key = property(lambda self: self.directory / "ca.key")
    serving_cert = property(lambda self: self.directory / "apiserver.crt")
    serving_key = property(lambda self: self.directory / "apiserver.key")
    admin_cert = property(lambda self: self.directory / "admin.crt")
    admin_key = property(lambda self: self.directory / "admin.key")
    sa_key = property(lambda self: self.directory / "sa.key")
    sa_pub = property(lambda self: self.directory / "sa.pub")

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        pki = cls(directory)
        d = directory
        _openssl("genrsa", "-out", "ca.key", "2048", cwd=d)
        _openssl(
            "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=gfd-test-ca",
            "-days", "2", "-out", "ca.crt", cwd=d,
        )  # fmt: skip
        (d / "san.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\n",
            encoding="utf-8",
        )
        (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n", encoding="utf-8")
        for name, subject, ext in (
            ("apiserver", "/CN=kube-apiserver", "san.ext"),
            ("admin", "/O=system:masters/CN=gfd-test-admin", "client.ext"),
        ):
            _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
            _openssl(
                "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d
            )
            _openssl(
                "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", f"{name}.crt", cwd=d,
            )  # fmt: skip
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
        return pki


#: Every request at Metadata level, once it is answered: who, what verb, which object,
#: which status. Enough to count gfd's reads and writes.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [{"level": "Metadata"}],
}


class AuditLog:
    """The API server's audit log: one JSON event per answered request."""

    def __init__(self, path: Path, admin: AdminClient) -> None:
        self.path = path
        self._admin = admin

    def mark(self) -> int:
        """A position in the log; :meth:`events` after it sees only later requests."""
        self.settle()
        return self.path.stat().st_size if self.path.exists() else 0

    def settle(self) -> None:
        """Wait until every request answered so far is in the log.

        A sentinel request is sent after them; once its event is written, so are theirs
        (the log backend writes an event before the server finishes the request).
        """
        name = f"audit-sentinel-{uuid.uuid4().hex[:12]}"
        self._admin.request("GET", f"/api/v1/namespaces/default/configmaps/{name}", ok=(404,))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.path.exists() and name in self.path.read_text(encoding="utf-8"):
                return
            time.sleep(0.02)
        raise ControlPlaneError(f"audit log {self.path}: sentinel {name} never appeared")

    def events(self, since: int = 0, *, user: str | None = None) -> list[dict[str, Any]]:
        """Events logged after position ``since`` (from :meth:`mark`), optionally one user's."""
        self.settle()
        with self.path.open("rb") as handle:
            handle.seek(since)
            lines = handle.read().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        if user is not None:
            events = [e for e in events if e.get("user", {}).get("username") == user]
        return events


class AdminClient:
    """Requests with urllib: cluster-admin (a ``system:masters`` client certificate) by
    default, or as the holder of ``token``."""

    def __init__(self, url: str, pki: Pki, *, token: str | None = None) -> None:
        self.url = url
        self._token = token
        self._context = ssl.create_default_context(cafile=str(pki.ca_cert))
        if token is None:
            self._context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        ok: Sequence[int] = (),
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """Send one request; return (status, parsed body). Raises unless 2xx or in ``ok``."""
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if self._token is not None:
            request.add_header("Authorization", f"Bearer {self._token}")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=timeout) as reply:
                status, raw = reply.status, reply.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        if not (200 <= status < 300 or status in ok):
            raise ControlPlaneError(f"admin {method} {path}: HTTP {status}: {raw[:600]!r}")
        return status, parsed

    def get(self, path: str) -> Any:
        return self.request("GET", path)[1]

    def apply(self, obj: Mapping[str, Any], *, manager: str = "gfd-tests") -> Any:
        """Server-side apply of one object (as ``kubectl apply --server-side`` does)."""
        return self.request(
            "PATCH",
            object_path(obj),
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true"},
        )[1]

    def delete(self, path: str, *, propagation: str | None = None) -> None:
        body = {"propagationPolicy": propagation} if propagation else None
        self.request("DELETE", path, body, ok=(404,))

    def wait_ready(self, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise ControlPlaneError(f"exited with status {process.returncode}")
            try:
                status, _ = self.request("GET", "/readyz", ok=(500, 503), timeout=2)
                if status == 200:
                    return
                last = f"HTTP {status}"
            except (OSError, ControlPlaneError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(f"not ready after {timeout:.0f} s: {last}")


#: API paths of the kinds the tests create, by (apiVersion, kind).
_RESOURCES: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "DaemonSet": ("daemonsets", True),
    "Job": ("jobs", True),
    "Pod": ("pods", True),
    "Node": ("nodes", False),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "NodeFeature": ("nodefeatures", True),
}


def object_path(obj: Mapping[str, Any]) -> str:
    """The REST path of ``obj`` (one of the kinds in :data:`_RESOURCES`)."""
    api_version = obj["apiVersion"]
    resource, namespaced = _RESOURCES[obj["kind"]]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    metadata = obj["metadata"]
    where = f"/namespaces/{metadata['namespace']}" if namespaced else ""
    return f"{prefix}{where}/{resource}/{metadata['name']}"


class _Process:
    """One child process with its log file; stopped by its own id only."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGCONT)  # a paused process cannot exit
                self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.popen = None

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Etcd:
    """One etcd member for a test control plane, on loopback ports of its own, its data and
    log under ``workdir``; etcd 3.4 (the one Debian ships) and later."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        peer_url = f"http://127.0.0.1:{free_port()}"
        self._process = _Process(
            "etcd",
            [
                str(binary),
                f"--data-dir={workdir / 'etcd'}",
                # etcd 3.4 and 3.5 refuse a client URL to listen on without one to advertise
                # (their default, localhost:2379, is not where this member listens).
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                # etcd 3.5 logs why it refuses its flags as a warning, then exits.
                "--log-level=warn",
            ],
            workdir / "etcd.log",
        )

    @property
    def process(self) -> _Process:
        return self._process

    def start(self) -> None:
        """Start etcd and wait until it reports itself healthy."""
        self._process.start()
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if not self._process.running():
                raise ControlPlaneError(f"etcd exited:\n{self._process.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as reply:
                    if json.loads(reply.read()).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise ControlPlaneError(
            f"etcd not healthy after {START_SECONDS:.0f} s:\n{self._process.tail()}"
        )

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """etcd stopped (SIGSTOP) inside the block: whatever stores in it hangs."""
        pid = self._process.pid
        os.kill(pid, signal.SIGSTOP)
        # kill() returns before every thread of etcd has stopped, and one still running
        # answered a request sent at once (seen under load). The parent is told when the
        # whole process has stopped: wait for that event (a stopped child is not reaped).
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise ControlPlaneError(f"etcd (pid {pid}) ended instead of pausing: status {status}")
        try:
            yield
        finally:
            os.kill(self._process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self._process.stop()


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager and kube-scheduler on demand) under
    ``workdir``."""

    def __init__(self, assets: Path, workdir: Path) -> None:
        self.assets = assets
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.pki = Pki.create(workdir / "pki")
        self.etcd = Etcd(assets / "etcd", workdir)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.audit_path = workdir / "audit.log"
        (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY), "utf-8")
        self.admin = AdminClient(self.url, self.pki)
        self.audit = AuditLog(self.audit_path, self.admin)
        self.admin_kubeconfig = self._write_admin_kubeconfig()
        self._apiserver = _Process(
            "kube-apiserver", self._apiserver_argv(), workdir / "kube-apiserver.log"
        )
        self._controller_manager: _Process | None = None
        self._scheduler: _Process | None = None
        self.version = ""

    def _apiserver_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers={self.etcd.url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--tls-cert-file={p.serving_cert}",
            f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_cert}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            # As kubeadm and the common distributions start it: without it every privileged
            # container is refused (the chart's kernel-log variant runs one).
            "--allow-privileged=true",
            f"--audit-log-path={self.audit_path}",
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
            "--profiling=false",
            "--v=1",
        ]

    def _write_admin_kubeconfig(self) -> Path:
        path = self.workdir / "admin.kubeconfig"
        write_kubeconfig(
            path,
            self.url,
            self.pki.ca_cert,
            user={
                "client-certificate": str(self.pki.admin_cert),
                "client-key": str(self.pki.admin_key),
            },
        )
        return path

    def start(self) -> None:
        self.etcd.start()
        self.start_apiserver()
        self.version = self.admin.get("/version")["gitVersion"]

    def start_apiserver(self) -> None:
        self._apiserver.start()
        try:
            self.admin.wait_ready(START_SECONDS, self._apiserver.popen)
        except ControlPlaneError as exc:
            raise ControlPlaneError(f"kube-apiserver: {exc}\n{self._apiserver.tail()}") from exc

    def request_with_token(
        self, token: str, method: str, path: str, body: Any = None, *, content_type: str
    ) -> tuple[int, Any]:
        """One request as the holder of ``token``; returns any status with the body."""
        client = AdminClient(self.url, self.pki, token=token)
        return client.request(
            method, path, body, content_type=content_type, ok=tuple(range(300, 600))
        )

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (a crash, not a shutdown)."""
        self._apiserver.stop(signal.SIGKILL)

    def etcd_paused(self) -> contextlib.AbstractContextManager[None]:
        """etcd stopped (SIGSTOP) inside the block: the API server's storage hangs."""
        return self.etcd.paused()

    def start_controller_manager(self) -> None:
        """kube-controller-manager with the garbage collector (idempotent)."""
        if self._controller_manager is not None and self._controller_manager.running():
            return
        self._controller_manager = _Process(
            "kube-controller-manager",
            [
                str(self.assets / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--controllers=garbagecollector,validatingadmissionpolicy-status-controller",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--use-service-account-credentials=false",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
            self.workdir / "kube-controller-manager.log",
        )
        self._controller_manager.start()
        time.sleep(0.5)
        if not self._controller_manager.running():
            raise ControlPlaneError(
                f"kube-controller-manager exited:\n{self._controller_manager.tail()}"
            )

    @property
    def scheduler_log(self) -> Path:
        """kube-scheduler's log (written from :meth:`start_scheduler` on)."""
        return self.workdir / "kube-scheduler.log"

    def start_scheduler(self, verbosity: int = 1) -> None:
        """kube-scheduler with its default profile (idempotent). ``verbosity`` is its
        ``--v``: from 4 on it logs every Node and Pod event it takes into its cache, which
        is how a test knows the scheduler has seen a change."""
        if self._scheduler is not None and self._scheduler.running():
            return
        self._scheduler = _Process(
            "kube-scheduler",
            [
                str(self.assets / "kube-scheduler"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--authentication-skip-lookup=true",
                "--leader-elect=false",
                # No serving endpoint (health, metrics): nothing here asks it.
                "--secure-port=0",
                f"--v={verbosity}",
            ],
            self.scheduler_log,
        )
        self._scheduler.start()
        time.sleep(0.5)
        if not self._scheduler.running():
            raise ControlPlaneError(f"kube-scheduler exited:\n{self._scheduler.tail()}")

    def stop(self) -> None:
        """Stop what this object started, newest first."""
        for process in (
            self._scheduler,
            self._controller_manager,
            self._apiserver,
            self.etcd.process,
        ):
            if process is not None:
                process.stop()

    def describe_failure(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.tail()}"
            for p in (self.etcd.process, self._apiserver, self._controller_manager, self._scheduler)
            if p is not None
        )


def write_kubeconfig(path: Path, server: str, ca: Path, *, user: Mapping[str, str]) -> Path:
    """A kubeconfig for ``server`` with one user (a token, or a client certificate)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "test", "user": dict(user)}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path
