"""What the image's trimming must not break, and how small it must stay.

The Dockerfile removes from the image what the agent never loads (the kubernetes
client's asyncio tree and its packages, docstrings and sources of the generated
client, apt, documentation). These tests hold it to its size, and import inside the
image every module that gfd loads on each of its sink paths (feature file, Node,
NodeFeature, metrics), as recorded from one-shot runs of the same code here.
Skipped, with the reason, where no engine or no built image is available.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.deploy.container_engine import IMAGE, LOCKED_DOWN_RUN
from tests.emulator import ApiServerEmulator, seed_gfd_cluster

#: Uncompressed, as `docker images` counts it (decimal megabytes): issue 27.
MAX_IMAGE_BYTES = 150_000_000
NODE = "gpu-node-1"
TOKEN = "gfd-token"

pytestmark = pytest.mark.slow

#: Runs gfd's command line in this process and writes the names in sys.modules at exit.
RECORD_MODULES = """
import atexit, runpy, sys
out = sys.argv[1]
def dump():
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
atexit.register(dump)
sys.argv = ["gfd", *sys.argv[2:]]
runpy.run_module("gfd", run_name="__main__", alter_sys=True)
"""

#: Modules of this interpreter's start-up, of this checkout's editable install or of the
#: recording harness, and names Cython registers in sys.modules that are no modules.
NOT_GFD = (
    "__main__",
    "__mp_main__",
    "_sysconfigdata",
    "sitecustomize",
    "usercustomize",
    "_distutils_hack",
    "runpy",
    "tests",
    "__editable__",
    "_cython_",
    "cython_runtime",
)


def test_image_is_at_most_150_mb(client: str) -> None:
    result = subprocess.run(
        [client, "image", "inspect", "--format", "{{.Size}}", IMAGE],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    size = int(result.stdout.strip())
    assert size <= MAX_IMAGE_BYTES, f"{IMAGE} is {size / 1e6:.1f} MB, over 150 MB"


@pytest.fixture(scope="module")
def emulator() -> Iterator[ApiServerEmulator]:
    with ApiServerEmulator() as api:
        seed_gfd_cluster(api, node_name=NODE, token=TOKEN)
        yield api


def image_distributions() -> set[str]:
    """The distributions requirements/image.lock installs (gfd's runtime packages)."""
    lock = Path(__file__).resolve().parents[2] / "requirements" / "image.lock"
    return {
        canonicalize_name(line.split("==")[0])
        for line in lock.read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    } | {"gfd"}


def meant_for_the_image(name: str, shipped: set[str]) -> bool:
    """The standard library, and modules of the packages the image installs; not what a
    dependency imports only when present (found here in the test environment)."""
    root = name.split(".")[0]
    if root == "gfd" or root in sys.stdlib_module_names:
        return True
    owners = packages_distributions().get(root, [])
    return any(canonicalize_name(owner) in shipped for owner in owners)


def loaded_modules(tmp: Path, *args: str) -> set[str]:
    """The modules a one-shot gfd run with ``args`` loads, here."""
    record = tmp / "modules.txt"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            RECORD_MODULES,
            str(record),
            "--simulate",
            "dgx-h100",
            "--oneshot",
            "--no-timestamp",
            # Every path writes the feature file too (the default path is not writable here).
            "--output-file",
            str(tmp / "features"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NODE_NAME": NODE, "NAMESPACE": "gpu-operator", "POD_NAME": "gfd-abcde"},
    )
    assert result.returncode == 0, f"gfd {' '.join(args)} failed here:\n{result.stderr}"
    return {
        name
        for name in record.read_text().split()
        if not name.startswith(NOT_GFD) and name.split(".")[0] not in NOT_GFD
    }


SINK_PATHS = {
    "file": lambda tmp, kubeconfig: [],
    "node": lambda tmp, kubeconfig: ["--patch-node", "--kubeconfig", str(kubeconfig)],
    "nodefeature": lambda tmp, kubeconfig: [
        "--use-node-feature-api",
        "--kubeconfig",
        str(kubeconfig),
    ],
    "metrics": lambda tmp, kubeconfig: [
        "--metrics-address",
        "127.0.0.1:0",
    ],
}


@pytest.mark.parametrize("path", sorted(SINK_PATHS))
def test_every_module_of_a_sink_path_imports_in_the_image(
    client: str, emulator: ApiServerEmulator, tmp_path: Path, path: str
) -> None:
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
    modules = loaded_modules(tmp_path, *SINK_PATHS[path](tmp_path, kubeconfig))
    assert any(name.startswith("gfd.sinks") for name in modules), modules
    shipped = image_distributions()
    modules = {name for name in modules if meant_for_the_image(name, shipped)}
    # Import them all in the image, as its user, and name the ones that fail.
    check = (
        "import importlib, json, sys\n"
        "failed = {}\n"
        "for name in json.loads(sys.stdin.read()):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed[name] = repr(error)\n"
        "print(json.dumps(failed))\n"
    )
    result = subprocess.run(
        [
            client,
            *LOCKED_DOWN_RUN,
            "-i",
            "--network",
            "none",
            "--entrypoint",
            "/opt/gfd/bin/python",
            IMAGE,
            "-c",
            check,
        ],
        input=json.dumps(sorted(modules)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    failed = json.loads(result.stdout.strip().splitlines()[-1])
    assert failed == {}, f"{len(modules)} modules of the {path} path; these fail in the image"
