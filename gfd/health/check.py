"""What a GPU health check is, what it is handed each cycle, and what it answers.

This module owns the contract between :class:`~gfd.health.monitor.HealthMonitor` and the
checks under :mod:`gfd.health.checks`: the :class:`Check` protocol (and
:class:`CheckFactory`, how the registry holds a check before it is built), what a check is
built from (:class:`CheckSetup`) and handed each cycle (:class:`Observation`), the results
it gives (:class:`Problem`, :class:`CheckResult`, the states :data:`OK`, :data:`FAILING`,
:data:`PENDING`, :data:`UNKNOWN`, :data:`CANNOT_DECIDE`), the cycle's :class:`Verdict`,
and how messages name a GPU (:class:`GpuDirectory`). It knows no check by name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gfd.base.errors import GfdError
from gfd.base.frozen import frozen_dataclass
from gfd.config.values import DEFAULT_IGNORED_XIDS, DEFAULT_PCIE_REPLAYS_PER_MINUTE, XidThreshold
from gfd.facts import Gpu, NodeFacts
from gfd.facts.pci import sysfs_bus_id

if TYPE_CHECKING:
    from gfd.config import Sharing
    from gfd.health.dra_node import DraNodeWatch
    from gfd.nvml.xid_events import XidSource

OK = "ok"
FAILING = "failing"
#: A problem seen but not yet reported: the device plugin's grace period.
PENDING = "pending"
#: Nothing to decide from this cycle (the facts could not be read).
UNKNOWN = "unknown"
#: The check cannot judge some of what it watches in this setup, and found nothing wrong
#: in the rest: a GPU without ECC, one NVML cannot watch for Xids, a one-shot run that no
#: Xid can reach. It is never healthy or failing, and it holds no verdict back: the node
#: is judged by the checks that can decide (``CheckResult.note`` says why).
CANNOT_DECIDE = "cannot-decide"

#: How long a check with a grace period waits before a problem counts (seconds).
DEFAULT_GRACE_PERIOD = 300.0


@frozen_dataclass
class Problem:
    """One thing wrong, in words an operator acts on."""

    check: str
    reason: str
    message: str


@frozen_dataclass
class CheckResult:
    """What one check found this cycle: :data:`OK`, :data:`FAILING`, :data:`PENDING`,
    :data:`UNKNOWN` or :data:`CANNOT_DECIDE` (``note``: what it cannot judge, and why)."""

    check: str
    state: str
    problems: tuple[Problem, ...] = ()
    note: str = ""


@frozen_dataclass
class Verdict:
    """Every enabled check's result for one cycle."""

    results: tuple[CheckResult, ...]

    @property
    def failing(self) -> tuple[Problem, ...]:
        return tuple(p for r in self.results if r.state == FAILING for p in r.problems)

    @property
    def decided(self) -> bool:
        """No check is failing, and every one could say so this cycle: each passed, or
        cannot decide in this setup (then another must have passed)."""
        results = self.results
        return all(r.state in (OK, CANNOT_DECIDE) for r in results) and (
            not results or any(r.state == OK for r in results)
        )


def gpu_name(index: int | None, address: str | None) -> str:
    """``GPU 3 (0000:8a:00.0)`` — how messages name a GPU."""
    where = address or "bus id unknown"
    return f"GPU {index} ({where})" if index is not None else f"the GPU at {where}"


_NAMED_BY_INDEX = re.compile(r"^GPU (\d+) \(")
_NAMED_BY_ADDRESS = re.compile(
    r"^the GPU at ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
)


def gpu_named(message: str) -> str | None:
    """The GPU a problem's message is about, as :func:`gpu_name` wrote it at its start:
    its index (``"3"``), or its bus id when NVML's index is unknown; None for a problem
    of the node (the device plugin's). The metrics' ``gpu`` label, the same as
    ``gfd_gpu_xid_errors``'."""
    named = _NAMED_BY_INDEX.match(message)
    if named is not None:
        return named.group(1)
    at = _NAMED_BY_ADDRESS.match(message)
    return at.group(1) if at is not None else None


def blind_spots(blind: Mapping[str, Iterable[int]]) -> str:
    """A check's ``CANNOT_DECIDE`` note: each thing it cannot see and the GPUs (by index)
    it cannot see it on, ``"no ECC count on GPUs 0, 3"``; empty when it sees everything."""
    spots = []
    for what, indices in blind.items():
        listed = list(indices)
        if listed:
            gpus = "GPUs" if len(listed) > 1 else "GPU"
            spots.append(f"{what} on {gpus} {', '.join(map(str, listed))}")
    return "; ".join(spots)


class GpuDirectory:
    """The NVML index and sysfs address of every GPU seen in this process's life.

    A GPU that fell off the bus, or answered ``NVML_ERROR_GPU_IS_LOST``, is no longer in
    the cycle's facts; its message still names it by both (``GPU 3 (0000:8a:00.0)``).
    Shared by the checks, and handed on across a reload (``previous``).
    """

    def __init__(self, previous: GpuDirectory | None = None) -> None:
        self._index_by_address: dict[str, int] = {}
        self._address_by_index: dict[int, str] = {}
        if previous is not None:
            self._index_by_address = dict(previous._index_by_address)
            self._address_by_index = dict(previous._address_by_index)

    def remember(self, gpus: Iterable[Gpu]) -> None:
        for gpu in gpus:
            address = sysfs_bus_id(gpu.bus_id)
            self._index_by_address[address] = gpu.index
            self._address_by_index[gpu.index] = address

    def index_at(self, address: str) -> int | None:
        """NVML's index of the GPU last seen at the sysfs ``address``."""
        return self._index_by_address.get(address)

    def address_of(self, index: int | None) -> str | None:
        """The sysfs address of the GPU last seen as NVML's ``index``."""
        return self._address_by_index.get(index) if index is not None else None


