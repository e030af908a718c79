"""Where gfd's credentials for the API server come from, and how they are read again.

This module owns loading them: a kubeconfig file (read with bounds and checked before the
client's loader sees it, and refused at start-up when its server is no URL or its
certificate authority no certificate), or the pod's service account, whose projected token
the kubelet rotates under a running pod (:class:`RotatingTokenFile`: read again whenever
the file changes) and whose CA bundle it fills and rotates too (:class:`ServiceAccountCA`:
judged again whenever the file changes; a pod that starts before it is filled waits for
it instead of failing). Each source can be read again in full (:attr:`Credentials.reload`),
which the client does once after a 401. Every problem at start-up is a
:class:`~gfd.base.errors.ConfigError` naming the file. A kubeconfig with
``insecure-skip-tls-verify`` is said once per process, in gfd's log, naming the file and
the cluster's CA to set instead; urllib3's own warning at every request is silenced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gfd.base.errors import ConfigError, echo, shorten
from gfd.base.inputs import (
    KUBECONFIG_LIMIT,
    TOKEN_FILE_LIMIT,
    InputRejected,
    check_yaml,
    read_bounded_text,
)
from gfd.base.logs import get_logger
from gfd.config.host import NODE_PATHS

log = get_logger()

SERVICE_ACCOUNT_DIR = NODE_PATHS.service_account_dir
IN_CLUSTER_TOKEN_PATH = f"{SERVICE_ACCOUNT_DIR}/token"
IN_CLUSTER_CA_PATH = f"{SERVICE_ACCOUNT_DIR}/ca.crt"


class Credentials:
    """Where the bearer token comes from, how to read it again after a 401, and (in a pod)
    the CA bundle file the server is trusted by."""

    def __init__(
        self,
        *,
        describe: str,
        reload: Callable[[Any], None],
        refresh_hook: Callable[[Any], None] | None = None,
        ca: ServiceAccountCA | None = None,
    ) -> None:
        self.describe = describe
        self.reload = reload
        self.refresh_hook = refresh_hook
        #: The service account's CA file, watched for changes; None: a kubeconfig's CA,
        #: read again with the rest of the kubeconfig after a 401.
        self.ca = ca
        #: Why the server's certificate is not verified (a kubeconfig's
        #: ``insecure-skip-tls-verify``), in words with what to set instead; None: verified.
        self.unverified: str | None = None


#: What a kubeconfig sets instead of ``insecure-skip-tls-verify``.
TRUST_THE_CLUSTER_CA = (
    "set the cluster's certificate-authority (a PEM file) or certificate-authority-data "
    "(the PEM, base64) in the kubeconfig instead of insecure-skip-tls-verify"
)

#: The kubeconfigs already warned about: once each per process, whatever reads them
#: again (a 401, a reload, the doctor's own client).
_WARNED_INSECURE: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _warn_unverified(kubeconfig: str) -> None:
    """Say once per process, through gfd's log, that ``kubeconfig`` skips TLS verification,
    and silence urllib3's warning of it at every request.

    The filter is scoped to urllib3's ``InsecureRequestWarning`` (no other warning of any
    library is touched) and is installed only once a kubeconfig asked for no verification:
    a verified connection never raises it.
    """
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    with _WARNED_LOCK:
        if kubeconfig in _WARNED_INSECURE:
            return
        _WARNED_INSECURE.add(kubeconfig)
        warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    log.warning(
        "kubeconfig skips TLS verification of the API server",
        kubeconfig=kubeconfig,
        fix=TRUST_THE_CLUSTER_CA,
    )


class ServiceAccountCA:
    """The service account's CA bundle, a file the kubelet fills and rotates under a
    running pod (a pod may even start while its projected ``ca.crt`` is still empty).

    :meth:`check` looks at the file's identity (inode, size, mtime: one ``stat``) and reads
    and judges its content again when that changed. :attr:`problem` says in words why the
    bundle cannot be trusted yet (missing, unreadable, empty, no PEM certificate), or is
    None when it holds a certificate. The client checks it at most every few seconds, at
    every attempt while it has a problem, and after a TLS failure
    (:meth:`gfd.kube_api.client.KubeClient.request`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int, int] | None = None
        self.problem: str | None = None
        self.check()

    def check(self) -> bool:
        """Look at the file again; whether it changed since the last look."""
        try:
            stat = self.path.stat()
        except OSError as exc:
            changed = self._signature is not None or self.problem is None
            self._signature = None
            self.problem = (
                f"service account CA certificate {self.path}: cannot read: {exc.strerror or exc}"
            )
            return changed
        signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if signature == self._signature:
            return False
        self._signature = signature
        self.problem = self._judge()
        return True

    def _judge(self) -> str | None:
        import ssl

        where = f"service account CA certificate {self.path}"
        try:
            # A CA bundle is a few certificates; the kubeconfig's bound is ample.
            text = read_bounded_text(self.path, KUBECONFIG_LIMIT)
        except OSError as exc:
            return f"{where}: cannot read: {exc.strerror or exc}"
        except (InputRejected, UnicodeDecodeError) as exc:
            return f"{where}: {'not UTF-8 text' if isinstance(exc, UnicodeDecodeError) else exc}"
        if not text.strip():
            return f"{where}: the file is empty (the kubelet has not filled it yet)"
        try:
            ssl.create_default_context(cadata=text)
        except (ssl.SSLError, ValueError) as exc:
            return f"{where}: holds no usable PEM certificate ({shorten(str(exc), 120)})"
        return None


