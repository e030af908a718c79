"""gfd's own tests of its two C parts, run inside each architecture's image: the arm64
one under qemu-user-static, so the topology builder and the NVML simulator library that
an arm64 node runs are the ones tested.

The suites run are ``tests/sim`` (the simulator library through the real pynvml binding,
its faults, limits and exports) and ``tests/topology`` (the C topology builder, encoder
and cells against their Python twins), with the image's interpreter and installed gfd:
nothing of this checkout's build is used, only its test files, mounted read-only.
pytest and hypothesis come from the Dockerfile's ``test-deps`` stage, built for the
image's platform from ``requirements/ci.lock`` (``IMAGE_TEST_DEPS=1
scripts/build-image.sh``).

Left out, by name: as too slow under emulation, the ``*_many_*`` and ``*_much_*``
property tests, which run the same comparisons as their kept siblings over hundreds of
examples more (39 of the suites' 55 s on this host; ``much_raw_compact_input`` alone
takes 34 s under qemu, its sibling ``raw_compact_input`` 3 s); and, by the marker
``checkout_sources``, the tests that read the checkout's C header, which the image does not
hold (they run on the host).
Skipped inside, with their reasons: what needs ``nm`` or the NVML export lists (host
tools and oracles, not in the image). About 80 s for arm64 under qemu, 15 s for amd64.
Skipped, with the reason, where no engine, no built image or no test packages are
available.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.deploy.container_engine import BuiltImage
from tests.deploy.manifests import REPO_ROOT

pytestmark = pytest.mark.slow

SUITES = ("tests/sim", "tests/topology")
#: The tests left out (see the module's docstring): too slow under emulation, or reading
#: the C sources.
LEFT_OUT = "not _many_ and not _much_"
#: Tests that read the checkout's C header, which the image does not hold.
NEEDS_CHECKOUT = "not checkout_sources"
#: Where the checkout's tests and the test packages are mounted in the container.
SUITE_ROOT = "/suite"
TEST_DEPS = "/opt/test-deps"


@pytest.fixture
def test_deps(image: BuiltImage) -> Path:
    deps = image.beside(".test-deps")
    if not (deps / "pytest").is_dir():
        reason = f"no test packages at {deps}; IMAGE_TEST_DEPS=1 scripts/build-image.sh writes them"
        if os.environ.get("GFD_REQUIRE_IMAGE", "") not in ("", "0"):
            pytest.fail(f"GFD_REQUIRE_IMAGE is set but {reason}", pytrace=False)
        pytest.skip(reason)
    return deps


def test_c_parts_pass_their_tests_in_the_image(
    client: str, image: BuiltImage, test_deps: Path, tmp_path: Path
) -> None:
    report = tmp_path / "report"
    report.mkdir()
    report.chmod(0o777)  # written by the image's user
    command = [
        client, "run", "--rm", "--platform", image.platform, "--network", "none",
        # exec: the simulator's per-branch copies of its library are loaded from /tmp
        # (Docker's tmpfs is noexec by default; qemu would not notice, amd64 does).
        "--read-only", "--tmpfs", "/tmp:rw,exec,size=512m",
        "-v", f"{REPO_ROOT / 'tests'}:{SUITE_ROOT}/tests:ro",
        "-v", f"{REPO_ROOT / 'pyproject.toml'}:{SUITE_ROOT}/pyproject.toml:ro",
        "-v", f"{test_deps}:{TEST_DEPS}:ro",
        "-v", f"{report}:/report",
        "-w", SUITE_ROOT,
        "-e", f"PYTHONPATH={TEST_DEPS}:{SUITE_ROOT}",
        # The read-only root has no room for hypothesis' example database; /tmp is the
        # run's system temp folder, which its host guard holds empty (tests/host_guard.py).
        "-e", "HYPOTHESIS_STORAGE_DIRECTORY=/report/hypothesis",
        "--entrypoint", "/opt/gfd/bin/python",
        image.tag,
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", LEFT_OUT, "-m", NEEDS_CHECKOUT,
        "--junitxml", "/report/junit.xml", *SUITES,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, f"in {image.tag}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    cases = ElementTree.parse(report / "junit.xml").getroot().iter("testcase")
    passed = {
        f"{case.get('classname')}.{case.get('name')}"
        for case in cases
        if not any(child.tag in ("failure", "error", "skipped") for child in case)
    }
    # Not a vacuous run: both suites ran, the simulator through pynvml and the C builder
    # against its Python twin among them.
    assert len(passed) > 300, sorted(passed)
    assert any(name.startswith("tests.sim.test_sim_nvml.") for name in passed)
    assert any(
        name.startswith("tests.topology.test_properties.test_c_and_python_agree") for name in passed
    )
