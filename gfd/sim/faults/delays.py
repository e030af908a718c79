"""The ``delays`` fault: a named NVML call takes a while before it answers.

A driver slow to initialise, a GPU whose calls hang: ``seconds`` (0.001 to an hour, kept
to the millisecond), optionally only for calls on one GPU and only the first ``times``
matching calls. A signal does not cut the wait short, as it does not end a hung driver's
call: what a process does then is what it would do on a real node. A delayed call then
returns what it would have, an injected error included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import (
    FaultMachine,
    call_name,
    mapping,
    optional_gpu,
    optional_times,
)
from gfd.sim.faults.primitives import MAX_DELAY_SECONDS, DelayCall, Primitive


@frozen_dataclass
class CallDelay:
    """``call`` takes ``seconds`` before it answers (for GPU ``gpu`` only, the first ``times`` calls)."""

    call: str
    #: Rounded to milliseconds in the machine file; at least 1 ms.
    seconds: float
    #: None: every matching call, whatever GPU it names (system calls included).
    gpu: int | None = None
    #: None: every matching call; N: only the first N.
    times: int | None = None


class CallDelays(EntryKind[CallDelay]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> CallDelay:
        fields = mapping(item, machine, path, ("call", "seconds", "gpu", "times"))
        call = call_name(fields, machine, path)
        seconds = fields.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            machine.fail(f"{path}.seconds", "required: how long the call takes, in seconds")
        if not 0.001 <= seconds <= MAX_DELAY_SECONDS:
            machine.fail(
                f"{path}.seconds", f"{seconds} is not between 0.001 and {MAX_DELAY_SECONDS}"
            )
        return CallDelay(
            call=call,
            seconds=seconds,
            gpu=optional_gpu(fields, machine, path),
            times=optional_times(fields, machine, path),
        )

    def entry_to_yaml(self, entry: CallDelay) -> dict[str, Any]:
        fields: dict[str, Any] = {"call": entry.call, "seconds": entry.seconds}
        if entry.gpu is not None:
            fields["gpu"] = entry.gpu
        if entry.times is not None:
            fields["times"] = entry.times
        return fields

    def lower_entry(self, entry: CallDelay) -> Iterator[Primitive]:
        milliseconds = max(1, round(entry.seconds * 1000))
        yield DelayCall(
            call=entry.call, milliseconds=milliseconds, gpu=entry.gpu, times=entry.times
        )


DELAYS = CallDelays()
