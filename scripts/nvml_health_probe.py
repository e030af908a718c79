"""Ask a real NVIDIA driver every NVML question gfd's GPU health checks ask, and time it.

Run on a machine with a real GPU and driver (never in CI): prints one JSON document with,
for each GPU, each memory-health call's answer (or the NVML error it returned) and its
median latency, and for the Xid event API: the supported event types, whether critical Xid
events can be registered, how long ``nvmlEventSetWait_v2`` takes to time out, and whether
another thread's NVML calls are slowed while one thread waits (the design of the Xid
watcher depends on that answer). Nothing here is needed at run time; the answers are kept
as evidence under ``tests/records/real-gpu/`` (docs/testing.md). Last, ``argument_edges``:
how the driver answers odd arguments and set counts the simulator copies
(``docs/simulator.md``, "Event sets").

    python scripts/nvml_health_probe.py [--repeat N] > probe.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml


def error_name(exc: pynvml.NVMLError) -> str:
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == exc.value:
            return name
    return f"NVML error {exc.value}"


def plain(value: Any) -> Any:
    """A JSON form of what pynvml returned (ctypes structures become mappings)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: plain(getattr(value, name)) for name, *_ in fields}
    return repr(value)


def timed(call: Callable[[], Any], repeat: int) -> dict[str, Any]:
    """One answer and the median latency over ``repeat`` calls, in microseconds."""
    try:
        answer: dict[str, Any] = {"value": plain(call())}
    except pynvml.NVMLError as exc:
        answer = {"error": error_name(exc)}
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        with contextlib.suppress(pynvml.NVMLError):
            call()
        samples.append((time.perf_counter() - start) * 1e6)
    answer["median_us"] = round(statistics.median(samples), 2)
    answer["max_us"] = round(max(samples), 2)
    return answer


def memory_health(handle: Any, repeat: int) -> dict[str, Any]:
    unc = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    cor = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    calls: dict[str, Callable[[], Any]] = {
        "nvmlDeviceGetEccMode": lambda: pynvml.nvmlDeviceGetEccMode(handle),
        "nvmlDeviceGetTotalEccErrors(uncorrected,volatile)": lambda: (
            pynvml.nvmlDeviceGetTotalEccErrors(handle, unc, pynvml.NVML_VOLATILE_ECC)
        ),
        "nvmlDeviceGetTotalEccErrors(uncorrected,aggregate)": lambda: (
            pynvml.nvmlDeviceGetTotalEccErrors(handle, unc, pynvml.NVML_AGGREGATE_ECC)
        ),
        "nvmlDeviceGetTotalEccErrors(corrected,volatile)": lambda: (
            pynvml.nvmlDeviceGetTotalEccErrors(handle, cor, pynvml.NVML_VOLATILE_ECC)
        ),
        "nvmlDeviceGetRemappedRows": lambda: pynvml.nvmlDeviceGetRemappedRows(handle),
        "nvmlDeviceGetRowRemapperHistogram": lambda: pynvml.nvmlDeviceGetRowRemapperHistogram(
            handle
        ),
        "nvmlDeviceGetRetiredPages(double_bit)": lambda: pynvml.nvmlDeviceGetRetiredPages(
            handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        ),
        "nvmlDeviceGetRetiredPages(multiple_single_bit)": lambda: pynvml.nvmlDeviceGetRetiredPages(
            handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        ),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda: (
            pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        ),
        "nvmlDeviceGetSupportedEventTypes": lambda: pynvml.nvmlDeviceGetSupportedEventTypes(handle),
    }
    return {name: timed(call, repeat) for name, call in calls.items()}


def sysfs_numa_node(bus_id: str) -> str:
    """The PCI device's ``numa_node`` as sysfs shows it (NVML's 8-digit domain cut to 4)."""
    domain, rest = bus_id.split(":", 1)
    path = f"/sys/bus/pci/devices/{domain[-4:].lower()}:{rest.lower()}/numa_node"
    try:
        with open(path, encoding="ascii") as attribute:
            return attribute.read().strip()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def event_api(handles: list[Any]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    try:
        event_set = pynvml.nvmlEventSetCreate()
    except pynvml.NVMLError as exc:
        return {"nvmlEventSetCreate": {"error": error_name(exc)}}
    try:
        registered = []
        for index, handle in enumerate(handles):
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                )
                registered.append({"gpu": index, "registered": True})
            except pynvml.NVMLError as exc:
                registered.append({"gpu": index, "error": error_name(exc)})
        report["register_xid_critical"] = registered
        waits = []
        for timeout_ms in (0, 50, 200, 1000):
            start = time.perf_counter()
            try:
                data = pynvml.nvmlEventSetWait_v2(event_set, timeout_ms)
                outcome: dict[str, Any] = {"event": plain(data)}
            except pynvml.NVMLError as exc:
                outcome = {"error": error_name(exc)}
            outcome["timeout_ms"] = timeout_ms
            outcome["elapsed_ms"] = round((time.perf_counter() - start) * 1e3, 2)
            waits.append(outcome)
        report["waits"] = waits
        report["concurrent_calls_while_waiting"] = concurrent_calls(event_set, handles[0])
    finally:
        pynvml.nvmlEventSetFree(event_set)
    return report


