"""Reading what ``gfd explain``, ``select`` and ``fleet`` judge: a manifest or a saved
``List`` (bounded, YAML or JSON, one line naming the file on any problem), and the API
client of ``--kubeconfig`` (or the pod's service account)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gfd.base.errors import ConfigError
from gfd.base.inputs import CLUSTER_FILE_LIMIT, InputRejected, check_yaml, read_bounded_text

if TYPE_CHECKING:
    from gfd.config import Settings
    from gfd.kube_api import KubeClient


def read_text(path: str, limit: int, what: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read(limit + 1)[:limit]
        return read_bounded_text(path, limit)
    except InputRejected as exc:
        raise ConfigError(f"{what} {path}: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None


def documents(text: str, source: str) -> list[Any]:
    import yaml

    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: not valid JSON: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{source}: nested too deeply") from None
        return document if isinstance(document, list) else [document]
    try:
        check_yaml(text)
    except InputRejected as exc:
        raise ConfigError(f"{source}: {exc}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: not valid YAML{where}: {problem}") from None


def read_list_file(path: str) -> Any:
    """The one document of a saved cluster (``kubectl get nodes,pods -A -o json > FILE``)."""
    found = documents(read_text(path, CLUSTER_FILE_LIMIT, "cluster file"), path)
    if len(found) != 1:
        raise ConfigError(
            f"{path}: {len(found)} documents; a cluster file is one List "
            "(kubectl get nodes,pods -A -o json > FILE)"
        )
    return found[0]


@contextmanager
def api_client(settings: Settings) -> Iterator[KubeClient]:
    """The API server of ``--kubeconfig`` (or the pod's service account)."""
    from gfd.kube_api import connect_kubernetes

    client = connect_kubernetes(
        kubeconfig=settings.kubeconfig,
        in_cluster_token_path=settings.host.token_file,
        in_cluster_ca_path=settings.host.ca_file,
    )
    try:
        yield client
    finally:
        client.close()
