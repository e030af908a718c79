"""The ``xid`` fault: a critical Xid error on a GPU, delivered as an NVML event.

After ``after_calls`` calls on the GPU, ``times`` (default 1) events of type
``nvmlEventTypeXidCriticalError`` with the Xid as their data happen on it: every event set
that records Xid events on that GPU then receives them (``nvmlEventSetWait_v2``); as in
NVML, a set registered later does not. With ``mig`` (a ``mig_devices[].index`` of the GPU)
the event names that MIG device's GPU and compute instance, as a driver in MIG mode
attributes an Xid to an instance; without, both are 0xFFFFFFFF (the whole GPU).

The Xid alone changes nothing else: an Xid 79 (fallen off the bus) whose GPU is gone too
is this fault with ``gpu_lost`` or ``gpu_vanished`` at the same ``after_calls``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, count, gpu_after_calls
from gfd.sim.faults.primitives import MAX_EVENTS, PostEvent, Primitive
from gfd.sim.gpu_health import EventType

#: Xids are small numbers (NVML reports 999 for one it does not know); the event's data
#: is 64 bits, but no Xid needs more than 32.
MAX_XID = 2**32 - 1


@frozen_dataclass
class CriticalXid:
    """After ``after_calls`` calls on GPU ``gpu``, ``times`` critical Xid ``xid`` events."""

    gpu: int
    xid: int
    after_calls: int
    times: int = 1
    #: ``mig_devices[].index`` of the GPU the Xid is attributed to; None: the whole GPU.
    mig: int | None = None


class CriticalXids(EntryKind[CriticalXid]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> CriticalXid:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "reports the Xid", extra=("xid", "times", "mig")
        )
        if "xid" not in fields:
            machine.fail(f"{path}.xid", "required: the Xid number (79: fallen off the bus)")
        xid = count(fields["xid"], machine, f"{path}.xid")
        if not 1 <= xid <= MAX_XID:
            machine.fail(f"{path}.xid", f"{xid} is not an Xid (1 to {MAX_XID})")
        times = 1
        if fields.get("times") is not None:
            times = count(fields["times"], machine, f"{path}.times")
            if not 1 <= times <= MAX_EVENTS:
                machine.fail(f"{path}.times", f"{times} is not 1 to {MAX_EVENTS} events")
        target = machine.gpus[gpu]
        mig = None
        if fields.get("mig") is not None:
            mig = count(fields["mig"], machine, f"{path}.mig")
            present = sorted(device.index for device in target.mig_devices)
            if mig not in present:
                machine.fail(
                    f"{path}.mig",
                    f"GPU {gpu} has no MIG device {mig} (its MIG devices: "
                    f"{', '.join(map(str, present)) or 'none'})",
                )
        return CriticalXid(gpu=gpu, xid=xid, after_calls=after_calls, times=times, mig=mig)

    def entry_to_yaml(self, entry: CriticalXid) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "gpu": entry.gpu,
            "xid": entry.xid,
            "after_calls": entry.after_calls,
            "times": entry.times,
        }
        if entry.mig is not None:
            fields["mig"] = entry.mig
        return fields

    def lower_entry(self, entry: CriticalXid) -> Iterator[Primitive]:
        yield PostEvent(
            gpu=entry.gpu,
            after_calls=entry.after_calls,
            event_type=EventType.XID_CRITICAL_ERROR,
            data=entry.xid,
            times=entry.times,
            mig=entry.mig,
        )


XID = CriticalXids()
