"""The Helm chart deploy/helm/gfd driven by the real Helm CLI (the ``helm`` oracle).

Shared by tests/helm (lint, template, schema, equivalence with deploy/) and the real-server
cases in tests/realkube/test_helm.py. Helm keeps its configuration and cache under
``$HOME``: every call here points ``HELM_CONFIG_HOME``, ``HELM_CACHE_HOME`` and
``HELM_DATA_HOME`` at a private directory instead.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.manifests import REPO_ROOT
from tests.oracles import oracle_path

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
        "gfd": {"noTimestamp": False, "sleepInterval": "infinite", "logLevel": "debug"},
        "failOnInitError": False,
    },
    "no-admission-policies": {"admissionPolicies": {"enabled": False}},
    "health-off": {"health": {"condition": False}},
    "health-tuned": {"health": {"label": True, "gracePeriod": "90s"}},
    "on-delete": {"updateStrategy": {"type": "OnDelete"}},
    "no-metrics": {"metrics": {"enabled": False}},
    "service-monitor": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}
    },
}

#: Kinds that are custom resources of other projects: no built-in schema, no CRD on the server.
FOREIGN_KINDS = ("ServiceMonitor",)


class HelmError(AssertionError):
    """Helm exited non-zero; the message carries its stderr."""


@dataclass(frozen=True)
class Helm:
    """The Helm CLI with a private home, optionally pointed at a cluster."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "PATH": "/usr/bin:/bin",
            **({"KUBECONFIG": str(self.kubeconfig)} if self.kubeconfig else {}),
        }

    def run(
        self, *args: str, values: Values | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``helm ARGS`` (plus ``--values`` of ``values``); never raises on a failure."""
        argv = [str(self.binary), *args]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=self.home) as handle:
            if values is not None:
                yaml.safe_dump(dict(values), handle)
                handle.flush()
                argv += ["--values", handle.name]
            return subprocess.run(
                argv, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
            )

    def check(self, *args: str, values: Values | None = None) -> str:
        """``helm ARGS``; its stdout, or a failed test with its stderr."""
        done = self.run(*args, values=values)
        if done.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def template(
        self, values: Values, *, release: str = "gfd", namespace: str = "gpu-feature-discovery"
    ) -> list[Manifest]:
        """The chart's objects for ``values``, as ``helm template`` renders them."""
        return [
            copy.deepcopy(doc)
            for doc in _template_cached(
                self, json.dumps(values, sort_keys=True), release, namespace
            )
        ]


@functools.cache
def _template_cached(helm: Helm, values: str, release: str, namespace: str) -> tuple[Manifest, ...]:
    out = helm.check(
        "template", release, str(CHART_DIR), "--namespace", namespace, values=json.loads(values)
    )
    return tuple(doc for doc in yaml.safe_load_all(out) if doc is not None)


def make_helm(home: Path, kubeconfig: Path | None = None) -> Helm:
    """Helm from the oracle (skip, or in CI fail, without it) with ``home`` as its home."""
    home.mkdir(parents=True, exist_ok=True)
    return Helm(oracle_path("helm"), home, kubeconfig)


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


def identity(obj: Manifest) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def by_identity(objects: Sequence[Manifest]) -> dict[tuple[str, str | None, str], Manifest]:
    found = {identity(obj): obj for obj in objects}
    assert len(found) == len(objects), f"duplicate objects: {[identity(o) for o in objects]}"
    return found
