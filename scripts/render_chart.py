"""Render gfd's Helm chart (deploy/helm/gfd) to plain manifests, with no helm binary.

``make chart`` runs this: ``make chart VALUES=my-values.yaml > gfd.yaml``, then
``kubectl apply -f gfd.yaml``. The chart is rendered by Helm v4's own engine, bound by the
PyPI package ``helm-python-sdk`` (pinned in requirements/ci.lock), as ``helm template
--no-hooks`` renders it for a first install: the values schema checked, values files
merged as Helm merges ``-f`` files (maps key by key, the later file winning; a null
removes a default), ``--set`` on top, and the objects printed in Helm's install order by
kind, each headed ``# Source: <template>``.

Helm hooks (the chart's pre-delete cleanup) are left out: applied by kubectl they would
run at once instead of at uninstall. docs/deploy.md says how to clean up a node by hand.

    python scripts/render_chart.py [--values FILE]... [--set KEY=VALUE]...
        [--release NAME] [--namespace NAMESPACE] > gfd.yaml

Exit status: 0 rendered; 2 bad values (one line on stderr, Helm's own words where Helm
refused); 1 the chart failed to render.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

CHART_DIR = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "gfd"
#: Helm's install order by kind (helm.sh/helm/v4 pkg/release/util, InstallOrder); other
#: kinds come after these, by name, as Helm sorts them.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
)  # fmt: skip
HOOK_ANNOTATION = "helm.sh/hook"
EXIT_RENDER_FAILED = 1
EXIT_BAD_VALUES = 2


class BadValues(Exception):
    """The values cannot be used; the message is the one line to print."""


def merge_values(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base`` as Helm merges ``-f`` files: maps key by key, anything
    else replaced (a null included, which the chart's defaults then lose)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def read_values(files: Sequence[str], settings: Sequence[str], sdk: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in files:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise BadValues(f"values file {name}: cannot read: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise BadValues(f"values file {name}: not UTF-8 text") from exc
        try:
            document = sdk.values_from_yaml(text)
        except sdk.HelmValuesError as exc:
            raise BadValues(f"values file {name}: {one_line(str(exc))}") from exc
        values = merge_values(values, document or {})
    for expression in settings:
        try:
            values = merge_values(values, sdk.parse_set_string(expression))
        except sdk.HelmValuesError as exc:
            raise BadValues(f"--set {expression}: {one_line(str(exc))}") from exc
    return values


def one_line(message: str) -> str:
    """Helm's message (a heading, then its problems as a list) on one line."""
    joined = ""
    for part in (line.strip(" -") for line in message.splitlines()):
        if part:
            separator = " " if not joined or joined.endswith(":") else "; "
            joined = f"{joined}{separator}{part}" if joined else part
    return joined


def documents(rendered: Mapping[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(template, text, object)`` of every object of a render, hooks left out, in Helm's
    install order (templates by path within a kind, documents in file order)."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    for template in sorted(rendered):
        if not template.endswith((".yaml", ".yml")):
            continue  # NOTES.txt is the install's message; partials render to nothing
        for text in re.split(r"^---[^\n]*\n", rendered[template], flags=re.MULTILINE):
            obj = yaml.safe_load(text)
            if not isinstance(obj, dict):
                continue
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if HOOK_ANNOTATION in annotations:
                continue
            found.append((template, text.strip("\n"), obj))

    def rank(entry: tuple[str, str, dict[str, Any]]) -> tuple[int, str]:
        kind = str(entry[2].get("kind", ""))
        if kind in INSTALL_ORDER:
            return INSTALL_ORDER.index(kind), ""
        return len(INSTALL_ORDER), kind

    return sorted(found, key=rank)


def render(values: dict[str, Any], release: str, namespace: str, sdk: Any) -> str:
    chart = sdk.Chart.load(CHART_DIR)
    try:
        rendered = chart.render(
            values, name=release, namespace=namespace, revision=1, is_install=True
        )
    except sdk.HelmValuesError as exc:
        raise BadValues(f"values refused by the chart's schema: {one_line(str(exc))}") from exc
    return "".join(
        f"---\n# Source: {template}\n{text}\n" for template, text, _ in documents(rendered)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="render_chart.py", description=__doc__.split("\n\n", 1)[0], allow_abbrev=False
    )
    parser.add_argument("--values", "-f", action="append", default=[], metavar="FILE")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--release", default="gfd", metavar="NAME")
    parser.add_argument("--namespace", default="gpu-feature-discovery")
    arguments = parser.parse_args(argv)
    try:
        import helm_python as sdk
    except ImportError as exc:
        print(
            f"render_chart: helm-python-sdk is not installed ({exc}); run make chart, which "
            "installs requirements/ci.lock",
            file=sys.stderr,
        )
        return EXIT_RENDER_FAILED
    try:
        sdk.validate_release_name(arguments.release)
        values = read_values(arguments.values, arguments.set, sdk)
        manifests = render(values, arguments.release, arguments.namespace, sdk)
    except BadValues as exc:
        print(f"render_chart: {exc}", file=sys.stderr)
        return EXIT_BAD_VALUES
    except sdk.HelmInvalidArgError as exc:
        print(f"render_chart: --release {arguments.release}: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_VALUES
    except sdk.HelmError as exc:
        print(f"render_chart: the chart did not render: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_RENDER_FAILED
    sys.stdout.write(manifests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
