"""What a kind of simulator fault is: the contract each module under ``gfd/sim/faults/`` keeps.

This module owns :class:`FaultKind` (one key of a profile's ``faults:`` section: read its
YAML value, write it back, lower it to machine-file primitives), :class:`EntryKind` (the
usual shape, a list of mappings), and :func:`registered`, the one line with which a kind
joins :class:`gfd.sim.faults.Faults`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from gfd.sim.faults.parsing import FaultMachine, entries
from gfd.sim.faults.primitives import Primitive

T = TypeVar("T")
E = TypeVar("E")

#: The key of a ``Faults`` field's metadata that holds its kind.
KIND_METADATA = "gfd.sim.fault_kind"


class FaultKind(ABC, Generic[T]):
    """One key of the ``faults:`` section, whose parsed value is a ``T``."""

    @abstractmethod
    def empty(self) -> T:
        """The value when the profile does not name this kind: no fault."""

    @abstractmethod
    def parse(self, value: Any, path: str, machine: FaultMachine) -> T:
        """The value from its YAML form at ``path`` (``faults.errors``); FactsError if wrong."""

    @abstractmethod
    def to_yaml(self, value: T) -> Any:
        """The YAML form of ``value`` (``parse`` reads it back as it was)."""

    @abstractmethod
    def lower(self, value: T) -> Iterator[tuple[str, Primitive]]:
        """The primitives ``value`` stands for, each with the path of its entry under this
        kind's path (``[2]``; ``""`` for a kind of one value)."""


class EntryKind(FaultKind[tuple[E, ...]]):
    """A kind whose value is a list of entries, each a mapping read into an ``E``."""

    def empty(self) -> tuple[E, ...]:
        return ()

    def parse(self, value: Any, path: str, machine: FaultMachine) -> tuple[E, ...]:
        parsed = tuple(
            self.parse_entry(item, f"{path}[{i}]", machine)
            for i, item in enumerate(entries(value, machine, path))
        )
        self.check_entries(parsed, path, machine)
        return parsed

    def to_yaml(self, value: tuple[E, ...]) -> list[dict[str, Any]]:
        return [self.entry_to_yaml(entry) for entry in value]

    def lower(self, value: tuple[E, ...]) -> Iterator[tuple[str, Primitive]]:
        for i, entry in enumerate(value):
            for primitive in self.lower_entry(entry):
                yield f"[{i}]", primitive

    @abstractmethod
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> E:
        """One entry from its YAML mapping at ``path`` (``faults.errors[0]``)."""

    @abstractmethod
    def entry_to_yaml(self, entry: E) -> dict[str, Any]:
        """The YAML mapping of one entry."""

    @abstractmethod
    def lower_entry(self, entry: E) -> Iterator[Primitive]:
        """The primitives one entry stands for."""

    def check_entries(self, parsed: tuple[E, ...], path: str, machine: FaultMachine) -> None:
        """Refuse entries that contradict each other (by default, none do)."""


def registered(kind: FaultKind[T]) -> T:
    """A field of ``Faults`` served by ``kind``: its default is no fault of that kind."""
    return dataclasses.field(default=kind.empty(), metadata={KIND_METADATA: kind})