class RotatingTokenFile:
    """A service-account token file that the kubelet replaces while the pod runs.

    The token is read again whenever the file's identity (inode, size, mtime) changes,
    which costs one ``stat`` per request, and unconditionally after a 401.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int, int] | None = None
        self.token = ""
        self.read(force=True)

    def read(self, *, force: bool) -> None:
        try:
            stat = self.path.stat()
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if not force and signature == self._signature:
                return
            token = read_bounded_text(self.path, TOKEN_FILE_LIMIT).strip()
        except OSError as exc:
            raise ConfigError(
                f"service account token {self.path}: cannot read: {exc.strerror or exc}"
            ) from exc
        except (InputRejected, UnicodeDecodeError) as exc:
            problem = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise ConfigError(f"service account token {self.path}: {problem}") from exc
        if not token:
            raise ConfigError(f"service account token {self.path}: file is empty")
        self.token = token
        self._signature = signature

    def apply(self, configuration: Any) -> None:
        configuration.api_key["authorization"] = self.token
        configuration.api_key_prefix["authorization"] = "Bearer"


def kubeconfig_credentials(kubeconfig: str, context: str | None) -> Credentials:
    """Credentials from the kubeconfig file ``kubeconfig`` (``context``, or its current one)."""
    from kubernetes import config as k8s_config

    # The client's kubeconfig loader carries no type hints.
    load_kube_config: Callable[..., None] = k8s_config.load_kube_config

    def reload(configuration: Any) -> None:
        import yaml

        try:
            # Bounded and checked here: the client's loader reads the whole file and
            # builds any YAML it is given.
            text = read_bounded_text(kubeconfig, KUBECONFIG_LIMIT)
            check_yaml(text)
            document = yaml.safe_load(text)
        except OSError as exc:
            raise ConfigError(
                f"kubeconfig {kubeconfig}: cannot read: {exc.strerror or exc}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: not UTF-8 text") from exc
        except InputRejected as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: {exc}") from exc
        except (yaml.YAMLError, RecursionError) as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: not valid YAML") from exc
        if not isinstance(document, dict):
            raise ConfigError(
                f"kubeconfig {kubeconfig}: expected a kubeconfig mapping "
                "(apiVersion, clusters, users, contexts), got "
                f"{'nothing' if document is None else type(document).__name__}"
            )
        try:
            load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (k8s_config.ConfigException, OSError, ValueError) as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: {shorten(str(exc))}") from exc
        except Exception as exc:
            # The client's loader assumes a well-formed file: any other exception is a
            # malformed one (a list where a mapping belongs, a missing field).
            raise ConfigError(
                f"kubeconfig {kubeconfig}: malformed ({type(exc).__name__}: {shorten(str(exc), 120)})"
            ) from exc
        problem = _connection_problem(configuration)
        if problem is not None:
            raise ConfigError(f"kubeconfig {kubeconfig}: {problem}")
        if configuration.verify_ssl or not str(configuration.host).startswith("https:"):
            credentials.unverified = None
        else:
            credentials.unverified = (
                f"kubeconfig {kubeconfig} sets insecure-skip-tls-verify: the API server's "
                "certificate is not verified"
            )
            _warn_unverified(kubeconfig)

    credentials = Credentials(describe=f"kubeconfig {kubeconfig}", reload=reload)
    return credentials


def _connection_problem(configuration: Any) -> str | None:
    """What makes a loaded kubeconfig unusable before any request, or None.

    The client's loader accepts a server that is no URL and certificate data that
    is no certificate; every request would then fail and be retried until the
    deadline. Both are configuration errors, said once, at start-up.
    """
    import ssl
    from urllib.parse import urlsplit

    host = str(configuration.host or "")
    try:
        split = urlsplit(host)
        port = split.port
    except ValueError:
        split, port = None, None
    if split is None or split.scheme not in ("http", "https") or not split.hostname:
        return f"server {echo(host)} is not an http(s) URL with a host"
    del port
    ca = configuration.ssl_ca_cert
    if ca:
        try:
            ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, OSError, ValueError) as exc:
            return f"the cluster's certificate authority is not a usable PEM certificate ({shorten(str(exc), 120)})"
    return None


def in_cluster_credentials(
    configuration: Any, env: Mapping[str, str], token_path: Path, ca_path: Path
) -> Credentials:
    """Credentials of the pod's service account: the API server from ``env``, the CA and
    the rotating token from their files; refused outside a cluster."""
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are "
            "unset) and no kubeconfig given: pass --kubeconfig or set KUBECONFIG"
        )
    if not ca_path.is_file():
        raise ConfigError(f"service account CA certificate {ca_path}: file not found")
    token = RotatingTokenFile(token_path)
    configuration.host = f"https://{f'[{host}]' if ':' in host else host}:{port}"
    configuration.ssl_ca_cert = str(ca_path)

    def reload(config: Any) -> None:
        token.read(force=True)
        token.apply(config)

    def refresh(config: Any) -> None:
        try:
            token.read(force=False)
        except ConfigError as exc:
            # Mid-rotation hiccup: keep the token we have; a 401 forces a re-read.
            log.warning("service account token unreadable", problem=str(exc))
        token.apply(config)

    return Credentials(
        describe=f"service account token {token_path}",
        reload=reload,
        refresh_hook=refresh,
        ca=ServiceAccountCA(ca_path),
    )
