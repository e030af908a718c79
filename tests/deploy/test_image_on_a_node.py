"""Each architecture's image run as a GPU node runs it, on a simulated DGX H100.

Everything a node gives the container is given here the same way, at the same paths:

- NVML: the simulator's ``libnvidia-ml.so.1``, the one built into the image under test (an
  arm64 library for the arm64 image, copied out of it), either bind-mounted where the
  NVIDIA container toolkit mounts the driver's (``/usr/lib/<multiarch>/``), or, as the GPU
  Operator gives a driver container's files, inside a driver root: the tree of the
  host's ``/run/nvidia/driver`` (``usr/lib/<multiarch>/libnvidia-ml.so.<version>`` and its
  ``.so.1`` link) mounted at ``/driver-root``, where NVIDIA's GFD and device plugin look
  by default, and nothing at the toolkit's path; its machine file named by
  ``GFD_SIM_CONFIG``;
- the host's sysfs, read-only at ``/sys`` as ``deploy/base`` mounts it: here the simulated
  machine's tree, which also holds the DMI file (``/sys/class/dmi/id/product_name``);
- the feature file into a hostPath-like bind mount of ``features.d``, as the
  ``feature-file`` component mounts it and runs the container (uid 0, no capabilities);
- the node sink (``--patch-node``) through an in-cluster token: token, ``ca.crt`` and
  ``namespace`` at the ServiceAccount path, ``KUBERNETES_SERVICE_HOST``/``_PORT`` naming
  the API emulator, served over HTTPS on loopback with a certificate made for the test;
- read-only root, ``/tmp`` in memory, all capabilities dropped, no privilege escalation,
  host network only for loopback.

The labels that arrive in the feature file and on the emulator's Node must be the ones
gfd computes on this host for the same machine.
Skipped, with the reason, where no engine or no built image is available.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gfd.sim import CONFIG_ENV, prepare_machine
from tests.deploy.container_engine import FEATURES_DIR, BuiltImage
from tests.emulator import ApiServerEmulator, seed_gfd_cluster
from tests.reliability.agent_process import expected_labels, parse_label_lines

pytestmark = pytest.mark.slow

PROFILE = "dgx-h100"
NODE = "gpu-node-1"
NAMESPACE = "gfd"
TOKEN = "gfd-in-cluster-token"
#: Where the kubelet projects the ServiceAccount token, CA and namespace.
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Where the container reads the simulator's machine file (any path outside /sys works).
MACHINE_FILE = "/run/gfd-sim/machine.conf"
#: Where the GPU Operator's driver root is mounted, NVIDIA's default (``/driver-root``).
DRIVER_ROOT = "/driver-root"
#: The driver version the driver root's library file is named after.
DRIVER_VERSION = "570.148.08"


def service_account(directory: Path, ca: Path) -> Path:
    """The projected volume's three files, readable by any uid as the kubelet's are."""
    directory.mkdir()
    (directory / "token").write_text(TOKEN)
    (directory / "namespace").write_text(NAMESPACE)
    shutil.copyfile(ca, directory / "ca.crt")
    for path in (directory, *directory.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return directory


def features_directory(directory: Path) -> Path:
    """features.d as the kubelet creates a DirectoryOrCreate hostPath: root's, mode 0755.

    The feature-file component runs gfd as uid 0 without CAP_DAC_OVERRIDE, so it writes
    there only because root owns the directory; where this test runs as another user the
    directory is opened to all instead (what it shows about the sink is the same).
    """
    directory.mkdir()
    directory.chmod(0o755 if os.geteuid() == 0 else 0o777)
    return directory


def simulator_library(client: str, image: BuiltImage, directory: Path) -> Path:
    """The image's own simulator library (of its architecture), copied out of it."""
    inside = (
        f"/opt/gfd/lib/python3.11/site-packages/gfd/sim/_nvmlsim.cpython-311-{image.multiarch}.so"
    )
    created = subprocess.run(
        [client, "create", "--platform", image.platform, image.tag],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    container = created.stdout.strip()
    try:
        directory.mkdir()
        subprocess.run(
            [client, "cp", f"{container}:{inside}", str(directory / "libnvidia-ml.so.1")],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    finally:
        subprocess.run([client, "rm", container], capture_output=True, timeout=60, check=False)
    library = directory / "libnvidia-ml.so.1"
    library.chmod(0o755)
    return library


def at_the_toolkit_path(image: BuiltImage, library: Path, work: Path) -> list[str]:
    return ["-v", f"{library}:{image.toolkit_nvml}:ro"]


def in_a_driver_root(image: BuiltImage, library: Path, work: Path) -> list[str]:
    """The host's /run/nvidia/driver as a driver container fills it, mounted where the
    GPU Operator mounts it; gfd finds it there with no setting."""
    lib_dir = work / "run-nvidia-driver" / "usr" / "lib" / image.multiarch
    lib_dir.mkdir(parents=True)
    versioned = lib_dir / f"libnvidia-ml.so.{DRIVER_VERSION}"
    shutil.copyfile(library, versioned)
    versioned.chmod(0o755)
    (lib_dir / "libnvidia-ml.so.1").symlink_to(versioned.name)
    return ["-v", f"{work / 'run-nvidia-driver'}:{DRIVER_ROOT}:ro"]


NVML_MOUNTS: dict[str, Callable[[BuiltImage, Path, Path], list[str]]] = {
    "toolkit": at_the_toolkit_path,
    "driver-root": in_a_driver_root,
}


@pytest.mark.parametrize("nvml", sorted(NVML_MOUNTS))
def test_simulated_dgx_h100_labels_reach_the_feature_file_and_the_node(
    client: str,
    image: BuiltImage,
    tls_pair: tuple[Path, Path],
    tmp_path: Path,
    nvml: str,
) -> None:
    machine = prepare_machine(PROFILE, tmp_path / "machine")
    library = simulator_library(client, image, tmp_path / "nvml")
    nvml_mounts = NVML_MOUNTS[nvml](image, library, tmp_path)
    features = features_directory(tmp_path / "features.d")
    secrets = service_account(tmp_path / "serviceaccount", tls_pair[0])
    expected = expected_labels(PROFILE)
    with ApiServerEmulator(tls_cert=tls_pair[0], tls_key=tls_pair[1]) as api:
        seed_gfd_cluster(api, node_name=NODE, namespace=NAMESPACE, token=TOKEN)
        command = [
            client, *image.run(
                "--network", "host", "--user", "0:0",
                *nvml_mounts,
                "-v", f"{machine.config_path}:{MACHINE_FILE}:ro",
                "-v", f"{machine.sysfs_root}:/sys:ro",
                "-v", f"{features}:{FEATURES_DIR}",
                "-v", f"{secrets}:{SERVICE_ACCOUNT}:ro",
                "-e", f"{CONFIG_ENV}={MACHINE_FILE}",
                "-e", "KUBERNETES_SERVICE_HOST=127.0.0.1",
                "-e", f"KUBERNETES_SERVICE_PORT={api.port}",
                "-e", f"NODE_NAME={NODE}",
                "-e", "POD_NAME=gfd-abcde",
                "-e", f"NAMESPACE={NAMESPACE}",
            ),
            image.tag, "--oneshot", "--no-timestamp", "--patch-node",
            "--output-file", f"{FEATURES_DIR}/gfd",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        node = api.node(NODE)
        requests = api.requests
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    written = parse_label_lines((features / "gfd").read_text(encoding="utf-8"))
    assert written == expected
    on_node = {
        key: value
        for key, value in node["metadata"].get("labels", {}).items()
        if key.startswith("nvidia.com/")
    }
    assert on_node == expected
    # Through the mounted token (the emulator knows no other), over TLS, all answered.
    writes = [r for r in requests if r.method == "PATCH" and r.path == f"/api/v1/nodes/{NODE}"]
    assert writes, [(r.method, r.path, r.status) for r in requests]
    assert {r.user for r in requests} == {f"system:serviceaccount:{NAMESPACE}:gfd"}
    assert all(r.status < 400 for r in requests), [(r.method, r.path, r.status) for r in requests]
    assert expected["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert expected["nvidia.com/gpu.count"] == "8"
    assert expected["nvidia.com/gpu.machine"] == "DGXH100"
