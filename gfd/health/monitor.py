"""The health monitor: builds the enabled checks from the registry and runs them each cycle.

It knows no check by name: what it runs is :data:`gfd.health.registry.REGISTRY` filtered
by the configuration, in the registry's order (and only those checks are imported). It holds what outlives a configuration —
the checks themselves (each with what it remembers), the GPU names their messages use and
what each check last said it cannot decide — and hands it to the next monitor on a SIGHUP
reload. It owns the log line of a check that cannot decide (the check gives the reason):
said when the reason changes, not every cycle; a warning in a periodic run, where it is a
blind spot of a watch that goes on, and info in a one-shot run, where some of it is by
design (no Xid can arrive in one cycle) and the run's ``GPU health checked`` line, also
info, names the checks that could not decide.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gfd.base.errors import GfdError
from gfd.config.values import HEALTH_CHECKS
from gfd.facts import NodeFacts
from gfd.health.check import (
    CANNOT_DECIDE,
    DEFAULT_EVENT_RULES,
    DEFAULT_GRACE_PERIOD,
    DEFAULT_PCIE_RULES,
    OK,
    Check,
    CheckFactory,
    CheckSetup,
    EventRules,
    GpuDirectory,
    Observation,
    PcieRules,
    Verdict,
)
from gfd.health.registry import REGISTRY

if TYPE_CHECKING:
    from gfd.config import Sharing

if TYPE_CHECKING:
    # The assembly builds the watch; the monitor only hands it to the checks.
    from gfd.health.dra_node import DraNodeWatch


class HealthMonitor:
    """Runs the enabled checks each cycle and keeps them, and what they remember, across cycles.

    ``checks``: the names of the enabled checks (those that need the Node run only when
    one is handed in); a name the registry lacks is ignored. ``clock`` (monotonic
    seconds) times grace periods. Pass the previous monitor as ``previous`` on a reload:
    each check takes over what its predecessor remembered (NVLinks seen up, a grace
    period running), a check disabled now keeps it for a later reload that enables it
    again, and the GPU names carry over. ``registry``: the checks to choose from.
    ``dra_node``: whether the DRA driver hands out the GPUs, for the device-plugin check
    (:class:`~gfd.health.check.CheckSetup`). ``events``: the
    Xid events and the rules of the event checks (:class:`~gfd.health.check.EventRules`);
    ``pcie``: the PCIe link's rules (:class:`~gfd.health.check.PcieRules`).
    ``one_shot``: the run has one cycle, so what a check cannot decide is logged at info,
    not as a warning (see the module's docstring); ``log`` takes those lines.
    """

    def __init__(
        self,
        *,
        sysfs_root: Path,
        checks: Sequence[str] = HEALTH_CHECKS,
        mig_strategy: str = "none",
        sharing: Sharing | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        log: Any = None,
        previous: HealthMonitor | None = None,
        registry: Mapping[str, CheckFactory] = REGISTRY,
        dra_node: DraNodeWatch | None = None,
        events: EventRules = DEFAULT_EVENT_RULES,
        pcie: PcieRules = DEFAULT_PCIE_RULES,
        one_shot: bool = False,
    ) -> None:
        self.setup = CheckSetup(
            sysfs_root=sysfs_root,
            mig_strategy=mig_strategy,
            sharing=sharing,
            grace_period=grace_period,
            clock=clock,
            log=log,
            dra_node=dra_node,
            events=events,
            pcie=pcie,
        )
        self.gpus: GpuDirectory = GpuDirectory(previous.gpus if previous is not None else None)
        earlier = previous._built if previous is not None else {}
        #: Every check built in this chain of monitors, enabled now or not, by name.
        self._built: dict[str, Check] = dict(earlier)
        enabled = []
        # By name, then looked up: the registry imports a check's module when it is looked
        # up, so a check that is not enabled is never imported.
        for name in registry:
            if name in checks:
                check = self._built[name] = registry[name](self.setup, earlier.get(name))
                enabled.append(check)
        self._enabled: tuple[Check, ...] = tuple(enabled)
        #: The names of the enabled checks, in the order they run.
        self.checks = tuple(check.name for check in self._enabled)
        #: The enabled checks' condition reasons by priority (the registry's order, then
        #: each check's, as :func:`gfd.health.registry.reasons_of` ranks them all).
        self.reasons = tuple(reason for check in self._enabled for reason in check.reasons)
        self._one_shot = one_shot
        #: What each check last said it cannot decide ("" since it last passed).
        self._undecided: dict[str, str] = dict(previous._undecided) if previous else {}

    def observe(
        self,
        facts: NodeFacts | None,
        *,
        error: GfdError | None = None,
        node: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """This cycle's verdict from its facts (None when the read failed with ``error``)
        and, for the checks that need it, the Node object (None: those checks are not run)."""
        if facts is not None:
            self.gpus.remember(facts.gpus)
        seen = Observation(facts=facts, error=error, node=node, gpus=self.gpus)
        verdict = Verdict(
            tuple(
                check.observe(seen)
                for check in self._enabled
                if node is not None or not check.needs_node
            )
        )
        for result in verdict.results:
            self._say_undecided(result.check, result.state, result.note)
        return verdict

    def _say_undecided(self, check: str, state: str, note: str) -> None:
        """Log what ``check`` cannot decide when that changes; a pass clears it, so the
        next time it cannot decide is said again. Failing or unknown changes nothing."""
        if state not in (OK, CANNOT_DECIDE):
            return
        said = note if state == CANNOT_DECIDE else ""
        if self._undecided.get(check, "") == said:
            return
        self._undecided[check] = said
        log = self.setup.log
        if log is None or not said:
            return
        line = log.info if self._one_shot else log.warning
        line("GPU health check cannot decide", check=check, why=said)
