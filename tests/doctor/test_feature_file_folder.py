"""The ``feature-file`` link on its own: the folder NFD's worker reads, as files arrange it.

The mount test and the environment (whether this is a pod) are the doctor's parameters,
so a pod is arranged without being one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gfd.config import resolve_settings
from gfd.doctor import diagnose
from gfd.doctor.checks.feature_file import HOST_FEATURES_DIR
from gfd.doctor.registry import DOCTOR_CHECKS

FEATURE_FILE = [check for check in DOCTOR_CHECKS if check.name == "feature-file"]
IN_A_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}


def folder_answer(
    output_file: Path | str,
    *,
    environment: dict[str, str] | None = None,
    mounts: frozenset[str] = frozenset(),
    **settings: object,
) -> tuple[str, str, str]:
    chosen = resolve_settings({"output_file": str(output_file), **settings}, {})
    (finding,) = diagnose(
        chosen,
        environment=environment or {},
        checks=FEATURE_FILE,
        is_mount=lambda path: path in mounts,
    )
    return finding.state, finding.answer.message, finding.answer.fix


def test_an_existing_writable_folder_is_ok(tmp_path: Path) -> None:
    state, message, _ = folder_answer(tmp_path / "gfd")
    assert state == "ok"
    assert "gfd has written no feature file there yet" in message
    (tmp_path / "gfd").write_text("nvidia.com/gpu.count=8\nnvidia.com/gpu.present=true\n")
    state, message, _ = folder_answer(tmp_path / "gfd")
    assert state == "ok" and "2 labels" in message


def test_a_missing_folder_this_user_may_create_is_ok(tmp_path: Path) -> None:
    state, message, _ = folder_answer(tmp_path / "a" / "b" / "gfd")
    assert state == "ok"
    assert f"{tmp_path / 'a' / 'b'} does not exist yet" in message
    assert not (tmp_path / "a").exists()


def test_a_symbolic_link_at_the_file_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "gfd").symlink_to(tmp_path / "elsewhere")
    state, message, fix = folder_answer(tmp_path / "gfd")
    assert state == "problem"
    assert "symbolic link" in message
    assert "--output-file" in fix


def test_a_folder_that_is_a_file_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "features.d").write_text("")
    state, message, _ = folder_answer(tmp_path / "features.d" / "gfd")
    assert state == "problem"
    assert "not a directory" in message


def test_in_a_pod_the_folder_must_be_a_mount(tmp_path: Path) -> None:
    folder = tmp_path / "features.d"
    folder.mkdir()
    state, message, fix = folder_answer(folder / "gfd", environment=IN_A_POD)
    assert state == "problem"
    assert "no mount" in message
    assert "hostPath" in fix and HOST_FEATURES_DIR in fix
    state, _, _ = folder_answer(
        folder / "gfd", environment=IN_A_POD, mounts=frozenset({str(folder)})
    )
    assert state == "ok"


def test_outside_a_pod_no_mount_is_needed(tmp_path: Path) -> None:
    state, _, _ = folder_answer(tmp_path / "gfd", environment={})
    assert state == "ok"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder of a writable filesystem")
def test_a_folder_this_user_may_not_write_is_a_problem(tmp_path: Path) -> None:
    folder = tmp_path / "features.d"
    folder.mkdir(mode=0o555)
    state, message, fix = folder_answer(folder / "gfd")
    assert state == "problem"
    assert "may not write" in message
    assert "root" in fix


def test_not_used_when_no_feature_file_is_written(tmp_path: Path) -> None:
    state, message, _ = folder_answer("-")
    assert (state, message) == ("ok", "not used: the labels go to stdout (--output-file -)")
    state, message, _ = folder_answer(
        tmp_path / "gfd", no_output_file=True, patch_node=True, node_name="n"
    )
    assert (state, message) == ("ok", "not used (--no-output-file)")
