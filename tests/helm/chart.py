"""The Helm chart deploy/helm/gfd driven by Helm v4's own engine (PyPI ``helm-python-sdk``).

Shared by tests/helm (lint, render, values schema, equivalence with deploy/) and the
real-server cases in tests/realkube/test_helm.py. This module owns the one way the tests
reach Helm: :func:`engine` (the ``helm_python`` module, or a skip, or in CI a failure),
:class:`Helm` (lint, render, schema checks of the chart, as ``helm lint --strict`` and
``helm template`` would do them) and the values matrix every rendering test runs over.

``helm-python-sdk`` binds ``libhelm_c``, a C ABI over Helm's official Go SDK (the package's
wheel bundles it), so the templates, the values coalescing (nulls included) and the JSON
schema validation are Helm's own code, not a re-implementation. It is pinned in
``requirements/ci.lock``: CI always has it.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest
import yaml

from tests.deploy.manifests import DEPLOY_DIR, REPO_ROOT, render_directory
from tests.oracles import oracles_required

CHART_DIR = REPO_ROOT / "deploy" / "helm" / "gfd"

Manifest = dict[str, Any]
Values = Mapping[str, Any]

#: Labels the chart adds to what deploy/ renders: Helm's release bookkeeping.
HELM_ONLY_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)

#: Values of every configuration that deploy/ has an overlay for (same name), and
#: that docs/deploy.md documents: the chart must render the same objects as the overlay.
OVERLAY_VALUES: dict[str, Values] = {
    "standalone": {},
    "nfd": {"sinks": {"node": {"enabled": False}, "featureFile": {"enabled": True}}},
    "node-feature-api": {"sinks": {"node": {"enabled": False}, "nodeFeature": {"enabled": True}}},
    "vgpu": {"vgpu": {"enabled": True}},
    "dra": {"labelMode": "auto"},
}

#: Values of configurations that deploy/ reaches with a component added to an overlay
#: (as docs/deploy.md and the component's header say): name -> (overlay, components,
#: values). The chart must render the same objects as that overlay with those components.
COMPONENT_VALUES: dict[str, tuple[str, tuple[str, ...], Values]] = {
    "health-taint": ("standalone", ("health-taint",), {"healthTaint": {"enabled": True}}),
    "kernel-log": ("standalone", ("kernel-log",), {"health": {"kernelLog": {"enabled": True}}}),
    "grafana-dashboard": (
        "standalone",
        ("grafana-dashboard",),
        {"metrics": {"grafanaDashboard": {"enabled": True}}},
    ),
    "prometheus-rule": (
        "standalone",
        ("prometheus-rule",),
        {"metrics": {"prometheusRule": {"enabled": True}}},
    ),
}

SHARING_CONFIG = """\
version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""

#: The matrix of values that every test of rendered output runs over.
MATRIX: dict[str, Values] = {
    **OVERLAY_VALUES,
    "mig-none": {"migStrategy": "none"},
    "mig-single": {"migStrategy": "single"},
    "mig-mixed": {"migStrategy": "mixed"},
    "label-mode-hardware": {"labelMode": "hardware"},
    "sharing-config-map": {"config": {"map": {"time-slicing": SHARING_CONFIG}}},
    "external-config-map": {"config": {"name": "my-gfd-configs", "default": "h100"}},
    "scheduling": {
        "nodeSelector": {"gpu-pool": "training"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
        ],
        "priorityClassName": None,
        "runtimeClassName": "nvidia",
        "imagePullSecrets": [{"name": "registry-login"}],
        "podAnnotations": {"example.com/team": "ml"},
    },
    "all-sinks": {
        "sinks": {
            "node": {"enabled": True, "timestampAnnotation": True},
            "featureFile": {"enabled": True},
            "nodeFeature": {"enabled": True},
        },
        "gfd": {
            "noTimestamp": False,
            "sleepInterval": "infinite",
            "logLevel": "debug",
            "logFormat": "text",
        },
        "failOnInitError": False,
    },
    "no-admission-policies": {"admissionPolicies": {"enabled": False}},
    "health-off": {"health": {"condition": False}},
    "health-tuned": {"health": {"label": True, "gracePeriod": "90s"}},
    "health-checks-and-xids": {
        "health": {
            "checks": ["gpu-lost", "fabric", "nvlink", "xid"],
            "resourceSliceInterval": 1000000,
            "eventHold": "24h",
            "xids": {
                "ignored": [13, 31, 43, 45, 68, 109, 61, 62],
                "fatal": [],
                "threshold": ["13,31,43:10/5m", "ignored:100/1h"],
            },
        }
    },
    "health-none": {"health": {"checks": [], "xids": {"ignored": []}}},
    "health-fatal-xids": {"health": {"xids": {"fatal": [48, 79], "threshold": ["13:5/1m"]}}},
    **{name: values for name, (_, _, values) in COMPONENT_VALUES.items()},
    "health-taint-no-execute": {"healthTaint": {"enabled": True, "effect": "NoExecute"}},
    "on-delete": {"updateStrategy": {"type": "OnDelete"}},
    "no-metrics": {"metrics": {"enabled": False}},
    "prometheus-rule-labelled": {
        "metrics": {
            "prometheusRule": {
                "enabled": True,
                "labels": {"release": "prometheus"},
                "additionalLabels": {"team": "gpu", "severity": "page"},
                "runbookBaseURL": "https://docs.example/gfd/",
            }
        }
    },
    "service-monitor": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}
    },
    "grafana-dashboard-placed": {
        "metrics": {
            "grafanaDashboard": {
                "enabled": True,
                "namespace": "monitoring",
                "labels": {"grafana_dashboard": "gpu", "team": "ml-platform"},
                "annotations": {"grafana_folder": "GPUs"},
            }
        }
    },
}

