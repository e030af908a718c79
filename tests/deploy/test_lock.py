"""Supply chain: the image and CI install only pinned, hash-checked files from the index.

``requirements/*.lock`` are made by ``make lock`` (uv, ``scripts/lock.sh``). These tests
hold them to pyproject.toml (every declared dependency locked at a version its
specifier allows, the build requirements the same in both places), and hold the
Dockerfile and the Makefile to installing from them with ``--require-hashes``.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.manifests import REPO_ROOT

LOCKS = REPO_ROOT / "requirements"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def locked(name: str) -> dict[str, str]:
    """``{canonical name: version}`` of a lock file, after checking every entry's shape."""
    text = (LOCKS / name).read_text(encoding="utf-8")
    pins: dict[str, str] = {}
    entry: list[str] = []

    def close() -> None:
        if not entry:
            return
        head = entry[0].rstrip(" \\")
        requirement = Requirement(head)
        (spec,) = requirement.specifier
        assert spec.operator == "==", head
        hashes = [line for line in entry[1:] if line.strip().startswith("--hash=sha256:")]
        assert hashes, f"{name}: {head} has no hash"
        assert all(re.fullmatch(r"\s*--hash=sha256:[0-9a-f]{64}( \\)?", h) for h in hashes), head
        pins[canonicalize_name(requirement.name)] = spec.version
        entry.clear()

    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            close()
            assert not line.startswith(("-e", "-r", "--", ".", "/", "file:")), line
        entry.append(line)
    close()
    return pins


def _declared(*extras: str, base: bool = True) -> list[Requirement]:
    project = PYPROJECT["project"]
    found = [Requirement(r) for r in project["dependencies"]] if base else []
    for extra in extras:
        found += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return found


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        ("image.lock", _declared("kubernetes", "metrics")),
        ("build.lock", [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]),
        (
            "ci.lock",
            _declared("test", "lint", "lock")
            + [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
            + [Requirement("pip")],
        ),
    ],
    ids=["image", "build", "ci"],
)
def test_every_declared_dependency_is_locked_with_hashes(
    lock: str, requirements: list[Requirement]
) -> None:
    pins = locked(lock)
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock} lacks {requirement}; run make lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock} pins {name}=={pins[name]}, outside {requirement}; run make lock"
        )


def test_the_image_lock_holds_nothing_the_image_does_not_run() -> None:
    test_only = {"pytest", "hypothesis", "ruff", "mypy", "uv", "kubernetes-validate"}
    assert not test_only & set(locked("image.lock"))


def test_build_in_is_exactly_the_build_system_requirements() -> None:
    lines = (LOCKS / "build.in").read_text(encoding="utf-8").splitlines()
    listed = [line for line in lines if line.strip() and not line.startswith("#")]
    assert listed == PYPROJECT["build-system"]["requires"]


def _run_steps() -> list[str]:
    text = (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line for line in text.splitlines() if line.lstrip().startswith("RUN ")]


def test_the_image_installs_only_hash_checked_or_local_files() -> None:
    installs = [
        part.strip()
        for step in _run_steps()
        for part in step.split("&&")
        if re.search(r"\bpip\b.*\b(install|wheel)\b", part)
    ]
    assert installs, "the Dockerfile installs nothing with pip?"
    for command in installs:
        local = "--no-index" in command or (
            "wheel" in command and "--no-build-isolation" in command
        )
        assert "--require-hashes" in command or local, command
    joined = " ".join(installs)
    assert "-r requirements/build.lock" in joined and "-r requirements/image.lock" in joined
    ignore = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert {"!requirements/build.lock", "!requirements/image.lock"} <= set(ignore)


def test_ci_installs_from_its_lock_with_hashes() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "pip install --quiet --require-hashes -r requirements/ci.lock" in makefile
    assert "--no-deps --no-build-isolation -e ." in makefile
    assert re.search(r"^lock: .*\n\tscripts/lock\.sh$", makefile, re.MULTILINE)


def _recipe(makefile: str, target: str) -> tuple[str, str]:
    """The prerequisites and the recipe of ``target`` in the Makefile's text."""
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", makefile, re.MULTILINE)
    assert match, f"no rule for {target}"
    return match[1], match[2]


def test_make_demo_installs_only_what_running_gfd_needs() -> None:
    """make demo's stamp: the image's runtime lock and the build lock, never ci.lock's
    test and lint tools; make test's stamp puts ci.lock on top of it."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    demo_needs, _ = _recipe(makefile, "demo")
    assert demo_needs.split() == ["$(RUNTIME_STAMP)"]
    runtime_needs, runtime = _recipe(makefile, "$(RUNTIME_STAMP)")
    installs = [line for line in runtime.splitlines() if "pip install" in line]
    assert installs[0].endswith(
        "--require-hashes -r requirements/image.lock -r requirements/build.lock"
    )
    assert "ci.lock" not in runtime + runtime_needs
    full_needs, full = _recipe(makefile, "$(STAMP)")
    assert full_needs.split() == ["$(RUNTIME_STAMP)", "requirements/ci.lock"]
    assert "-r requirements/ci.lock" in full
    for target in ("test", "lint", "bench", "lock"):
        assert _recipe(makefile, target)[0].split() == ["$(STAMP)"], target


def test_the_base_image_is_an_exact_tag_or_a_digest() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8")
    (default,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    exact_tag = re.fullmatch(r"debian:\d+\.\d+-slim", default)
    digest = re.fullmatch(r"[\w./:-]+@sha256:[0-9a-f]{64}", default)
    assert exact_tag or digest, default