@frozen_dataclass
class EventRules:
    """What the checks of events (``xid``, and ``memory``'s ECC rises) are given.

    ``xid_events``: the run's critical Xid events (None: the run receives none, as a
    one-shot run: the ``xid`` check cannot decide then). A critical Xid is fatal when it
    is among ``fatal_xids`` or, with that empty, not among ``ignored_xids``. ``hold``:
    how long a fatal Xid, an Xid storm or an ECC rise keeps its GPU failing after the last
    one, in seconds of :attr:`CheckSetup.clock`; None: for the life of the process.
    """

    xid_events: XidSource | None = field(default=None, compare=False)
    ignored_xids: frozenset[int] = frozenset(DEFAULT_IGNORED_XIDS)
    fatal_xids: frozenset[int] = frozenset()
    hold: float | None = None
    #: Xid storms (``--health-xid-threshold``): so many of a rule's Xids that are not fatal
    #: on one GPU within its window fail the GPU, held as a fatal Xid is.
    thresholds: tuple[XidThreshold, ...] = ()
    #: Wall-clock seconds, to tell how long ago an event's ``at`` was: an Xid the kernel
    #: logged before gfd started is held, and counted in a window, from when it happened.
    wall_clock: Callable[[], float] = field(default=time.time, compare=False)

    def fatal(self, xid: int) -> bool:
        """Whether a critical ``xid`` marks its GPU unhealthy."""
        if self.fatal_xids:
            return xid in self.fatal_xids
        return xid not in self.ignored_xids


#: No Xid events, the default Xids ignored, events held for the process's life.
DEFAULT_EVENT_RULES = EventRules()


@frozen_dataclass
class PcieRules:
    """What the ``pcie`` check is given.

    ``replays_per_minute``: a GPU whose replay counter rises faster than this, measured over
    a minute or more, is failing. ``settle``: how long (seconds of :attr:`CheckSetup.clock`)
    a link must be seen below what it could reach before it counts: the run's grace period,
    0 in a one-shot run, which reads once and reports what that read shows.
    """

    replays_per_minute: int = DEFAULT_PCIE_REPLAYS_PER_MINUTE
    settle: float = DEFAULT_GRACE_PERIOD


DEFAULT_PCIE_RULES = PcieRules()


@frozen_dataclass
class CheckSetup:
    """What the running configuration gives every check it builds.

    ``clock`` (monotonic seconds) times grace periods; ``log`` takes the warnings a
    check gives once (a misconfiguration it cannot judge through), None: not logged.
    ``dra_node`` tells whether NVIDIA's DRA driver rather than the device plugin hands
    out the GPUs (:class:`~gfd.health.dra_node.DraNodeWatch`, shared with the label mode;
    None: no API to read the driver's ResourceSlices from). ``events``: the Xid events
    and how events are judged (:class:`EventRules`); ``pcie``: the PCIe link's rules
    (:class:`PcieRules`).
    """

    sysfs_root: Path
    mig_strategy: str = "none"
    sharing: Sharing | None = None
    grace_period: float = DEFAULT_GRACE_PERIOD
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    log: Any = field(default=None, compare=False)
    dra_node: DraNodeWatch | None = field(default=None, compare=False)
    events: EventRules = DEFAULT_EVENT_RULES
    pcie: PcieRules = DEFAULT_PCIE_RULES


@frozen_dataclass
class Observation:
    """What a check is handed each cycle.

    ``facts`` is None when the read failed with ``error``; ``node`` is the Node object
    the node sink read, handed only to a check that :attr:`~Check.needs_node` (and such
    a check does not run in a cycle without one); ``gpus`` names GPUs in messages.
    """

    facts: NodeFacts | None
    error: GfdError | None
    node: Mapping[str, Any] | None
    gpus: GpuDirectory


class Check(Protocol):
    """One GPU health check, built once per configuration and run every cycle.

    A check lives across cycles, so what it must remember (per GPU: by UUID, which
    survives NVML renumbering; an onset for a grace period) it holds itself; on a
    reload its factory is handed the previous configuration's instance, and takes over
    what that one remembered. Its problems' messages name GPUs through
    :attr:`Observation.gpus` (index and bus id), and their reasons are among
    :attr:`reasons`.
    """

    @property
    def name(self) -> str:
        """The name users enable it by (:data:`gfd.config.values.HEALTH_CHECKS`)."""
        ...

    @property
    def reasons(self) -> tuple[str, ...]:
        """The condition reasons its problems give, most urgent first."""
        ...

    @property
    def needs_node(self) -> bool:
        """It judges the Node object (an API check): it runs only in a cycle that has one."""
        ...

    def observe(self, seen: Observation) -> CheckResult:
        """This cycle's result; :data:`UNKNOWN` when ``seen`` cannot decide it."""
        ...


class CheckFactory(Protocol):
    """A check as the registry holds it (its class): named, and built per configuration."""

    @property
    def name(self) -> str: ...

    @property
    def reasons(self) -> tuple[str, ...]: ...

    @property
    def needs_node(self) -> bool: ...

    def __call__(self, setup: CheckSetup, previous: Check | None = None) -> Check:
        """The check for ``setup``; ``previous`` is the instance the last configuration
        built under the same name, whose memory it takes over (None: none)."""
        ...
