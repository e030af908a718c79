"""Build the two C parts of gfd; everything else is declared in pyproject.toml.

- ``gfd.topology._builder``: a CPython extension that builds the GPU topology matrix,
  from the ``gfd/topology/_*.c`` files (builder, facts encoder, matrix cells) and their
  one internal header ``_builder.h``.
- ``gfd.sim._nvmlsim``: a plain shared library (built as an extension only so that
  setuptools compiles and installs it) that exports the NVML C ABI for the simulator.
  It is compiled against the real ``nvml.h`` from the ``nvidia-nvml-dev`` wheel, from
  the ``gfd/sim/sim_*.c`` files and their one internal header ``nvmlsim.h``.

A missing header or a compiler error fails the build: gfd is never installed
without its C parts.
"""

from __future__ import annotations

import glob
import os
import sys

from setuptools import Extension, setup


def nvml_include_dir() -> str:
    """Return the folder of ``nvml.h`` shipped by nvidia-nvml-dev (a build requirement)."""
    searched: list[str] = []
    for entry in sys.path:
        pattern = os.path.join(entry, "nvidia", "*", "include", "nvml.h")
        searched.append(pattern)
        hits = sorted(glob.glob(pattern))
        if hits:
            return os.path.dirname(hits[-1])
        direct = os.path.join(entry, "nvidia", "include", "nvml.h")
        if os.path.exists(direct):
            return os.path.dirname(direct)
    raise SystemExit(
        "gfd build: nvml.h not found; install the build requirement nvidia-nvml-dev "
        "(searched: " + ", ".join(searched[:6]) + ", ...)"
    )


STRICT_C = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"]

setup(
    ext_modules=[
        Extension(
            "gfd.topology._builder",
            sources=[
                "gfd/topology/_builder.c",
                "gfd/topology/_cells.c",
                "gfd/topology/_encode.c",
            ],
            depends=["gfd/topology/_builder.h"],
            extra_compile_args=STRICT_C,
        ),
        Extension(
            "gfd.sim._nvmlsim",
            # One library from several files, one per NVML area (see nvmlsim.h).
            sources=[
                "gfd/sim/sim_config.c",
                "gfd/sim/sim_config_gpu.c",
                "gfd/sim/sim_config_topology.c",
                "gfd/sim/sim_core.c",
                "gfd/sim/sim_device.c",
                "gfd/sim/sim_event_queue.c",
                "gfd/sim/sim_events.c",
                "gfd/sim/sim_fabric.c",
                "gfd/sim/sim_faults.c",
                "gfd/sim/sim_health.c",
                "gfd/sim/sim_memory.c",
                "gfd/sim/sim_mig.c",
                "gfd/sim/sim_parse.c",
                "gfd/sim/sim_pcie.c",
                "gfd/sim/sim_state.c",
                "gfd/sim/sim_topology.c",
            ],
            depends=["gfd/sim/nvmlsim.h"],
            include_dirs=[nvml_include_dir()],
            define_macros=[("NVML_NO_UNVERSIONED_FUNC_DEFS", "1")],
            extra_compile_args=[*STRICT_C, "-fvisibility=default"],
        ),
    ],
)
