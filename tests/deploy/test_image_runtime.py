"""What the image's trimming must not break, and how small it must stay.

The Dockerfile removes from the image what the agent never loads (the kubernetes
client's asyncio tree and its packages, docstrings and sources of the generated
client, apt, documentation). These tests hold each architecture's image to its size, and
import inside it every module that gfd loads on each of its sink paths (feature file,
Node, NodeFeature, metrics), as recorded from one-shot runs of the same code here (once
for all images; one container run per image imports them all).
Skipped, with the reason, where no engine or no built image is available.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.deploy.container_engine import BuiltImage
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


def test_image_is_at_most_150_mb(client: str, image: BuiltImage) -> None:
    result = subprocess.run(
        [client, "image", "inspect", "--format", "{{.Size}}", image.tag],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    size = int(result.stdout.strip())
    assert size <= MAX_IMAGE_BYTES, f"{image.tag} is {size / 1e6:.1f} MB, over 150 MB"


def image_distributions() -> set[str]:
    """The distributions requirements/image.lock installs (gfd's runtime packages)."""
    lock = Path(__file__).resolve().parents[2] / "requirements" / "image.lock"
    return {
        canonicalize_name(line.split("==")[0])
        for line in lock.read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    } | {"gfd"}


@functools.cache
def _owners_by_top_level() -> dict[str, list[str]]:
    """Which distributions provide each top-level module here: one scan of the
    environment's metadata (about 50 ms) rather than one per module name."""
    return dict(metadata.packages_distributions())


def meant_for_the_image(name: str, shipped: set[str]) -> bool:
    """The standard library, and modules of the packages the image installs; not what a
    dependency imports only when present (found here in the test environment)."""
    root = name.split(".")[0]
    if root == "gfd" or root in sys.stdlib_module_names:
        return True
    owners = _owners_by_top_level().get(root, [])
    return any(canonicalize_name(owner) in shipped for owner in owners)


def loaded_modules(tmp: Path, *args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a one-shot gfd run with ``args`` (and ``env``) loads, here."""
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
        env={
            **os.environ,
            "NODE_NAME": NODE,
            "NAMESPACE": "gpu-operator",
            "POD_NAME": "gfd-abcde",
            **(env or {}),
        },
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
    "metrics": lambda tmp, kubeconfig: [],
}
#: The metrics endpoint's address comes from the environment, as the DaemonSet gives it: a
#: one-shot run refuses --metrics-address on its command line (it ends before a scrape),
#: but serves what its environment asks for.
SINK_PATH_ENV = {"metrics": {"GFD_METRICS_ADDRESS": "127.0.0.1:0"}}


@pytest.fixture(scope="session")
def sink_path_modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Per sink path, the modules of the image's packages that a one-shot run loads here
    (against the API emulator): recorded once for the images of every architecture."""
    shipped = image_distributions()
    recorded = {}
    with ApiServerEmulator() as emulator:
        seed_gfd_cluster(emulator, node_name=NODE, token=TOKEN)
        for path, arguments in sorted(SINK_PATHS.items()):
            tmp = tmp_path_factory.mktemp(path)
            kubeconfig = emulator.write_kubeconfig(tmp / "kubeconfig", TOKEN)
            modules = loaded_modules(tmp, *arguments(tmp, kubeconfig), env=SINK_PATH_ENV.get(path))
            assert any(name.startswith("gfd.sinks") for name in modules), modules
            recorded[path] = {name for name in modules if meant_for_the_image(name, shipped)}
    return recorded


def test_every_module_of_a_sink_path_imports_in_the_image(
    client: str, image: BuiltImage, sink_path_modules: dict[str, set[str]]
) -> None:
    modules = set().union(*sink_path_modules.values())
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
            *image.run("-i", "--network", "none", "--entrypoint", "/opt/gfd/bin/python"),
            image.tag,
            "-c",
            check,
        ],
        input=json.dumps(sorted(modules)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    failed = json.loads(result.stdout.strip().splitlines()[-1])
    by_path = {path: sorted(set(failed) & loaded) for path, loaded in sink_path_modules.items()}
    assert failed == {}, f"these fail in {image.tag}, by sink path: {by_path}; {failed}"
