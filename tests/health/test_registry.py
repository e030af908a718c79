"""The registry of health checks (gfd.health.registry) against the names configuration
accepts (gfd.config.values) and against the checks' own classes: the same checks, the same
order, each line saying what its class says, reasons that rank cleanly.
"""

from __future__ import annotations

import pytest

from gfd.config.values import HEALTH_CHECKS, parse_checks
from gfd.health import API_CHECKS, DEVICE_PLUGIN, REASON_HEALTHY, REASONS, REGISTRY
from gfd.health.registry import CHECKS, CHECKS_PACKAGE, CheckEntry, CheckRegistry
from tests.deploy.admission_model import HEALTH_REASONS


def test_the_registry_holds_exactly_the_checks_configuration_accepts() -> None:
    assert set(REGISTRY) == set(HEALTH_CHECKS)
    # The same order too: configuration lists them, and the monitor runs them, in it.
    assert tuple(REGISTRY) == HEALTH_CHECKS


def test_every_check_is_registered_under_its_own_name() -> None:
    assert [(name, factory.name) for name, factory in REGISTRY.items()] == [
        (name, name) for name in HEALTH_CHECKS
    ]


@pytest.mark.parametrize("entry", CHECKS, ids=lambda entry: entry.name)
def test_each_line_says_what_its_class_says(entry: CheckEntry) -> None:
    """A line is read without importing its class: what it declares (the name, the module,
    whether the check needs the Node) must be what the class itself declares."""
    factory = entry.load()
    assert factory.__module__ == f"{CHECKS_PACKAGE}.{entry.module}"
    assert factory.__name__ == entry.class_name
    assert (factory.name, factory.needs_node) == (entry.name, entry.needs_node)
    assert factory.reasons, "a check reports at least one reason"


def test_two_lines_of_one_name_are_refused() -> None:
    twice = (CHECKS[0], CheckEntry(CHECKS[0].name, "nvlink", "NvLinkCheck"))
    with pytest.raises(ValueError, match="share a name"):
        CheckRegistry(twice)


def test_each_reason_belongs_to_one_check_and_none_is_the_healthy_one() -> None:
    assert len(REASONS) == len(set(REASONS))
    assert REASON_HEALTHY not in REASONS
    assert REASONS == (
        "GPULost",
        "DevicePluginMissing",
        "AllocatableMismatch",
        "FabricNotReady",
        "FabricDegraded",
        "NVLinkDegraded",
        "XidError",
        "XidStorm",
        "GPUMemoryFailure",
        "GPUResetRequired",
        "UncorrectableECC",
        "PCIeLinkDegraded",
        "PCIeReplaysRising",
    )


def test_the_admission_policies_admit_exactly_the_reasons_gfd_writes() -> None:
    """tests/deploy holds the node health admission policy to HEALTH_REASONS; this holds
    HEALTH_REASONS to the checks: the API server refuses a new check's reason until the
    policy lists it."""
    assert {REASON_HEALTHY, *REASONS} == HEALTH_REASONS


def test_only_the_device_plugin_check_needs_the_node() -> None:
    assert sorted(API_CHECKS) == [DEVICE_PLUGIN]


def test_checks_parse_from_a_list_in_canonical_order() -> None:
    assert parse_checks("nvlink, gpu-lost", "--health-checks") == ("gpu-lost", "nvlink")
    assert parse_checks("none", "--health-checks") == ()
    assert parse_checks("", "--health-checks") == ()


def test_an_unknown_check_is_refused_with_the_choices() -> None:
    with pytest.raises(Exception, match=r"--health-checks: 'gpu-lst' is not a health check"):
        parse_checks("gpu-lst", "--health-checks")
