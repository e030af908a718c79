"""The generic fault records of the machine file: what every kind of fault is lowered to.

This module owns the small set of fault primitives the C library's one fault engine
(``sim_faults.c``) acts on, each a frozen dataclass that renders its machine-file record
(the format is documented once, in ``docs/simulator.md``, *The machine file*):

- :class:`FailCall` (``fault_error``): a call returns an NVML error;
- :class:`DelayCall` (``fault_delay``): a call takes a while before it answers;
- :class:`ChangeGpuState` (``fault_gpu_lost``, ``fault_gpu_vanished``): after N calls on a
  GPU it falls off the bus, or NVML stops enumerating it;
- :class:`TakeLinksDown` (``fault_nvlink_down``): after N calls on a GPU, links go inactive;
- :class:`FailInits` (``fault_driver_not_loaded``): the first N ``nvmlInit*`` calls fail;
- :class:`SetValue` (``fault_set``): after N calls on a GPU, one of its values
  (:class:`gfd.sim.gpu_health.GpuValue`) reads as given, or NOT_SUPPORTED;
- :class:`RaiseValue` (``fault_rise``): after N calls on a GPU, a count of it rises with
  every further call on it;
- :class:`PostEvent` (``fault_event``): after N calls on a GPU, events happen on it (for the
  event sets recording that type then).

A kind of fault whose effect is one of these needs no C: its module lowers each entry to
primitives. :func:`check_primitives` refuses what no machine can be, whatever kinds the
primitives came from (one GPU both lost and vanished).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.parsing import FaultMachine
from gfd.sim.gpu_health import EventType, GpuValue

#: The longest delay (``SIM_MAX_DELAY_MS``): an hour is a hung driver already.
MAX_DELAY_SECONDS = 3600
#: The most events one ``fault_event`` record posts (``SIM_MAX_EVENTS``, a set's queue).
MAX_EVENTS = 64


def _optional(value: int | None) -> str:
    return "-" if value is None else str(value)


@frozen_dataclass
class FailCall:
    """``call`` returns ``code`` (on GPU ``gpu`` only, the first ``times`` matching calls)."""

    call: str
    code: int
    gpu: int | None
    times: int | None

    def record(self) -> str:
        return f"fault_error {self.call} {self.code} {_optional(self.gpu)} {_optional(self.times)}"


@frozen_dataclass
class DelayCall:
    """``call`` sleeps ``milliseconds`` before it answers (same matching as :class:`FailCall`)."""

    call: str
    milliseconds: int
    gpu: int | None
    times: int | None

    def record(self) -> str:
        return (
            f"fault_delay {self.call} {self.milliseconds} {_optional(self.gpu)} "
            f"{_optional(self.times)}"
        )


@frozen_dataclass
class ChangeGpuState:
    """After ``after_calls`` calls on GPU ``gpu``, it is ``lost`` or has ``vanished``, for good."""

    gpu: int
    after_calls: int
    state: Literal["lost", "vanished"]

    def record(self) -> str:
        return f"fault_gpu_{self.state} {self.gpu} {self.after_calls}"

    def already(self) -> str:
        """What a GPU given this state already is, for a second state refused."""
        return "is already lost" if self.state == "lost" else "already vanishes"


@frozen_dataclass
class TakeLinksDown:
    """After ``after_calls`` calls on GPU ``gpu``, links ``links`` (None: all) are inactive."""

    gpu: int
    after_calls: int
    links: tuple[int, ...] | None

    def record(self) -> str:
        links = "-" if self.links is None else ",".join(str(link) for link in self.links)
        return f"fault_nvlink_down {self.gpu} {self.after_calls} {links}"


@frozen_dataclass
class FailInits:
    """The first ``count`` ``nvmlInit*`` calls (all three together) return DRIVER_NOT_LOADED."""

    count: int

    def record(self) -> str:
        return f"fault_driver_not_loaded {self.count}"


@frozen_dataclass
class SetValue:
    """After ``after_calls`` calls on GPU ``gpu``, its ``value`` reads ``to`` (None: NOT_SUPPORTED)."""

    gpu: int
    after_calls: int
    value: GpuValue
    to: int | None

    def record(self) -> str:
        return f"fault_set {self.gpu} {self.after_calls} {self.value} {_optional(self.to)}"


@frozen_dataclass
class RaiseValue:
    """After ``after_calls`` calls on GPU ``gpu``, each further call on it adds ``per_call``
    to its count ``value`` (which stops at its largest value)."""

    gpu: int
    after_calls: int
    value: GpuValue
    per_call: int

    def record(self) -> str:
        return f"fault_rise {self.gpu} {self.after_calls} {self.value} {self.per_call}"


@frozen_dataclass
class PostEvent:
    """After ``after_calls`` calls on GPU ``gpu``, ``times`` events of ``event_type`` with
    ``data`` happen on it (on its MIG device ``mig``: the event names its instances)."""

    gpu: int
    after_calls: int
    event_type: EventType
    data: int
    times: int
    #: ``mig_devices[].index`` of the GPU, or None for the whole GPU.
    mig: int | None

    def record(self) -> str:
        return (
            f"fault_event {self.gpu} {self.after_calls} {int(self.event_type):#x} {self.data} "
            f"{self.times} {_optional(self.mig)}"
        )


#: Every machine-file fault record.
Primitive = (
    FailCall
    | DelayCall
    | ChangeGpuState
    | TakeLinksDown
    | FailInits
    | SetValue
    | RaiseValue
    | PostEvent
)


def check_primitives(lowered: Sequence[tuple[str, Primitive]], machine: FaultMachine) -> None:
    """Refuse lowered faults that contradict each other; each comes with its entry's path."""
    states: dict[int, tuple[str, ChangeGpuState]] = {}
    for path, primitive in lowered:
        if not isinstance(primitive, ChangeGpuState):
            continue
        earlier = states.setdefault(primitive.gpu, (path, primitive))
        if earlier[1] is not primitive:
            machine.fail(
                f"{path}.gpu",
                f"GPU {primitive.gpu} {earlier[1].already()} by {earlier[0]}; a GPU is either "
                "lost (still counted) or vanished (no longer enumerated)",
            )
