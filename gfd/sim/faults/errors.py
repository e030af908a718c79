"""The ``errors`` fault: a named NVML call returns an NVML error.

Optionally only for calls on one GPU (any GPU of a pair call) and only the first ``times``
matching calls. An entry without ``gpu`` also matches calls that name no GPU (system
calls, ``nvmlInit*``). Entries are tried in order; the first that matches wins.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import (
    FaultMachine,
    call_name,
    error_code,
    error_name,
    mapping,
    optional_gpu,
    optional_times,
)
from gfd.sim.faults.primitives import FailCall, Primitive


@frozen_dataclass
class CallError:
    """``call`` returns NVML error ``code`` (for GPU ``gpu`` only, the first ``times`` calls)."""

    call: str
    code: int
    #: None: every matching call, whatever GPU it names (system calls included).
    gpu: int | None = None
    #: None: every matching call; N: only the first N.
    times: int | None = None


class CallErrors(EntryKind[CallError]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> CallError:
        fields = mapping(item, machine, path, ("call", "error", "gpu", "times"))
        call = call_name(fields, machine, path)
        if "error" not in fields:
            machine.fail(f"{path}.error", "required: an NVML error name or code")
        code = error_code(fields["error"], machine, f"{path}.error")
        return CallError(
            call=call,
            code=code,
            gpu=optional_gpu(fields, machine, path),
            times=optional_times(fields, machine, path),
        )

    def entry_to_yaml(self, entry: CallError) -> dict[str, Any]:
        fields: dict[str, Any] = {"call": entry.call, "error": error_name(entry.code)}
        if entry.gpu is not None:
            fields["gpu"] = entry.gpu
        if entry.times is not None:
            fields["times"] = entry.times
        return fields

    def lower_entry(self, entry: CallError) -> Iterator[Primitive]:
        yield FailCall(call=entry.call, code=entry.code, gpu=entry.gpu, times=entry.times)


ERRORS = CallErrors()
