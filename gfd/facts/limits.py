"""Bounds on the facts of one node, and the checks that refuse an absurd document early.

This module owns the limits (documented in ``docs/facts.md``, "Limits") and two checks
that apply them before any work that grows with the input:

- :func:`check_document_bounds` walks a YAML or JSON document's parser events, without
  building a Python object of it, and counts the items of each bounded list; a
  10,000-GPU document is refused after one pass of the parser, never loaded.
- :func:`check_data_bounds` does the same on plain data already parsed (or built in
  code), before the facts model is built from it.

Every limit is far above real hardware, so that only input no node can produce is
refused: a real node's counts stay an order of magnitude below them. The work that
grows with the input (the reader's pairwise NVML calls, the topology matrix, the
simulator's sysfs tree) is quadratic in the GPUs, so an unbounded count turns a facts
file into minutes of work.

A violation is a :class:`FactsLimitError`: one line naming the file, the field, the
count and the limit. It is also a :class:`~gfd.base.errors.ConfigError`, so the command line
reports it as a usage error (exit 2), the input itself being beyond what gfd accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gfd.base.errors import ConfigError, FactsError
from gfd.base.frozen import frozen_dataclass

#: GPUs of one node. The largest single system image ships 16 (DGX-2 and HGX-2 boards;
#: PCIe servers reach 20); a GB200 NVL72 rack has 72, but each of its trays is a node of 4.
MAX_GPUS = 128
#: MIG devices of one GPU, and its MIG slots (``nvmlDeviceGetMaxMigDeviceCount``). MIG
#: splits a GPU into 7 compute slices, so no GPU has more than 7 MIG devices.
MAX_MIG_DEVICES = 16
#: NVLinks of one GPU: ``NVML_NVLINK_MAX_LINKS`` of current ``nvml.h`` (36), twice NVLink
#: 5's 18 links per GPU (B200, GB200).
MAX_NVLINKS = 36
#: Entries of ``pci_pairs`` and of ``nvlink_p2p``: one per pair of GPUs at most.
MAX_GPU_PAIRS = MAX_GPUS * (MAX_GPUS - 1) // 2


@frozen_dataclass
class MachineLimits:
    """What the NVML reader refuses to read past. A parameter of the reader, so a test can
    hold a real (simulated) machine to a lower limit instead of faking NVML's counts."""

    gpus: int = MAX_GPUS
    mig_devices: int = MAX_MIG_DEVICES
    nvlinks: int = MAX_NVLINKS


MACHINE_LIMITS = MachineLimits()

#: The bounded lists, by their place in a facts document ("*": any item of a list), with
#: their limit and what they count.
_BOUNDED: dict[tuple[str, ...], tuple[int, str]] = {
    ("gpus",): (MAX_GPUS, "GPUs"),
    ("pci_pairs",): (MAX_GPU_PAIRS, "GPU pairs"),
    ("nvlink_p2p",): (MAX_GPU_PAIRS, "GPU pairs"),
    ("gpus", "*", "nvlinks"): (MAX_NVLINKS, "NVLinks"),
    ("gpus", "*", "mig_devices"): (MAX_MIG_DEVICES, "MIG devices"),
}
#: Parser events between two looks for a list already over its limit.
_LOOK_EVERY = 16_384
#: Parser events a list over its limit is still counted for (about 0.2 s), so that the
#: error names its length; a longer one is refused with what was counted by then.
_COUNT_BEYOND_LIMIT = 200_000
#: Why each limit is what it is, for the error line.
_WHY = {
    "GPUs": "the largest nodes have 16 to 20; a GB200 NVL72 tray has 4",
    "GPU pairs": f"one per pair of {MAX_GPUS} GPUs",
    "NVLinks": "NVML_NVLINK_MAX_LINKS; NVLink 5 has 18 per GPU",
    "MIG devices": "MIG has 7 compute slices per GPU",
}


class FactsLimitError(FactsError, ConfigError):
    """A facts document has more of something than any real node can have (a machine that
    reports such counts is :class:`gfd.nvml.reader.NvmlBeyondLimits`)."""


def limit_problem(count: int, limit: int, what: str, *, at_least: bool = False) -> str:
    """The problem text of a count over its limit: ``10000 GPUs, more than the limit of 128 (...)``.

    ``at_least``: counting stopped before the end of the list.
    """
    counted = f"at least {count}" if at_least else str(count)
    return f"{counted} {what}, more than the limit of {limit} ({_WHY[what]})"


def _refuse(source: str, path: str, count: int, limit: int, what: str) -> FactsLimitError:
    return FactsLimitError(source, path, limit_problem(count, limit, what))


