"""The chart's admission policies, written from deploy/'s: ``python -m tests.helm.chart_policies``.

The policies are the security boundary of the Kubernetes sinks, and their CEL is long: the
chart's copies are not edited by hand but made from ``deploy/components/*/*-policy.yaml``
by this module, which only puts Helm's names in (the objects' names, the release's labels,
the ServiceAccount's user name). After a change to a policy in deploy/, run it and commit
both; a test fails while the chart's copies differ from what it would write.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.manifests import DEPLOY_DIR, NAMESPACE
from tests.helm.chart import CHART_DIR


@dataclass(frozen=True)
class Policy:
    component: str
    name: str
    #: What turns it on (with admissionPolicies.enabled), as a template expression.
    condition: str
    #: Its file in the component's directory.
    file: str = "admission-policy.yaml"
    #: What names its template: admission-policy-<slug>.yaml (default: the component).
    slug: str = ""


#: The node sink with health.condition on (null counts as gfd's default, on).
_HEALTH = '(include "gfd.healthCondition" .)'
POLICIES = (
    Policy("node-sink", "gfd-node-labeler", ".Values.sinks.node.enabled"),
    Policy(
        "node-sink",
        "gfd-node-health",
        _HEALTH,
        file="health-policy.yaml",
        slug="node-health",
    ),
    Policy(
        "node-sink",
        "gfd-node-events",
        _HEALTH,
        file="events-policy.yaml",
        slug="node-events",
    ),
    Policy("node-feature-api", "gfd-node-feature-writer", ".Values.sinks.nodeFeature.enabled"),
)
_USER = f"'system:serviceaccount:{NAMESPACE}:gfd'"
#: deploy/'s note on keeping the user name in step by a kustomize replacement; the chart
#: sets it from the release instead.
_KUSTOMIZE_NOTE = (
    "    # The namespace in this user name is kept equal to the ServiceAccount's by the\n"
    "    # replacement in this component's kustomization.\n"
)


class PolicySourceError(ValueError):
    """A policy in deploy/ no longer has the shape this module rewrites."""


def source(policy: Policy) -> Path:
    return DEPLOY_DIR / "components" / policy.component / policy.file


def target(policy: Policy) -> Path:
    return CHART_DIR / "templates" / f"admission-policy-{policy.slug or policy.component}.yaml"


def _replace(text: str, old: str, new: str, policy: Policy) -> str:
    if old not in text:
        raise PolicySourceError(f"{source(policy)}: {old.strip()!r} not found")
    return text.replace(old, new)


def render(policy: Policy, text: str) -> str:
    """The chart template made from deploy/'s policy file ``text``."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)  # the header speaks of kustomize; the chart's says where it came from
    body = "".join(lines).replace(_KUSTOMIZE_NOTE, "    # The release's ServiceAccount.\n")
    suffix = policy.name.removeprefix("gfd")
    name = f'{{{{ include "gfd.fullname" . }}}}{suffix}'
    body = _replace(
        body,
        f"  name: {policy.name}\n",
        f'  name: {name}\n  labels:\n    {{{{- include "gfd.labels" . | nindent 4 }}}}\n',
        policy,
    )
    body = _replace(body, f"  policyName: {policy.name}\n", f"  policyName: {name}\n", policy)
    body = _replace(body, _USER, "'{{ include \"gfd.serviceAccountUser\" . }}'", policy)
    if NAMESPACE in body or "{{ " in text:
        raise PolicySourceError(f"{source(policy)}: names the namespace where it cannot be set")
    relative = source(policy).relative_to(DEPLOY_DIR.parent)
    return (
        f"{{{{- if and .Values.admissionPolicies.enabled {policy.condition} }}}}\n"
        f"# Written from {relative}\n"
        "# by `python -m tests.helm.chart_policies`: edit that file (its comments say what\n"
        "# each rule is for), then run it.\n"
        f"{body}"
        "{{- end }}\n"
    )


def stale() -> list[Path]:
    """The chart's policy templates that differ from what :func:`render` makes."""
    return [
        target(p)
        for p in POLICIES
        if not target(p).exists()
        or target(p).read_text("utf-8") != render(p, source(p).read_text("utf-8"))
    ]


def write() -> None:
    for policy in POLICIES:
        target(policy).write_text(render(policy, source(policy).read_text("utf-8")), "utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(1 if stale() else 0)
    write()
