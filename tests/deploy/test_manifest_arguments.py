"""The arguments and environment each overlay gives gfd are accepted by gfd's own
command line and configuration code, and mean what the overlay intends."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.cli import parse_command_line
from gfd.config import Settings, resolve_settings
from gfd.config.effect import IdleFlags, idle_flags
from gfd.config.values import HEALTH_CHECKS
from gfd.metrics import DEFAULT_METRICS_ADDRESS, parse_listen_address
from tests.deploy.manifests import NAMESPACE, OVERLAYS, pod_spec, render, workload

FEATURE_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
#: What the downward API fills in on a node called gpu-1.
DOWNWARD = {
    "spec.nodeName": "gpu-1",
    "metadata.name": "gfd-7x2kq",
    "metadata.namespace": NAMESPACE,
}


def settings_of(overlay: str) -> Settings:
    container = pod_spec(workload(render(overlay)))["containers"][0]
    env: dict[str, str] = {}
    for variable in container["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            env[variable["name"]] = DOWNWARD[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    namespace, explicit = parse_command_line(container.get("args", []))
    settings = resolve_settings(explicit, env)
    # No flag of the overlay is refused, nor warned about, as one without effect.
    assert idle_flags(namespace.command or "run", explicit, settings) == IdleFlags()
    return settings


EXPECTED: dict[str, dict[str, Any]] = {
    "standalone": {"patch_node": True, "use_node_feature_api": False, "no_output_file": True},
    "nfd": {
        "patch_node": False,
        "use_node_feature_api": False,
        "no_output_file": False,
        "output_file": FEATURE_FILE,
    },
    "node-feature-api": {
        "patch_node": False,
        "use_node_feature_api": True,
        "no_output_file": True,
    },
    "oneshot-job": {"patch_node": True, "no_output_file": True, "oneshot": True},
    "vgpu": {"patch_node": True, "no_output_file": True},
    # No device plugin assumption: no MIG strategy, no sharing config, every health check.
    "dra": {
        "patch_node": True,
        "no_output_file": True,
        "label_mode": "auto",
        "mig_strategy": "none",
        "sharing": None,
        "health_checks": HEALTH_CHECKS,
    },
}


def test_every_overlay_has_expected_settings() -> None:
    assert set(EXPECTED) == set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gfd_accepts_the_overlay_configuration(overlay: str) -> None:
    settings = settings_of(overlay)
    for name, value in EXPECTED[overlay].items():
        assert getattr(settings, name) == value, name
    assert settings.oneshot is (overlay == "oneshot-job")
    assert settings.no_timestamp is True
    if overlay != "oneshot-job":
        assert settings.sleep_interval == 60.0
        assert settings.metrics_address == DEFAULT_METRICS_ADDRESS
        assert parse_listen_address(settings.metrics_address).port == 8079
    assert (settings.node_name, settings.pod_name, settings.namespace) == (
        "gpu-1",
        "gfd-7x2kq",
        NAMESPACE,
    )
    assert settings.sysfs_root == "/sys"
