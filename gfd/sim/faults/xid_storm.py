"""The ``xid_storm`` fault: many critical Xids of one code on a GPU, spread over its calls.

From ``after_calls`` calls on the GPU, ``count`` events of type
``nvmlEventTypeXidCriticalError`` with ``xid`` as their data happen on it, one every
``every_calls`` calls (default 1: one with each call): the storm of an application's Xids
(13, 31, 43) a crash-looping job or a sick GPU sends. Each event reaches the event sets
recording Xids on that GPU when it happens, as an ``xid`` entry's do; spacing them keeps a
consumer that drains between calls from losing them to a full queue (a set queues
:data:`gfd.sim.faults.primitives.MAX_EVENTS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import MAX_AFTER_CALLS, FaultMachine, count, gpu_after_calls
from gfd.sim.faults.primitives import PostEvent, Primitive
from gfd.sim.faults.xid import MAX_XID
from gfd.sim.gpu_health import EventType

#: The most Xids one storm entry sends: far past any threshold worth setting, and few
#: enough records for the machine file.
MAX_STORM_XIDS = 1000


@frozen_dataclass
class XidStorm:
    """From ``after_calls`` calls on GPU ``gpu``, ``count`` Xid ``xid`` events, one every
    ``every_calls`` calls."""

    gpu: int
    xid: int
    after_calls: int
    count: int
    every_calls: int = 1


class XidStorms(EntryKind[XidStorm]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> XidStorm:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "reports the Xids", extra=("xid", "count", "every_calls")
        )
        if "xid" not in fields:
            machine.fail(f"{path}.xid", "required: the Xid number (13: graphics engine exception)")
        xid = count(fields["xid"], machine, f"{path}.xid")
        if not 1 <= xid <= MAX_XID:
            machine.fail(f"{path}.xid", f"{xid} is not an Xid (1 to {MAX_XID})")
        if "count" not in fields:
            machine.fail(f"{path}.count", "required: how many Xids the storm sends")
        total = count(fields["count"], machine, f"{path}.count")
        if not 1 <= total <= MAX_STORM_XIDS:
            machine.fail(f"{path}.count", f"{total} is not 1 to {MAX_STORM_XIDS} Xids")
        every = 1
        if fields.get("every_calls") is not None:
            every = count(fields["every_calls"], machine, f"{path}.every_calls")
            if every < 1:
                machine.fail(f"{path}.every_calls", "must be at least 1")
        if after_calls + (total - 1) * every > MAX_AFTER_CALLS:
            machine.fail(
                f"{path}.count",
                f"the last Xid would come after more calls than the machine file holds "
                f"({MAX_AFTER_CALLS})",
            )
        return XidStorm(gpu=gpu, xid=xid, after_calls=after_calls, count=total, every_calls=every)

    def entry_to_yaml(self, entry: XidStorm) -> dict[str, Any]:
        return {
            "gpu": entry.gpu,
            "xid": entry.xid,
            "after_calls": entry.after_calls,
            "count": entry.count,
            "every_calls": entry.every_calls,
        }

    def lower_entry(self, entry: XidStorm) -> Iterator[Primitive]:
        for n in range(entry.count):
            yield PostEvent(
                gpu=entry.gpu,
                after_calls=entry.after_calls + n * entry.every_calls,
                event_type=EventType.XID_CRITICAL_ERROR,
                data=entry.xid,
                times=1,
                mig=None,
            )


XID_STORM = XidStorms()
