"""NVML under a mounted driver root (``gfd.nvml.driver_root``), on fake driver trees.

Each tree is laid out as a distribution's driver installs it (Debian/Ubuntu multiarch
directories, Red Hat's lib64 behind merged-/usr links, an ``ld.so.conf.d`` entry), with
"libraries" that are only ELF headers: the lookup reads nothing more. Then the whole path:
a gfd process given ``--driver-root-ctr-path`` loads the simulator's library from such a
tree and labels its machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.base.errors import NvmlNotReady
from gfd.config import resolve_settings
from gfd.nvml.driver_root import (
    ARCHITECTURES,
    MAX_SEARCH_DIRS,
    NVML_LIBRARY,
    find_nvml_library,
    nvml_library_path,
    search_dirs,
    this_architecture,
)
from gfd.sim import CONFIG_ENV, library_path, prepare_machine
from tests.host import NOT_IN_A_POD
from tests.reliability.agent_process import environment as agent_environment
from tests.reliability.agent_process import expected_labels, gfd_command, parse_label_lines

X86 = ARCHITECTURES["x86_64"]
ARM = ARCHITECTURES["aarch64"]


def elf_header(machine: int, *, bits: int = 64) -> bytes:
    """The first bytes of a little-endian shared object for ELF ``machine``."""
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1, 1]) + bytes(9)
    return ident + (3).to_bytes(2, "little") + machine.to_bytes(2, "little") + bytes(44)


def put(root: Path, inside: str, content: bytes = b"") -> Path:
    path = root / inside.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def link(root: Path, inside: str, target: str) -> Path:
    path = root / inside.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def test_ubuntu_layout_resolves_the_versioned_library(tmp_path: Path) -> None:
    real = put(tmp_path, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", elf_header(62))
    link(tmp_path, f"/usr/lib/x86_64-linux-gnu/{NVML_LIBRARY}", "libnvidia-ml.so.550.54.15")
    assert find_nvml_library(tmp_path, X86) == real


def test_red_hat_layout_behind_merged_usr_links(tmp_path: Path) -> None:
    # /lib64 -> usr/lib64 (relative) and /usr/lib64/libnvidia-ml.so.1 -> an absolute path:
    # both must be read inside the root, as the driver container itself sees them.
    real = put(tmp_path, "/usr/lib64/libnvidia-ml.so.570.124.06", elf_header(62))
    link(tmp_path, "/lib64", "usr/lib64")
    link(tmp_path, f"/usr/lib64/{NVML_LIBRARY}", "/usr/lib64/libnvidia-ml.so.570.124.06")
    assert find_nvml_library(tmp_path, X86) == real


def test_links_never_leave_the_root(tmp_path: Path) -> None:
    # Their target is a 64-bit ELF of this machine that exists outside the tree (this
    # interpreter), so the lookup would take it if a link led out: absolutely, or by
    # more ".." than the tree is deep.
    outside = Path(sys.executable).resolve()
    multiarch = this_architecture().multiarch
    link(tmp_path, f"/usr/lib/{multiarch}/{NVML_LIBRARY}", str(outside))
    link(tmp_path, f"/usr/lib64/{NVML_LIBRARY}", "../" * 20 + str(outside).lstrip("/"))
    with pytest.raises(NvmlNotReady, match="no loadable libnvidia-ml.so.1 under the driver root"):
        find_nvml_library(tmp_path, this_architecture())


def test_ld_so_conf_includes_come_first(tmp_path: Path) -> None:
    # A directory only the root's ldconfig knows of, named through an include, wins over
    # the standard directory that also holds a copy.
    put(tmp_path, "/etc/ld.so.conf", b"# comment\ninclude /etc/ld.so.conf.d/*.conf\n")
    put(tmp_path, "/etc/ld.so.conf.d/00-nvidia.conf", b"/usr/local/nvidia/lib64 # driver\n")
    put(tmp_path, "/etc/ld.so.conf.d/libc.conf", b"/usr/local/lib\n")
    put(tmp_path, "/etc/ld.so.conf.d/ignored.txt", b"/not/included\n")
    wanted = put(tmp_path, f"/usr/local/nvidia/lib64/{NVML_LIBRARY}", elf_header(62))
    put(tmp_path, f"/usr/lib/x86_64-linux-gnu/{NVML_LIBRARY}", elf_header(62))
    dirs = search_dirs(tmp_path, X86)
    assert dirs[:2] == ["/usr/local/nvidia/lib64", "/usr/local/lib"]
    assert "/not/included" not in dirs
    assert find_nvml_library(tmp_path, X86) == wanted


def test_relative_include_and_several_directories_on_a_line(tmp_path: Path) -> None:
    put(tmp_path, "/etc/ld.so.conf", b"include ld.so.conf.d/*.conf\nhwcap 0 nosegneg\n")
    put(tmp_path, "/etc/ld.so.conf.d/a.conf", b"/opt/a:/opt/b, /opt/c=ELF\n")
    assert search_dirs(tmp_path, X86)[:3] == ["/opt/a", "/opt/b", "/opt/c"]


def test_the_32_bit_copy_is_skipped_for_the_64_bit_one(tmp_path: Path) -> None:
    # Ubuntu installs both; i386's directory may come first in ld.so.conf.d.
    put(tmp_path, "/etc/ld.so.conf", b"/usr/lib/i386-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
    put(tmp_path, f"/usr/lib/i386-linux-gnu/{NVML_LIBRARY}", elf_header(3, bits=32))
    wanted = put(tmp_path, f"/usr/lib/x86_64-linux-gnu/{NVML_LIBRARY}", elf_header(62))
    assert find_nvml_library(tmp_path, X86) == wanted


def test_each_architecture_finds_its_own(tmp_path: Path) -> None:
    # A root holding both architectures' drivers (as a multi-arch test tree would).
    x86 = put(tmp_path, f"/usr/lib/x86_64-linux-gnu/{NVML_LIBRARY}", elf_header(62))
    arm = put(tmp_path, f"/usr/lib/aarch64-linux-gnu/{NVML_LIBRARY}", elf_header(183))
    assert find_nvml_library(tmp_path, X86) == x86
    assert find_nvml_library(tmp_path, ARM) == arm


def test_absent_names_the_root_every_directory_tried_and_each_refusal(tmp_path: Path) -> None:
    put(tmp_path, f"/usr/lib64/{NVML_LIBRARY}", elf_header(183))  # an arm64 driver's
    put(tmp_path, f"/lib/{NVML_LIBRARY}", b"#!/bin/sh\n")
    with pytest.raises(NvmlNotReady) as caught:
        find_nvml_library(tmp_path, X86)
    error = caught.value
    assert (error.call, error.name) == ("load", "NVML_ERROR_LIBRARY_NOT_FOUND")
    message = str(error)
    assert f"under the driver root {tmp_path} " in message
    tried = message.split("(tried ", 1)[1].split(")", 1)[0].split(", ")
    assert tried == [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ]
    assert f"/usr/lib64/{NVML_LIBRARY}: built for ELF machine 183" in message
    assert f"/lib/{NVML_LIBRARY}: not an ELF library" in message


def test_loops_fifos_and_huge_configs_end(tmp_path: Path) -> None:
    # A link loop, a FIFO in the library's place (opened without blocking, and refused
    # before), an ld.so.conf including itself, and more directories than are searched.
    link(tmp_path, f"/usr/lib/x86_64-linux-gnu/{NVML_LIBRARY}", NVML_LIBRARY)
    fifo = tmp_path / "usr" / "lib64" / NVML_LIBRARY
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    many = "\n".join(f"/d{i}" for i in range(3 * MAX_SEARCH_DIRS))
    put(tmp_path, "/etc/ld.so.conf", f"include /etc/ld.so.conf\n{many}\n".encode())
    assert len(search_dirs(tmp_path, X86)) == MAX_SEARCH_DIRS
    with pytest.raises(NvmlNotReady) as caught:
        find_nvml_library(tmp_path, X86)
    assert f"and {MAX_SEARCH_DIRS - 12} more" in str(caught.value)
    assert len(str(caught.value)) < 1500


def test_an_ld_so_conf_too_large_is_not_read(tmp_path: Path) -> None:
    put(tmp_path, "/etc/ld.so.conf", b"/opt/first\n" + b"#" * (1 << 20))
    assert "/opt/first" not in search_dirs(tmp_path, X86)


def test_setting_unset_uses_the_default_root_only_when_mounted(tmp_path: Path) -> None:
    absent = tmp_path / "driver-root"
    assert nvml_library_path(None, default_root=absent) is None
    real = put(
        absent, f"/usr/lib/{this_architecture().multiarch}/{NVML_LIBRARY}",
        elf_header(this_architecture().elf_machine),
    )  # fmt: skip
    assert nvml_library_path(None, default_root=absent) == real


def test_empty_or_slash_means_the_dynamic_linker(tmp_path: Path) -> None:
    mounted = tmp_path / "driver-root"
    mounted.mkdir()
    assert nvml_library_path("", default_root=mounted) is None
    assert nvml_library_path("/", default_root=mounted) is None


def test_a_root_asked_for_must_be_there(tmp_path: Path) -> None:
    with pytest.raises(NvmlNotReady, match=r"driver root .*/nowhere is not a directory"):
        nvml_library_path(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NvmlNotReady, match="no loadable libnvidia-ml.so.1 under the driver root"):
        nvml_library_path(str(tmp_path / "empty"))


def test_the_reference_names_set_it() -> None:
    for variable in ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"):
        settings = resolve_settings({}, {variable: "/run/nvidia/driver"}, host=NOT_IN_A_POD)
        assert settings.driver_root_ctr_path == "/run/nvidia/driver"
    assert resolve_settings({}, {}, host=NOT_IN_A_POD).driver_root_ctr_path is None


def test_gfd_loads_nvml_from_a_driver_root(tmp_path: Path) -> None:
    """The simulator's library under a driver root, as the GPU Operator mounts the
    driver's, and nowhere on the linker's path: gfd labels the simulated machine."""
    machine = prepare_machine("dgx-h100", tmp_path / "machine")
    root = tmp_path / "run-nvidia-driver"
    versioned = f"/usr/lib/{this_architecture().multiarch}/libnvidia-ml.so.570.124.06"
    put(root, versioned, library_path().read_bytes())
    link(root, f"/usr/lib/{this_architecture().multiarch}/{NVML_LIBRARY}", versioned)
    done = subprocess.run(
        gfd_command(
            "labels",
            "--driver-root-ctr-path", str(root),
            "--sysfs-root", str(machine.sysfs_root),
            "--machine-type-file", str(machine.machine_type_file),
        ),
        env=agent_environment({CONFIG_ENV: str(machine.config_path)}),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert parse_label_lines(done.stdout) == {
        key: value
        for key, value in expected_labels("dgx-h100").items()
        if key != "nvidia.com/gfd.timestamp"
    }
