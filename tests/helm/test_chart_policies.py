"""The chart's admission policies are deploy/'s, with only Helm's names put in."""

from __future__ import annotations

import pytest

from tests.helm.chart_policies import (
    POLICIES,
    Policy,
    PolicySourceError,
    render,
    source,
    stale,
    target,
)


def test_chart_policies_are_written_from_deploy() -> None:
    assert stale() == [], "run `python -m tests.helm.chart_policies` and commit the result"


@pytest.mark.parametrize("policy", POLICIES, ids=[p.component for p in POLICIES])
def test_a_changed_rule_in_deploy_makes_the_chart_stale(policy: Policy) -> None:
    # The negative control: the comparison above sees one changed character of CEL.
    text = source(policy).read_text("utf-8")
    changed = text.replace("failurePolicy: Fail", "failurePolicy: Ignore")
    assert changed != text
    assert render(policy, changed) != target(policy).read_text("utf-8")


def test_a_policy_of_another_shape_is_refused() -> None:
    policy = POLICIES[0]
    text = source(policy).read_text("utf-8").replace(":gfd'", ":labeller'")
    with pytest.raises(PolicySourceError, match="not found"):
        render(policy, text)


def test_chart_rules_are_written_from_deploy() -> None:
    from tests.helm.chart_rules import stale as rules_stale

    assert not rules_stale(), "run `python -m tests.helm.chart_rules` and commit the result"