#: Kinds that are custom resources of other projects: no built-in schema, no CRD on the server.
FOREIGN_KINDS = ("ServiceMonitor", "PrometheusRule")

#: ``helm lint`` severities (Helm's support.Severity): INFO is advice ("icon is
#: recommended"); ``--strict`` fails on WARNING and ERROR, and so do these tests.
LINT_WARNING = 2

DEFAULT_RELEASE = "gfd"
DEFAULT_NAMESPACE = "gpu-feature-discovery"


class HelmError(AssertionError):
    """Helm refused where it should have accepted; the message carries Helm's."""


def engine() -> ModuleType:
    """The ``helm_python`` module with its native library loaded.

    It comes from requirements/ci.lock, so in CI (``GFD_REQUIRE_ORACLES=1``) its absence
    fails the calling test: CI must never pass by skipping the chart's checks. Elsewhere
    (a checkout without the lock installed) the test skips with the reason.
    """
    sdk, reason = _engine_or_reason()
    if sdk is None:
        _missing(reason)
    return sdk


@functools.cache
def _engine_or_reason() -> tuple[ModuleType | None, str]:
    try:
        import helm_python
    except ImportError as exc:
        return (
            None,
            f"helm-python-sdk is not installed ({exc}): pip install -r requirements/ci.lock",
        )
    try:
        # The native library loads on first use; a wheel for another platform fails here.
        helm_python.helm_sdk_version()
    except (OSError, helm_python.HelmError) as exc:
        return None, f"helm-python-sdk's libhelm_c did not load: {exc}"
    return helm_python, ""


def helm_engine_loaded() -> bool:
    """Load Helm's native library now, if it is installed (see tests/realkube/conftest.py)."""
    sdk, _ = _engine_or_reason()
    return sdk is not None


def _missing(reason: str) -> NoReturn:
    message = f"Helm v4 engine (PyPI helm-python-sdk) missing: {reason}"
    if oracles_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def split_documents(rendered: Mapping[str, str]) -> list[Manifest]:
    """The objects of a render (template path -> text), as ``helm template`` prints them.

    Only ``.yaml``/``.yml`` templates hold objects; NOTES.txt is the install's message and
    partials (``_helpers.tpl``) render to nothing. Empty documents (a template whose
    ``if`` is false) are dropped, as Helm drops them.
    """
    objects: list[Manifest] = []
    for path in sorted(rendered):
        if not path.endswith((".yaml", ".yml")):
            continue
        objects += [doc for doc in yaml.safe_load_all(rendered[path]) if doc is not None]
    return objects


