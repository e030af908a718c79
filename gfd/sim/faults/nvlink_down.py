"""The ``nvlink_down`` fault: NVLinks of a GPU go inactive.

After ``after_calls`` calls on the GPU, the listed links (``nvlinks[].index`` values of
that GPU, each once; all of them when ``links`` is omitted) read as inactive links do.
A GPU is listed once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import (
    FaultMachine,
    entries,
    gpu_after_calls,
    kind_of,
    once_per_gpu,
    ranges,
)
from gfd.sim.faults.primitives import Primitive, TakeLinksDown


@frozen_dataclass
class NvLinkDown:
    """After ``after_calls`` calls on GPU ``gpu``, its links ``links`` go inactive for good."""

    gpu: int
    after_calls: int
    #: Link indices (``nvlinks[].index``) of the GPU; None: every link it has.
    links: tuple[int, ...] | None = None


class LinksDown(EntryKind[NvLinkDown]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> NvLinkDown:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "loses links", extra=("links",)
        )
        present = [link.index for link in machine.gpus[gpu].nvlinks]
        if not present:
            machine.fail(f"{path}.gpu", f"GPU {gpu} has no NVLinks to take down")
        value = fields.get("links")
        if value is None:
            return NvLinkDown(gpu=gpu, after_calls=after_calls)
        listed = entries(value, machine, f"{path}.links")
        if not listed:
            machine.fail(f"{path}.links", "names no link (omit links to take every link down)")
        links: list[int] = []
        for j, link in enumerate(listed):
            where = f"{path}.links[{j}]"
            if isinstance(link, bool) or not isinstance(link, int):
                machine.fail(where, f"expected a link index, got {kind_of(link)}")
            if link not in present:
                machine.fail(
                    where, f"GPU {gpu} has no link {link} (its links: {ranges(sorted(present))})"
                )
            if link in links:
                machine.fail(where, f"link {link} is listed twice")
            links.append(link)
        return NvLinkDown(gpu=gpu, after_calls=after_calls, links=tuple(links))

    def check_entries(
        self, parsed: tuple[NvLinkDown, ...], path: str, machine: FaultMachine
    ) -> None:
        once_per_gpu(machine, path, [entry.gpu for entry in parsed])

    def entry_to_yaml(self, entry: NvLinkDown) -> dict[str, Any]:
        fields: dict[str, Any] = {"gpu": entry.gpu, "after_calls": entry.after_calls}
        if entry.links is not None:
            fields["links"] = list(entry.links)
        return fields

    def lower_entry(self, entry: NvLinkDown) -> Iterator[Primitive]:
        yield TakeLinksDown(gpu=entry.gpu, after_calls=entry.after_calls, links=entry.links)


NVLINK_DOWN = LinksDown()
