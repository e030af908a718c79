"""The generic fault records of the machine file: what every kind of fault is lowered to.

This module owns the small set of fault primitives the C library's one fault engine
(``sim_faults.c``) acts on, each a frozen dataclass that renders its machine-file record
(the format is documented once, in ``docs/simulator.md``, *The machine file*):

- :class:`FailCall` (``fault_error``): a call returns an NVML error;
- :class:`DelayCall` (``fault_delay``): a call takes a while before it answers;
- :class:`ChangeGpuState` (``fault_gpu_lost``, ``fault_gpu_vanished``): after N calls on a
  GPU it falls off the bus, or NVML stops enumerating it;
- :class:`TakeLinksDown` (``fault_nvlink_down``): after N calls on a GPU, links go inactive;
- :class:`FailInits` (``fault_driver_not_loaded``): the first N ``nvmlInit*`` calls fail.

A kind of fault whose effect is one of these needs no C: its module lowers each entry to
primitives. :func:`check_primitives` refuses what no machine can be, whatever kinds the
primitives came from (one GPU both lost and vanished).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gfd.sim.faults.parsing import FaultMachine

#: The longest delay (``SIM_MAX_DELAY_MS``): an hour is a hung driver already.
MAX_DELAY_SECONDS = 3600


def _optional(value: int | None) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True)
class FailCall:
    """``call`` returns ``code`` (on GPU ``gpu`` only, the first ``times`` matching calls)."""

    call: str
    code: int
    gpu: int | None
    times: int | None

    def record(self) -> str:
        return f"fault_error {self.call} {self.code} {_optional(self.gpu)} {_optional(self.times)}"


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class TakeLinksDown:
    """After ``after_calls`` calls on GPU ``gpu``, links ``links`` (None: all) are inactive."""

    gpu: int
    after_calls: int
    links: tuple[int, ...] | None

    def record(self) -> str:
        links = "-" if self.links is None else ",".join(str(link) for link in self.links)
        return f"fault_nvlink_down {self.gpu} {self.after_calls} {links}"


@dataclass(frozen=True)
class FailInits:
    """The first ``count`` ``nvmlInit*`` calls (all three together) return DRIVER_NOT_LOADED."""

    count: int

    def record(self) -> str:
        return f"fault_driver_not_loaded {self.count}"


#: Every machine-file fault record.
Primitive = FailCall | DelayCall | ChangeGpuState | TakeLinksDown | FailInits


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
