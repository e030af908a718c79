"""How the fields of a ``faults:`` entry are read, and refused naming the file and the field.

This module owns what every kind of fault shares when it reads its YAML: the machine the
section is checked against (:class:`FaultMachine`: the profile's file name, for messages,
and its GPUs), and readers for the fields that recur (a mapping of known keys, a list of
entries, a count, a GPU index, ``after_calls``, an NVML call name or error code). Each
reader returns the value or raises :class:`gfd.facts.FactsError` with the field's path
(``faults.errors[0].call``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from gfd.base.frozen import frozen_dataclass
from gfd.facts import FactsError, Gpu
from gfd.sim.calls import EXPORTED_CALLS, NVML_ERROR_CODES, UNFAULTABLE_CALLS

#: The machine file's AFTER_CALLS is a 32-bit unsigned number.
MAX_AFTER_CALLS = 2**32 - 1


@frozen_dataclass
class FaultMachine:
    """The machine a ``faults:`` section is checked against."""

    #: The profile's file (or ``<profile>`` for one built in code), named in every error.
    source: str
    #: The profile's GPUs, in index order: a fault names one of them (and its links).
    gpus: Sequence[Gpu]

    def fail(self, path: str, problem: str) -> NoReturn:
        """Refuse the field at ``path``."""
        raise FactsError(self.source, path, problem)


def kind_of(value: Any) -> str:
    """What ``value`` is, in the words of an error message (``an integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def entries(value: Any, machine: FaultMachine, path: str) -> list[Any]:
    """A list (null: an empty one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        machine.fail(path, f"expected a list, got {kind_of(value)}")
    return value


def mapping(
    value: Any, machine: FaultMachine, path: str, known: tuple[str, ...]
) -> Mapping[str, Any]:
    """A mapping whose keys are all in ``known``."""
    if not isinstance(value, Mapping):
        machine.fail(path, f"expected a mapping, got {kind_of(value)}")
    for key in value:
        if key not in known:
            machine.fail(f"{path}.{key}", f"unknown field (expected one of: {', '.join(known)})")
    return value


def count(value: Any, machine: FaultMachine, path: str) -> int:
    """A whole number, zero or more."""
    if isinstance(value, bool) or not isinstance(value, int):
        machine.fail(path, f"expected a count, got {kind_of(value)}")
    if value < 0:
        machine.fail(path, f"must not be negative, got {value}")
    return value


def flag(value: Any, machine: FaultMachine, path: str) -> bool:
    """true or false."""
    if not isinstance(value, bool):
        machine.fail(path, f"expected true or false, got {kind_of(value)}")
    return value


def gpu_index(value: Any, machine: FaultMachine, path: str) -> int:
    """The index of one of the machine's GPUs."""
    if isinstance(value, bool) or not isinstance(value, int):
        machine.fail(path, f"expected a GPU index, got {kind_of(value)}")
    if not 0 <= value < len(machine.gpus):
        machine.fail(path, f"GPU {value} does not exist (the machine has {len(machine.gpus)})")
    return value


def optional_gpu(fields: Mapping[str, Any], machine: FaultMachine, path: str) -> int | None:
    """``gpu`` if given (None: the fault is not limited to one GPU)."""
    if fields.get("gpu") is None:
        return None
    return gpu_index(fields["gpu"], machine, f"{path}.gpu")


def optional_times(fields: Mapping[str, Any], machine: FaultMachine, path: str) -> int | None:
    """``times`` if given (None: every matching call)."""
    if fields.get("times") is None:
        return None
    return count(fields["times"], machine, f"{path}.times")


def gpu_after_calls(
    item: Any, machine: FaultMachine, path: str, what: str, extra: tuple[str, ...] = ()
) -> tuple[Mapping[str, Any], int, int]:
    """The fields, ``gpu`` and ``after_calls`` of an entry about the GPU that ``what`` (``is lost``)."""
    fields = mapping(item, machine, path, ("gpu", "after_calls", *extra))
    if "gpu" not in fields:
        machine.fail(f"{path}.gpu", f"required: the index of the GPU that {what}")
    if "after_calls" not in fields:
        machine.fail(f"{path}.after_calls", "required: calls the GPU answers before the fault")
    after_calls = count(fields["after_calls"], machine, f"{path}.after_calls")
    if after_calls > MAX_AFTER_CALLS:
        machine.fail(
            f"{path}.after_calls",
            f"{after_calls} is more than the machine file holds ({MAX_AFTER_CALLS})",
        )
    return fields, gpu_index(fields["gpu"], machine, f"{path}.gpu"), after_calls


def once_per_gpu(machine: FaultMachine, path: str, gpus: Sequence[int]) -> None:
    """Refuse a GPU that two entries of the list at ``path`` name."""
    seen: set[int] = set()
    for i, gpu in enumerate(gpus):
        if gpu in seen:
            machine.fail(f"{path}[{i}].gpu", f"GPU {gpu} is listed twice")
        seen.add(gpu)


def call_name(fields: Mapping[str, Any], machine: FaultMachine, path: str) -> str:
    """``call``: an NVML function the simulator exports that can fail."""
    call = fields.get("call")
    if not isinstance(call, str):
        machine.fail(f"{path}.call", "required: the name of an NVML function")
    if call not in EXPORTED_CALLS or call in UNFAULTABLE_CALLS:
        suggestions = difflib.get_close_matches(call, EXPORTED_CALLS, n=3)
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        machine.fail(
            f"{path}.call",
            f"{call!r} is not an NVML function the simulator serves "
            f"(use the exact symbol, e.g. nvmlDeviceGetCount_v2){hint}",
        )
    return call


def error_code(value: Any, machine: FaultMachine, path: str) -> int:
    """An NVML error: a name (``NVML_ERROR_`` optional, any case) or a code."""
    if isinstance(value, str):
        name = value if value.startswith("NVML_ERROR_") else f"NVML_ERROR_{value}"
        if name.upper() in NVML_ERROR_CODES:
            return NVML_ERROR_CODES[name.upper()]
        machine.fail(
            path, f"{value!r} is not an NVML error name (e.g. NVML_ERROR_UNKNOWN, GPU_IS_LOST)"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0 or value > 0x7FFFFFFF:
            machine.fail(path, f"{value} is not an NVML error code (1..2147483647)")
        return value
    machine.fail(path, f"expected an NVML error name or code, got {kind_of(value)}")


def error_name(code: int) -> str | int:
    """The name of an NVML error code, or the code when it has none."""
    for name, known in NVML_ERROR_CODES.items():
        if known == code:
            return name
    return code


def ranges(values: Sequence[int]) -> str:
    """``0-5,8`` for sorted ``[0, 1, 2, 3, 4, 5, 8]``."""
    parts: list[str] = []
    start = previous = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(parts)
