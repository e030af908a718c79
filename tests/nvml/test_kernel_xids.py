"""The kernel log's Xids (gfd.nvml.kernel_xids): records in /dev/kmsg's format
(``PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;TEXT``, continuation lines after a space, as the
kernel's Documentation/ABI/testing/dev-kmsg describes them) from a file and a FIFO, the
driver's ``NVRM: Xid`` lines in the forms drivers wrote them, times turned into wall-clock
seconds, each record once, and a log that cannot be read said in one line."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gfd.nvml.kernel_xids import KernelLog, PciAddress, parse_record, parse_xid

BOOTED_AT = 1_796_000_000.0
#: Seconds since boot when the test reads, on the kernel's (monotonic) clock.
NOW = 5000.0

#: Driver lines as published: current drivers (gpud's README, a 2024 H100 host), an older
#: driver with ``PCI:`` (2018), and a driver of 2012 without it.
LINES = [
    (
        "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
        "errorString CTX SWITCH TIMEOUT, Info 0x58005",
        PciAddress(0, 0xCB, 0),
        109,
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 31, Ch 00000009, engmask 00000101, intr 10000000",
        PciAddress(0, 0x01, 0),
        31,
    ),
    ("NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104", PciAddress(0, 1, 0), 13),
    (
        "NVRM: Xid (PCI:0008:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
        "off the bus.",
        PciAddress(8, 1, 0),
        79,
    ),
]


@pytest.mark.parametrize(("text", "address", "xid"), LINES)
def test_the_drivers_xid_lines(text: str, address: PciAddress, xid: int) -> None:
    assert parse_xid(text) == (address, xid)


@pytest.mark.parametrize(
    "text",
    [
        "NVRM: GPU at PCI:0000:01:00: GPU-8ba16ede-b303-d769-7297-d266d9383b89",
        "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
        "NVRM: Xid (PCI:0000:01:00): lots, of trouble",
    ],
)
def test_other_lines_are_no_xid(text: str) -> None:
    assert parse_xid(text) is None


def test_records_and_continuation_lines() -> None:
    assert parse_record("4,1234,5000000,-;NVRM: Xid (PCI:0000:61:00): 79, x") == (
        1234,
        5.0,
        "NVRM: Xid (PCI:0000:61:00): 79, x",
    )
    # Extra fields after the flags (newer kernels add a caller id) are allowed.
    assert parse_record("6,7,8,c,caller=T1;text") == (7, 8e-6, "text")
    assert parse_record(" SUBSYSTEM=pci") is None
    assert parse_record("garbage") is None


def record(sequence: int, seconds_since_boot: float, text: str) -> str:
    return f"4,{sequence},{int(seconds_since_boot * 1e6)},-;{text}\n"


def log_of(path: Path) -> KernelLog:
    return KernelLog(path, monotonic=lambda: NOW, wall=lambda: BOOTED_AT + NOW)


def test_a_file_in_the_kernels_format_gives_its_xids_once_with_wall_clock_times(
    tmp_path: Path,
) -> None:
    path = tmp_path / "kmsg"
    path.write_text(
        record(1, 3.5, "Linux version 6.8.0")
        + record(2, 4000.25, LINES[3][0])
        + " SUBSYSTEM=pci\n DEVICE=+pci:0008:01:00.0\n"
        + record(3, 4100.0, LINES[0][0])
    )
    kernel = log_of(path)
    first = kernel.read()
    assert [(x.sequence, x.address, x.xid, x.at) for x in first] == [
        (2, PciAddress(8, 1, 0), 79, BOOTED_AT + 4000.25),
        (3, PciAddress(0, 0xCB, 0), 109, BOOTED_AT + 4100.0),
    ]
    assert kernel.read() == ()
    # What is logged later is read by the next read, and only that.
    with path.open("a") as appended:
        appended.write(record(4, 4200.0, LINES[1][0]))
    assert [x.sequence for x in kernel.read()] == [4]
    kernel.close()


def test_a_record_cut_by_a_read_is_joined_with_its_rest(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    whole = record(9, 10.0, LINES[0][0])
    path.write_text(whole[:20])
    kernel = log_of(path)
    assert kernel.read() == ()
    with path.open("a") as appended:
        appended.write(whole[20:])
    assert [x.xid for x in kernel.read()] == [109]


def test_a_fifo_written_before_the_reader_reads(tmp_path: Path) -> None:
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    kernel = log_of(fifo)
    assert kernel.open()

    def write() -> None:
        with fifo.open("w") as writer:
            writer.write(record(1, 4000.0, LINES[3][0]))

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(5)
    assert [x.xid for x in kernel.read()] == [79]
    assert kernel.read() == ()
    kernel.close()


def test_a_log_that_cannot_be_read_is_said_once_and_not_tried_again(tmp_path: Path) -> None:
    kernel = log_of(tmp_path / "no-such-kmsg")
    assert not kernel.open()
    assert kernel.error == f"{tmp_path / 'no-such-kmsg'}: No such file or directory"
    assert kernel.read() == ()
    assert not kernel.readable


def test_a_directory_is_no_kernel_log(tmp_path: Path) -> None:
    kernel = log_of(tmp_path)
    assert kernel.read() == ()
    assert kernel.error is not None and "not a kernel log" in kernel.error


def test_a_log_the_process_may_not_read_names_the_capability(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "kmsg"
    path.write_text("")
    path.chmod(0)
    kernel = log_of(path)
    assert not kernel.open()
    assert kernel.error is not None and "CAP_SYSLOG" in kernel.error


def test_the_address_of_bus_ids() -> None:
    assert PciAddress.of("00000000:61:00.0") == PciAddress(0, 0x61, 0)
    assert PciAddress.of("0008:01:00.0") == PciAddress(8, 1, 0)
    assert PciAddress.of("nonsense") is None
    assert PciAddress(8, 1, 0).nvml_bus_id() == "00000008:01:00.0"


def test_the_hosts_kernel_log_reads_to_its_end_without_blocking() -> None:
    """Where this host's /dev/kmsg is readable (root, dmesg_restrict allowing it): the real
    device gives one record per read and ends with EAGAIN, and reading it never waits."""
    kernel = KernelLog()
    if not kernel.open():
        pytest.skip(f"the host's kernel log is not readable here: {kernel.error}")
    kernel.read()
    assert kernel.error is None
    assert kernel.records > 0, "no record read from a kernel log that has some"
    kernel.read()
    assert kernel.error is None
    kernel.close()
