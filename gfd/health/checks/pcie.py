"""The ``pcie`` check: a GPU's PCIe link below what it could reach (``PCIeLinkDegraded``),
or its replay counter rising faster than a threshold (``PCIeReplaysRising``), by GPU UUID.

What the link could reach is NVML's maximum "possible with this device and system" (the
lower of the GPU's and the slot's, :attr:`gfd.facts.PcieLink.reachable_width` and
``reachable_generation``), so a Gen5 x16 GPU in a Gen4 x8 slot is not degraded at Gen4 x8.

``PCIeLinkDegraded``, the written rule:

- a current width below the reachable one counts whenever it is seen: a link's width is
  what it trained at, and the width is the safe signal;
- a current generation below the reachable one counts only while the GPU is busy (NVML's
  utilisation at least :data:`BUSY_UTILIZATION` percent in that read): NVIDIA documents
  that the current generation "may be reduced when the GPU is not in use", to save power.
  A read of an idle GPU below its generation, or of one whose utilisation NVML does not
  report (a MIG-enabled GPU), neither starts nor clears a problem;
- the false-positive guard: a degradation counts once reads have shown it for the settle
  time (the run's ``--health-grace-period``, 0 in a one-shot run, which reads once), and
  is pending until then; a read that shows the link at its reach clears it at once.

``PCIeReplaysRising``: the replay counter (link-level retransmissions, which a marginal
link, riser or retimer causes) rose faster than ``--health-pcie-replay-rate`` replays a
minute (default 8, NVIDIA's limit), measured between reads at least a minute apart on the
check's clock. The first read is the baseline, so a counter that only grew before gfd
started is not rising; a counter that falls (a driver reload) is a new baseline. It clears
when a later minute stays at or under the rate.

It cannot decide (never healthy or failing) what NVML does not tell: a GPU without a
link state or replay counter (a driver or GPU that does not answer), and a GPU attached
to its CPU over NVLink-C2C (Grace), whose PCIe answers say nothing of that link. What it
remembers per GPU outlives a reload.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from gfd.config.values import PCIE_CHECK, format_duration
from gfd.facts import Gpu, PcieLink
from gfd.facts.pci import sysfs_bus_id
from gfd.health.check import (
    CANNOT_DECIDE,
    FAILING,
    OK,
    PENDING,
    UNKNOWN,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    blind_spots,
    gpu_name,
)

REASON_LINK_DEGRADED = "PCIeLinkDegraded"
REASON_REPLAYS_RISING = "PCIeReplaysRising"

#: A GPU busy at least half of NVML's last sample period has left its idle power state,
#: where the link may run below its generation: below it then, the link is trained down.
BUSY_UTILIZATION = 50
#: The shortest span the replay rate is measured over (seconds of the check's clock).
REPLAY_WINDOW = 60.0

#: What cannot be judged of a GPU, in the order the note lists them.
NO_LINK_STATE = "no PCIe link state (NVML answers none)"
NO_UTILIZATION = "a PCIe generation below reach and no utilisation to tell busy from idle"
NO_REPLAY_COUNTER = "no PCIe replay counter"
NOT_PCIE_ATTACHED = "attached to its CPU over NVLink-C2C, not PCIe"


@dataclass
class _Degradation:
    """One GPU's link as last judged below its reach: since when, how, and the last read
    that showed it (the check's clock)."""

    since: float
    seen: float
    words: str


@dataclass
class _ReplayWindow:
    """One GPU's replay counter at the start of the current window, and the last window's
    verdict (words while it rose too fast, else "")."""

    start: float
    count: int
    rising: str = ""


class PcieCheck:
    """Judges each GPU's PCIe link and replay counter from the cycle's facts."""

    name: ClassVar[str] = PCIE_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_LINK_DEGRADED, REASON_REPLAYS_RISING)
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        self._rules = setup.pcie
        self._clock = setup.clock
        #: Per GPU UUID.
        self._degraded: dict[str, _Degradation] = {}
        self._replays: dict[str, _ReplayWindow] = {}
        if isinstance(previous, PcieCheck):
            self._degraded = {uuid: replace(seen) for uuid, seen in previous._degraded.items()}
            self._replays = {uuid: replace(window) for uuid, window in previous._replays.items()}

    def observe(self, seen: Observation) -> CheckResult:
        if seen.facts is None:
            return CheckResult(PCIE_CHECK, UNKNOWN)
        now = self._clock()
        failing: list[Problem] = []
        pending: list[Problem] = []
        blind: dict[str, list[int]] = {
            NOT_PCIE_ATTACHED: [],
            NO_LINK_STATE: [],
            NO_UTILIZATION: [],
            NO_REPLAY_COUNTER: [],
        }
        present = set()
        for gpu in seen.facts.gpus:
            present.add(gpu.uuid)
            if gpu.coherently_attached:
                blind[NOT_PCIE_ATTACHED].append(gpu.index)
                continue
            link = gpu.pcie or PcieLink()
            name = gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))
            if _judgeable(link):
                if link_below_reach(link) is None and link.gpu_utilization is None:
                    blind[NO_UTILIZATION].append(gpu.index)
                problem = self._link_problem(gpu.uuid, link, now)
                if problem is not None:
                    counted, words = problem
                    into = failing if counted else pending
                    into.append(Problem(PCIE_CHECK, REASON_LINK_DEGRADED, f"{name}: {words}"))
            else:
                blind[NO_LINK_STATE].append(gpu.index)
            if link.replay_counter is None:
                blind[NO_REPLAY_COUNTER].append(gpu.index)
            else:
                rising = self._replay_rise(gpu, link.replay_counter, now)
                if rising:
                    failing.append(Problem(PCIE_CHECK, REASON_REPLAYS_RISING, f"{name}: {rising}"))
        self._forget_gone(present)
        if failing:
            return CheckResult(PCIE_CHECK, FAILING, tuple(_by_reason(failing, self.reasons)))
        if pending:
            return CheckResult(PCIE_CHECK, PENDING, tuple(pending))
        note = blind_spots(blind)
        if note:
            return CheckResult(PCIE_CHECK, CANNOT_DECIDE, note=note)
        return CheckResult(PCIE_CHECK, OK)

    def _link_problem(self, uuid: str, link: PcieLink, now: float) -> tuple[bool, str] | None:
        """The GPU's link degradation as (counted yet, words), or None when it has none."""
        verdict = link_below_reach(link)
        known = self._degraded.get(uuid)
        if verdict is None:
            # Below its generation while idle (or utilisation unknown): no new evidence.
            if known is None:
                return None
        elif verdict == "":
            self._degraded.pop(uuid, None)
            return None
        elif known is None:
            known = self._degraded[uuid] = _Degradation(since=now, seen=now, words=verdict)
        else:
            known.seen, known.words = now, verdict
        return known.seen - known.since >= self._rules.settle, known.words

    def _replay_rise(self, gpu: Gpu, count: int, now: float) -> str:
        """The GPU's replay rise in words while the last full window rose too fast, else ""."""
        window = self._replays.get(gpu.uuid)
        if window is None or count < window.count:
            # The first count, or one that restarted (a driver reload): a new baseline.
            self._replays[gpu.uuid] = _ReplayWindow(start=now, count=count)
            return ""
        elapsed = now - window.start
        if elapsed >= REPLAY_WINDOW:
            rose = count - window.count
            per_minute = rose * 60.0 / elapsed
            limit = self._rules.replays_per_minute
            window.rising = (
                f"PCIe replay counter rose by {rose} in {format_duration(round(elapsed))} "
                f"({per_minute:.1f} a minute, more than {limit}; now {count})"
                if per_minute > limit
                else ""
            )
            window.start, window.count = now, count
        return window.rising

    def _forget_gone(self, present: set[str]) -> None:
        """A GPU no longer read (gone, or replaced under a new UUID) starts afresh if it returns."""
        for memory in (self._degraded, self._replays):
            for uuid in [uuid for uuid in memory if uuid not in present]:
                del memory[uuid]


