"""The image with NVIDIA's real libnvidia-ml.so.1 and no driver loaded, as a node without a
running driver starts it: the library where the NVIDIA container toolkit puts it, the
feature file in a hostPath-like mount, read-only root, no capabilities, no network.
It must do what NVIDIA's reference did on the same library (tests/records/reference-gfd/
no-driver.json): --fail-on-init-error=false exits 0 with the reference's labels, true
exits 1 with one line. The amd64 image only: the fetched driver packages are amd64's.
Skipped where no engine, no image or no REAL_NVML_DIR is available.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conformance.test_real_nvml import real_libraries, reference_without_driver
from tests.deploy.container_engine import FEATURES_DIR, BuiltImage
from tests.reliability.agent_process import parse_label_lines

pytestmark = [pytest.mark.slow, pytest.mark.oracle("real-nvml")]


def run_in_image(
    docker: str, image: BuiltImage, library: Path, work: Path, fail: str
) -> subprocess.CompletedProcess[str]:
    features = work / "features.d"
    sysfs = work / "sys" / "bus" / "pci" / "devices"
    features.mkdir(parents=True)
    sysfs.mkdir(parents=True)
    features.chmod(0o777)  # the hostPath directory the image's non-root user writes into
    command = [
        docker, *image.run(
            "--network", "none",
            "-v", f"{library.resolve()}:{image.toolkit_nvml}:ro",
            "-v", f"{work / 'sys'}:/host-sys:ro",
            "-v", f"{features}:{FEATURES_DIR}",
        ),
        image.tag, "--oneshot", "--no-timestamp", f"--fail-on-init-error={fail}",
        "--output-file", f"{FEATURES_DIR}/gfd", "--sysfs-root", "/host-sys",
        "--machine-type-file", "/nonexistent",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_no_driver_fail_on_init_error_false_labels_like_the_reference(
    client: str,
    amd64_image: BuiltImage,
    tmp_path: Path,
) -> None:
    for library in real_libraries():
        work = tmp_path / library.parent.name
        done = run_in_image(client, amd64_image, library, work, "false")
        reference = reference_without_driver(library, "false")
        assert done.returncode == reference["returncode"] == 0, done.stderr
        assert "Traceback" not in done.stderr
        labels = parse_label_lines((work / "features.d" / "gfd").read_text())
        assert labels == reference["labels"]


def test_no_driver_fail_on_init_error_true_exits_with_one_line(
    client: str,
    amd64_image: BuiltImage,
    tmp_path: Path,
) -> None:
    for library in real_libraries():
        work = tmp_path / library.parent.name
        done = run_in_image(client, amd64_image, library, work, "true")
        assert done.returncode == reference_without_driver(library, "true")["returncode"] == 1
        (line,) = [x for x in done.stderr.splitlines() if not x.startswith("{")]
        assert line.startswith("gfd: error: ") and "NVML_ERROR_DRIVER_NOT_LOADED" in line
        assert not (work / "features.d" / "gfd").exists()