def check_data_bounds(data: Any, source: str) -> None:
    """Refuse plain facts data (``facts_to_dict`` form) whose lists exceed a limit.

    Anything that is not of the expected shape is left to the model's own checks.
    """
    if not isinstance(data, Mapping):
        return
    for (key,), (limit, what) in ((k, v) for k, v in _BOUNDED.items() if len(k) == 1):
        value = data.get(key)
        if isinstance(value, list) and len(value) > limit:
            raise _refuse(source, key, len(value), limit, what)
    gpus = data.get("gpus")
    if not isinstance(gpus, list):
        return
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, Mapping):
            continue
        for key in ("nvlinks", "mig_devices"):
            value = gpu.get(key)
            limit, what = _BOUNDED[("gpus", "*", key)]
            if isinstance(value, list) and len(value) > limit:
                raise _refuse(source, f"gpus[{i}].{key}", len(value), limit, what)


class _Frame:
    """An open collection of the document being walked."""

    __slots__ = ("anchor", "bound", "count", "is_mapping", "key", "name", "path", "want_key")

    def __init__(self, is_mapping: bool, path: tuple[str, ...] | None, name: str) -> None:
        self.is_mapping = is_mapping
        #: The place of this collection (None: deeper than any bounded list).
        self.path = path
        #: Its field path for the error line (``gpus[3].nvlinks``).
        self.name = name
        self.bound = _BOUNDED.get(path) if path is not None and not is_mapping else None
        self.count = 0
        self.want_key = True
        self.key: str | None = None
        self.anchor: str | None = None


def check_document_bounds(text: str, source: str) -> None:
    """Refuse a YAML/JSON facts document whose bounded lists hold too many items.

    One pass over the parser's events (libyaml's when PyYAML has it), building nothing:
    fast enough that a document of millions of items is refused in a fraction of a
    second. Aliases count what their anchor holds. A document the parser rejects is left
    to the loader, which reports it with a line and column.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    scalar, alias = yaml.ScalarEvent, yaml.AliasEvent
    sequence_start, mapping_start = yaml.SequenceStartEvent, yaml.MappingStartEvent
    collection_end = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    #: Items of each anchored list, for aliases of it.
    anchored: dict[str, int] = {}
    stack: list[_Frame] = []
    next_look = _LOOK_EVERY
    #: The event after which a list seen over its limit stops being counted.
    give_up: int | None = None
    event: Any  # typed stubs know only the base class; each kind has its fields
    try:
        for n, event in enumerate(yaml.parse(text, Loader=loader)):
            kind = type(event)
            if kind is scalar:
                # The most frequent event, handled here rather than in a call: a list
                # counts it, a mapping takes it as a key (naming the next value) or value.
                if stack:
                    parent = stack[-1]
                    if not parent.is_mapping:
                        parent.count += 1
                    elif parent.want_key:
                        parent.want_key = False
                        parent.key = event.value
                    else:
                        parent.want_key = True
            elif kind in collection_end:
                frame = stack.pop()
                if frame.anchor is not None and not frame.is_mapping:
                    anchored[frame.anchor] = frame.count
                if frame.bound is not None and frame.count > frame.bound[0]:
                    raise _refuse(source, frame.name, frame.count, *frame.bound)
            elif kind is sequence_start or kind is mapping_start:
                frame = _Frame(kind is mapping_start, *_place(stack))
                frame.anchor = event.anchor
                stack.append(frame)
            elif kind is alias:
                path, name = _place(stack)
                bound = _BOUNDED.get(path) if path is not None else None
                count = anchored.get(event.anchor or "")
                if bound is not None and count is not None and count > bound[0]:
                    raise _refuse(source, name, count, *bound)
            # Stream and document markers carry nothing to count.
            if n >= next_look:
                # A list over its limit is refused at its end, with its length; one so
                # long that counting it would take more than a fraction of a second is
                # refused with what was counted so far.
                next_look += _LOOK_EVERY
                over = next((f for f in stack if f.bound and f.count > f.bound[0]), None)
                if over is not None and over.bound is not None:
                    if give_up is None:
                        give_up = n + _COUNT_BEYOND_LIMIT
                    elif n >= give_up:
                        raise FactsLimitError(
                            source,
                            over.name,
                            limit_problem(over.count, *over.bound, at_least=True),
                        )
    except yaml.YAMLError:
        return


def _place(stack: list[_Frame]) -> tuple[tuple[str, ...] | None, str]:
    """Where a collection or alias that starts now sits: its place pattern and field path.

    Updates the enclosing collection as a scalar does (see :func:`check_document_bounds`);
    a collection used as a mapping key names nothing.
    """
    if not stack:
        return (), ""
    parent = stack[-1]
    if parent.is_mapping:
        if parent.want_key:
            parent.want_key = False
            parent.key = None
            return None, parent.name
        parent.want_key = True
        key = parent.key
        if parent.path is None or key is None or len(parent.path) >= 3:
            return None, parent.name
        name = f"{parent.name}.{key}" if parent.name else key
        return (*parent.path, key), name
    parent.count += 1
    if parent.path is None or len(parent.path) >= 3:
        return None, parent.name
    return (*parent.path, "*"), f"{parent.name}[{parent.count - 1}]"