def _judgeable(link: PcieLink) -> bool:
    """Whether the link's width or generation can be held to what it could reach."""
    return (link.current_width is not None and link.reachable_width is not None) or (
        link.current_generation is not None and link.reachable_generation is not None
    )


def link_below_reach(link: PcieLink) -> str | None:
    """The link's degradation in words; "" when it runs at its reach; None when this read
    cannot tell (only the generation is below, and the GPU is not known to be busy)."""
    width, reach_width = link.current_width, link.reachable_width
    generation, reach_generation = link.current_generation, link.reachable_generation
    narrow = width is not None and reach_width is not None and width < reach_width
    slow = generation is not None and reach_generation is not None and generation < reach_generation
    busy = link.gpu_utilization is not None and link.gpu_utilization >= BUSY_UTILIZATION
    if not narrow and not slow:
        return ""
    if not narrow and not busy:
        return None
    now = f"{_generation(generation)}x{width if width is not None else '?'}"
    could = f"{_generation(reach_generation)}x{reach_width if reach_width is not None else '?'}"
    words = f"PCIe link runs at {now}, below the {could} the GPU and its slot allow"
    if slow and busy:
        words += f", while {link.gpu_utilization}% busy"
    return words


def _generation(generation: int | None) -> str:
    return f"Gen{generation} " if generation is not None else ""


def _by_reason(problems: list[Problem], reasons: tuple[str, ...]) -> list[Problem]:
    rank = {reason: position for position, reason in enumerate(reasons)}
    return sorted(problems, key=lambda problem: rank[problem.reason])
