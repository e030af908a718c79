"""The ``nvml`` link: NVML is found, starts, and sees GPUs.

It names the library as the dynamic linker loaded it and where it was looked for, the
driver and CUDA versions, and the GPUs (how many of each model). A library that cannot be
found, a driver not loaded yet, another NVML error, or NVML that sees no GPU is a problem,
each with its fix.
"""

from __future__ import annotations

from collections import Counter

from gfd.base.errors import NvmlError
from gfd.doctor.examination import Examination
from gfd.doctor.finding import Answer, ok, problem

#: What to run where there is no GPU: the bundled profiles, named in the fix.
SIMULATE_HINT = "without a GPU, try gfd with --simulate PROFILE (gfd --help lists the profiles)"


def _cuda(cuda: int | None) -> str:
    if cuda is None:
        return ""
    return f", CUDA {cuda // 1000}.{cuda % 1000 // 10}"


def examine(examination: Examination) -> Answer:
    reading = examination.nvml
    facts = reading.facts
    if facts is not None:
        models = Counter(gpu.name for gpu in facts.gpus)
        gpus = ", ".join(f"{count}x {name}" for name, count in sorted(models.items()))
        loaded = reading.library or "an unknown file"
        found = (
            f"NVML {loaded} (from {reading.source}); driver {facts.driver_version or 'unknown'}"
            f"{_cuda(facts.cuda_driver_version)}"
        )
        if not facts.gpus:
            return problem(
                f"{found}: NVML sees no GPU",
                "run nvidia-smi -L on the node; in a container the GPUs must be exposed "
                "(the NVIDIA container runtime with NVIDIA_VISIBLE_DEVICES=all, or the GPU "
                "Operator's runtime class)",
            )
        return ok(f"{found}; {len(facts.gpus)} GPU(s): {gpus}")
    error = reading.error
    assert error is not None, "a reading has facts or an error"
    if isinstance(error, NvmlError) and error.name == "NVML_ERROR_LIBRARY_NOT_FOUND":
        return problem(
            f"NVML's library is not found ({reading.source}): {error}",
            "on a GPU node, give gfd the driver's library: the NVIDIA container runtime "
            "injects it, or mount the driver's root (/run/nvidia/driver under the GPU "
            "Operator, / for a driver installed on the host) and pass "
            f"--driver-root-ctr-path PATH; {SIMULATE_HINT}",
        )
    if isinstance(error, NvmlError) and error.name == "NVML_ERROR_DRIVER_NOT_LOADED":
        going_on = (
            "gfd keeps running and labels the node without GPUs until it is "
            "(--fail-on-init-error=false)"
            if not examination.settings.fail_on_init_error
            else "gfd exits until it is; --fail-on-init-error=false keeps it running and "
            "labels the node without GPUs meanwhile"
        )
        return problem(
            f"the NVIDIA kernel driver is not loaded yet (NVML {reading.library}: {error})",
            "wait for the driver (under the GPU Operator its driver pod must be Ready; "
            f"lsmod | grep nvidia on the node shows it); {going_on}",
        )
    if isinstance(error, NvmlError) and error.name == "NVML_ERROR_LIB_RM_VERSION_MISMATCH":
        return problem(
            f"NVML's library and the loaded kernel driver differ in version: {error}",
            "the driver was upgraded without a reboot (or the container holds another "
            "driver's library): reboot the node, or mount the running driver's root",
        )
    return problem(
        f"NVML fails ({reading.library or reading.source}): {error}",
        "run nvidia-smi on the node: it meets the same error and says more; "
        "docs/nvml.md lists what gfd asks NVML",
    )
