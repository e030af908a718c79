"""Reading back what gfd writes, which only the tests do (the product code never imports this).

gfd writes facts (``gfd facts``, :func:`gfd.facts.dump_facts`) and cpulists
(:func:`gfd.facts.cpulist_from_ids`) but reads facts only as simulator profiles
(:func:`gfd.sim.load_profile`). The tests read both back to hold the writing to a round
trip, through the product's own steps: the bounded file read, the document bound, the
parse and the checked build. They also look up one GPU pair's PCIe level, which the
product only ever reads as the whole list (the topology builder).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gfd.facts import (
    DERIVED_KEY,
    NodeFacts,
    PciLevel,
    facts_from_dict,
    parse_document,
    read_facts_text,
)
from gfd.facts.limits import check_document_bounds


def load_facts_text(text: str, source: str, extra_keys: frozenset[str] = frozenset()) -> NodeFacts:
    """Parse YAML or JSON facts text. Top-level ``extra_keys`` are ignored (e.g. ``faults``).

    A document with more GPUs (or MIG devices, NVLinks, pairs) than a node can have is
    refused before it is parsed into objects (:mod:`gfd.facts.limits`).
    """
    check_document_bounds(text, source)
    data = parse_document(text, source)
    if isinstance(data, Mapping):
        # ``derived`` (what ``gfd facts`` computes from the facts, e.g. the topology) is output only.
        ignored = extra_keys | {DERIVED_KEY}
        data = {k: v for k, v in data.items() if k not in ignored}
    return facts_from_dict(data, source)


def load_facts(path: str | Path, extra_keys: frozenset[str] = frozenset()) -> NodeFacts:
    """Load a facts file (YAML or JSON)."""
    return load_facts_text(read_facts_text(path), str(path), extra_keys)


def cpulist_to_ids(cpulist: str) -> list[int]:
    """CPU ids of a cpulist: ``0-2,5`` → ``[0, 1, 2, 5]``."""
    ids: list[int] = []
    for part in filter(None, cpulist.split(",")):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def pci_level(facts: NodeFacts, a: int, b: int) -> PciLevel | None:
    """Common-ancestor level of two GPU indices of ``facts`` (order does not matter)."""
    lo, hi = min(a, b), max(a, b)
    for pair in facts.pci_pairs:
        if pair.a == lo and pair.b == hi:
            return pair.level
    return None