def concurrent_calls(event_set: Any, handle: Any) -> dict[str, Any]:
    """Time another thread's NVML calls with and without a 2 s wait in progress."""

    def sample() -> float:
        timings = []
        for _ in range(200):
            start = time.perf_counter()
            pynvml.nvmlDeviceGetName(handle)
            timings.append((time.perf_counter() - start) * 1e6)
        return round(statistics.median(timings), 2)

    alone = sample()
    waiter_done = threading.Event()

    def wait() -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetWait_v2(event_set, 2000)
        waiter_done.set()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    during = sample()
    still_waiting = not waiter_done.is_set()
    thread.join()
    return {
        "nvmlDeviceGetName_median_us_alone": alone,
        "nvmlDeviceGetName_median_us_while_other_thread_waits": during,
        "other_thread_was_still_waiting": still_waiting,
    }


def answer(call: Callable[[], Any]) -> dict[str, Any]:
    """What one call returned, or the NVML error it raised."""
    try:
        return {"value": plain(call())}
    except pynvml.NVMLError as exc:
        return {"error": error_name(exc)}


def argument_edges(handle: Any) -> dict[str, Any]:
    """How the driver answers the arguments the simulator must refuse or accept alike.

    Left out on purpose: ``nvmlDeviceGetRemappedRows`` with a NULL output pointer, which
    crashes the real library (580.159.04) instead of answering INVALID_ARGUMENT.
    """
    unknown = 99
    report: dict[str, Any] = {
        "nvmlDeviceGetTotalEccErrors(unknown error type)": answer(
            lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, unknown, pynvml.NVML_VOLATILE_ECC)
        ),
        "nvmlDeviceGetTotalEccErrors(unknown counter type)": answer(
            lambda: pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, unknown
            )
        ),
        "nvmlDeviceGetRetiredPages(unknown cause)": answer(
            lambda: pynvml.nvmlDeviceGetRetiredPages(handle, unknown)
        ),
        "nvmlDeviceRegisterEvents(NULL set)": answer(
            lambda: pynvml.nvmlDeviceRegisterEvents(
                handle, pynvml.nvmlEventTypeXidCriticalError, None
            )
        ),
    }
    event_set = pynvml.nvmlEventSetCreate()
    try:
        for name, types in (("none", 0), ("0x40", 0x40), ("1<<40", 1 << 40)):
            report[f"nvmlDeviceRegisterEvents({name})"] = answer(
                lambda types=types: pynvml.nvmlDeviceRegisterEvents(handle, types, event_set)
            )
    finally:
        pynvml.nvmlEventSetFree(event_set)
    report["event_sets_open_at_once (of 65 asked)"] = open_sets(65)
    report["wait_on_a_set_another_thread_frees"] = wait_while_freed(3000)
    return report


def open_sets(wanted: int) -> int:
    """How many event sets NVML lets this process hold at once, up to ``wanted``."""
    sets = []
    try:
        for _ in range(wanted):
            try:
                sets.append(pynvml.nvmlEventSetCreate())
            except pynvml.NVMLError:
                break
        return len(sets)
    finally:
        for event_set in sets:
            pynvml.nvmlEventSetFree(event_set)


def wait_while_freed(timeout_ms: int) -> dict[str, Any]:
    """A wait on a set that another thread frees 0.2 s in: what it returns, and when."""
    event_set = pynvml.nvmlEventSetCreate()
    outcome: dict[str, Any] = {"timeout_ms": timeout_ms}

    def wait() -> None:
        start = time.perf_counter()
        outcome.update(answer(lambda: pynvml.nvmlEventSetWait_v2(event_set, timeout_ms)))
        outcome["elapsed_ms"] = round((time.perf_counter() - start) * 1e3, 1)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    pynvml.nvmlEventSetFree(event_set)
    waiter.join()
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        report: dict[str, Any] = {
            "driver_version": plain(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": plain(pynvml.nvmlSystemGetNVMLVersion()),
            "pynvml": getattr(pynvml, "__version__", "unknown"),
            "gpus": [],
        }
        for index, handle in enumerate(handles):
            report["gpus"].append(
                {
                    "index": index,
                    "name": plain(pynvml.nvmlDeviceGetName(handle)),
                    "bus_id": plain(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                    "sysfs_numa_node": sysfs_numa_node(
                        plain(pynvml.nvmlDeviceGetPciInfo(handle).busId)
                    ),
                    "calls": memory_health(handle, args.repeat),
                }
            )
        report["events"] = event_api(handles) if handles else {}
        report["argument_edges"] = argument_edges(handles[0]) if handles else {}
        online = Path("/sys/devices/system/node/online")
        report["numa_nodes_online"] = (
            online.read_text(encoding="ascii").strip() if online.exists() else "absent"
        )
        with open("/proc/self/maps", encoding="utf-8") as maps:
            report["library"] = sorted(
                {line.split()[-1] for line in maps if "libnvidia-ml" in line}
            )
    finally:
        pynvml.nvmlShutdown()
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
