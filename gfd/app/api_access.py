"""The Kubernetes API access a configuration needs: one list, derived from the settings.

This module owns which verbs on which resources gfd's parts call for a given
:class:`~gfd.config.Settings`, decided as the assembly decides what to build: the sinks
of :data:`gfd.app.sinks.SINK_KINDS` that the settings want, and the health outputs that
:class:`gfd.app.health_setup.HealthSetup` adds beside the node sink. Each entry says what
needs it and which RBAC rule of ``deploy/`` (and of the Helm chart) grants it, so that
``gfd doctor`` can ask the API server about each one (``SelfSubjectAccessReview``) and
name the rule that is missing. Tests hold the list to the requests the parts really send
(``tests/doctor/test_api_access.py``) and to what each overlay's RBAC grants.
"""

from __future__ import annotations

from gfd.app.sinks import SINK_KINDS
from gfd.base.frozen import frozen_dataclass
from gfd.config import Settings
from gfd.config.values import DEVICE_PLUGIN_CHECK

#: Where the rules come from, as the fixes name them.
NODE_SINK_RULES = (
    "the ClusterRole gfd-node-labeler of deploy/components/node-sink/rbac.yaml "
    "(Helm: sinks.node.enabled)"
)
NODE_HEALTH_RULES = (
    "the ClusterRole gfd-node-labeler of deploy/components/node-sink/rbac.yaml "
    "(Helm: sinks.node.enabled with health.condition)"
)
NODE_EVENTS_RULES = (
    "the Role gfd-node-events in default of deploy/components/node-sink/rbac.yaml "
    "(Helm: sinks.node.enabled with health.condition)"
)
NODE_FEATURE_RULES = (
    "the Role gfd-node-feature-writer of deploy/components/node-feature-api/rbac.yaml "
    "(Helm: sinks.nodeFeature.enabled)"
)
#: Where the API server files Events about a Node (gfd.health.condition.EVENT_NAMESPACE,
#: named here without importing the health package for a string).
EVENT_NAMESPACE = "default"


@frozen_dataclass
class ApiAccess:
    """One verb on one resource, in one namespace ("" for the cluster scope), and why.

    ``subresource`` is RBAC's second part (``nodes/status``); ``group`` is the API group
    ("" for the core group).
    """

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespace: str = ""
    #: What in gfd makes this call.
    needed_by: str = ""
    #: The RBAC rule that grants it (as shipped in deploy/ and the chart).
    granted_by: str = ""

    @property
    def rbac_resource(self) -> str:
        """The resource as an RBAC rule names it: ``nodes``, ``nodes/status``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self) -> str:
        """``patch nodes/status``, ``create events in default``,
        ``list resourceslices.resource.k8s.io``: how messages name it."""
        what = f"{self.rbac_resource}.{self.group}" if self.group else self.rbac_resource
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {what}{where}"

    def review_attributes(self) -> dict[str, str]:
        """``spec.resourceAttributes`` of a SelfSubjectAccessReview asking for this access."""
        attributes = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if self.subresource:
            attributes["subresource"] = self.subresource
        if self.namespace:
            attributes["namespace"] = self.namespace
        return attributes


def _wanted_sinks(settings: Settings) -> frozenset[str]:
    return frozenset(kind.name for kind in SINK_KINDS if kind.wanted(settings))


def required_access(settings: Settings) -> tuple[ApiAccess, ...]:
    """Every API access the parts ``settings`` build will use, in a fixed order.

    The node sink reads and patches its Node (the health taint patches the same Node);
    with health checks on, the ``GPUHealthy`` condition patches ``nodes/status`` and each
    change of it or of the taint is an Event in ``default``; the device-plugin check lists
    the node's ResourceSlices. The NodeFeature sink reads, creates and replaces its
    object in its namespace, and reads its own Pod for the owner references when it
    knows the Pod's name.
    """
    wanted = _wanted_sinks(settings)
    access: list[ApiAccess] = []
    if "node" in wanted:
        access += [
            ApiAccess("get", "nodes", needed_by="the node sink", granted_by=NODE_SINK_RULES),
            ApiAccess("patch", "nodes", needed_by="the node sink", granted_by=NODE_SINK_RULES),
        ]
        checks = settings.health_checks
        if checks and settings.health_condition:
            access.append(
                ApiAccess(
                    "patch",
                    "nodes",
                    subresource="status",
                    needed_by="the GPUHealthy condition (--health-condition)",
                    granted_by=NODE_HEALTH_RULES,
                )
            )
        if checks and (settings.health_condition or settings.health_taint):
            access.append(
                ApiAccess(
                    "create",
                    "events",
                    namespace=EVENT_NAMESPACE,
                    needed_by="the Events of a change of GPU health",
                    granted_by=NODE_EVENTS_RULES,
                )
            )
        if DEVICE_PLUGIN_CHECK in checks:
            access.append(
                ApiAccess(
                    "list",
                    "resourceslices",
                    group="resource.k8s.io",
                    needed_by="the device-plugin check on nodes of NVIDIA's DRA driver",
                    granted_by=NODE_SINK_RULES,
                )
            )
    if "nodefeature" in wanted:
        namespace = settings.namespace or ""
        for verb in ("get", "create", "update"):
            access.append(
                ApiAccess(
                    verb,
                    "nodefeatures",
                    group="nfd.k8s-sigs.io",
                    namespace=namespace,
                    needed_by="the NodeFeature sink",
                    granted_by=NODE_FEATURE_RULES,
                )
            )
        if settings.pod_name:
            access.append(
                ApiAccess(
                    "get",
                    "pods",
                    namespace=namespace,
                    needed_by="the NodeFeature's owner references (POD_NAME)",
                    granted_by=NODE_FEATURE_RULES,
                )
            )
    return tuple(access)