@dataclass(frozen=True)
class Helm:
    """The chart in deploy/helm/gfd, loaded once by Helm's engine."""

    sdk: ModuleType
    chart: Any  # helm_python.Chart; Any because the module is imported lazily

    def lint(self, values: Values | None = None) -> list[str]:
        """What ``helm lint --strict`` would fail on: its warnings and errors.

        Lint renders every template with ``values``, so a template that fails in a branch
        those values reach (a nil map, a ``fail``, output that is not YAML) is an error.
        A misspelt leaf value (``.Values.sinks.node.nope``) is not: Helm v4 renders it
        empty even in strict mode (tried), and only the comparisons of what is rendered
        (with deploy/, and the assertions on arguments) catch it.
        """
        report = self.sdk.lint(CHART_DIR, _plain(values), strict=True)
        assert report["total_charts_linted"] == 1, report
        problems = [
            f"{m['path']}: {m['error'].strip()}"
            for m in report["messages"]
            if m["severity"] >= LINT_WARNING
        ]
        return problems + [e.strip() for e in report["errors"] if e.strip() not in problems]

    def render(
        self,
        values: Values | None,
        *,
        release: str = DEFAULT_RELEASE,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> dict[str, str]:
        """Template path -> rendered text, for a first install (as ``helm template``)."""
        rendered: dict[str, str] = self.chart.render(
            _plain(values), name=release, namespace=namespace, revision=1, is_install=True
        )
        return rendered

    def template(
        self,
        values: Values,
        *,
        release: str = DEFAULT_RELEASE,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> list[Manifest]:
        """The chart's objects for ``values`` (a fresh copy each call)."""
        return [
            copy.deepcopy(doc)
            for doc in _template_cached(
                self, json.dumps(values, sort_keys=True), release, namespace
            )
        ]

    def notes(self, values: Values, **names: str) -> str:
        """NOTES.txt as an install would print it."""
        return self.render(values, **names).get(f"{self.chart.name}/templates/NOTES.txt", "")

    def refusal(self, values: Values, **names: str) -> str:
        """Helm's message refusing to render ``values``; fails the test if it renders."""
        try:
            self.render(values, **names)
        except self.sdk.HelmError as exc:
            return str(exc)
        raise HelmError(f"Helm rendered {dict(values)!r}, which it should have refused")

    def schema_refusal(self, values: Values) -> str | None:
        """The values schema's message refusing ``values`` (merged over the defaults, as an
        install merges them), or None when it accepts them."""
        try:
            self.chart.validate_schema(_plain(values))
        except self.sdk.HelmValuesError as exc:
            return str(exc)
        return None


@functools.cache
def _template_cached(helm: Helm, values: str, release: str, namespace: str) -> tuple[Manifest, ...]:
    try:
        rendered = helm.render(json.loads(values), release=release, namespace=namespace)
    except helm.sdk.HelmError as exc:
        raise HelmError(f"Helm refused to render {values}:\n{exc}") from exc
    return tuple(split_documents(rendered))


def _plain(values: Values | None) -> dict[str, Any] | None:
    # The SDK sends values as JSON; a Mapping that is not a dict would not serialise.
    return None if values is None else json.loads(json.dumps(values))


@functools.cache
def load_chart() -> Helm:
    """The chart, loaded by Helm's engine once per session (skip or fail without it)."""
    sdk = engine()
    return Helm(sdk, sdk.Chart.load(CHART_DIR))


def strip_helm_labels(obj: Manifest) -> Manifest:
    """``obj`` without :data:`HELM_ONLY_LABELS` wherever labels or selectors hold them."""
    obj = copy.deepcopy(obj)

    def strip(labels: dict[str, str] | None) -> None:
        for key in HELM_ONLY_LABELS:
            (labels or {}).pop(key, None)

    strip(obj["metadata"].get("labels"))
    spec = obj.get("spec") or {}
    if isinstance(spec.get("selector"), dict):
        strip(spec["selector"].get("matchLabels"))
    if isinstance(spec.get("template"), dict):
        strip(spec["template"]["metadata"].get("labels"))
    return obj


def is_hook(obj: Manifest) -> bool:
    """A Helm hook: run at a stage of the release (the uninstall's cleanup), not kept with it."""
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


def identity(obj: Manifest) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def by_identity(objects: Sequence[Manifest]) -> dict[tuple[str, str | None, str], Manifest]:
    found = {identity(obj): obj for obj in objects}
    assert len(found) == len(objects), f"duplicate objects: {[identity(o) for o in objects]}"
    return found


def render_with_components(
    tmp_path: Path, overlay: str, components: Sequence[str]
) -> list[Manifest]:
    """``kubectl kustomize`` of a user's overlay: deploy/'s ``overlay`` as its resource,
    plus deploy/'s ``components``. kustomize takes neither absolute paths nor paths out
    of the tree, so the overlay is written into a copy of deploy/ under ``tmp_path``."""
    copied = tmp_path / "deploy"
    shutil.copytree(DEPLOY_DIR, copied)
    directory = copied / "overlays" / "with-components"
    directory.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"../{overlay}"],
        "components": [f"../../components/{name}" for name in components],
    }
    (directory / "kustomization.yaml").write_text(json.dumps(kustomization), encoding="utf-8")
    return render_directory(directory)
