"""The gfd command as a real process: one-shot, labels, facts, signals, reload, init recovery."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gfd.facts import dump_facts
from gfd.sim import load_profile
from tests.facts_readback import load_facts_text
from tests.host import gfd_main as main
from tests.nfd_rules import read_features_dir
from tests.reliability.agent_process import AgentProcess, running_gfd

NOW = dt.datetime.now(dt.UTC)


def gfd(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gfd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def parse_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_oneshot_file_parses_to_exactly_the_labels_command(tmp_path: Path) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    run = gfd(
        "--simulate",
        "dgx-a100",
        "--oneshot",
        "--no-timestamp",
        "--output-file",
        str(features / "gfd"),
    )
    assert run.returncode == 0, run.stderr
    printed = gfd("--simulate", "dgx-a100", "labels")
    assert printed.returncode == 0, printed.stderr
    assert read_features_dir(features, NOW) == parse_lines(printed.stdout)
    labels = parse_lines(printed.stdout)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"


def test_demo_labels_of_dgx_h100() -> None:
    run = gfd("--simulate", "dgx-h100", "--oneshot", "--no-timestamp", "--output-file", "-")
    assert run.returncode == 0, run.stderr
    labels = parse_lines(run.stdout)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert list(labels) == sorted(labels)


def test_oneshot_with_timestamp_writes_one(tmp_path: Path) -> None:
    before = int(time.time())
    run = gfd("--simulate", "t4-single", "--oneshot", "-o", str(tmp_path / "gfd"))
    assert run.returncode == 0, run.stderr
    stamp = int(read_features_dir(tmp_path, NOW)["nvidia.com/gfd.timestamp"])
    assert before <= stamp <= int(time.time())


def test_facts_output_round_trips(tmp_path: Path) -> None:
    for fmt in ("yaml", "json"):
        run = gfd("--simulate", "pcie-l4x4", "facts", "--format", fmt)
        assert run.returncode == 0, run.stderr
        assert load_facts_text(run.stdout, "stdout") == load_profile("pcie-l4x4").facts
        # The topology derived from the facts rides along, and loading ignores it.
        assert "derived" in run.stdout and "matrix" in run.stdout


def test_simulate_a_facts_file(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(dump_facts(load_profile("t4-single").facts))
    run = gfd("--simulate", str(path), "labels")
    assert run.returncode == 0, run.stderr
    assert parse_lines(run.stdout)["nvidia.com/gpu.product"] == "Tesla-T4"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulate", "no-such-machine", "labels"], "no-such-machine"),
        (["--mig-strategy", "all"], "--mig-strategy: 'all' is not one of"),
        (["--sleep-interval", "soon"], "is not a duration"),
        (["--frobnicate"], "unknown flag '--frobnicate'"),
        (["--health-checks", "gpu-lost,xids"], "--health-checks: 'xids' is not a health check"),
        (["--health-grace-period", "300"], "has no unit"),
    ],
)
def test_bad_input_is_one_clear_line_and_no_traceback(args: list[str], message: str) -> None:
    run = gfd(*args)
    assert run.returncode in (1, 2)
    assert message in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().startswith("gfd: error:") or "error" in run.stderr


def test_the_health_label_reaches_the_feature_file_when_asked_for(tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    base = ("--simulate", "dgx-h100", "--oneshot", "--output-file", str(output))
    assert gfd(*base, "--health-label").returncode == 0
    assert parse_lines(output.read_text())["nvidia.com/gpu.health"] == "healthy"
    assert gfd(*base, env={"GFD_HEALTH_CHECKS": "none", "GFD_HEALTH_LABEL": "true"}).returncode == 0
    assert "nvidia.com/gpu.health" not in parse_lines(output.read_text())
    assert gfd(*base).returncode == 0
    assert "nvidia.com/gpu.health" not in parse_lines(output.read_text())


def test_a_gpu_the_driver_never_attached_is_reported_by_a_one_shot_run(tmp_path: Path) -> None:
    facts = load_profile("dgx-h100").facts
    profile = tmp_path / "machine.yaml"
    profile.write_text(
        dump_facts(facts) + "faults:\n  gpu_vanished:\n  - {gpu: 5, after_calls: 0}\n"
    )
    run = gfd("--simulate", str(profile), "--oneshot", "--health-label", "--output-file", "-")
    assert run.returncode == 0, run.stderr
    labels = parse_lines(run.stdout)
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.health"]) == ("7", "GPULost")
    address = "0000:" + facts.gpus[5].bus_id.split(":", 1)[1].lower()
    # NVML never listed it in this process, so it has no index to be named by.
    assert f"the GPU at {address} is on the PCI bus but NVML does not see it" in run.stderr


def test_durations_as_an_operator_writes_them(tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    common = ("--simulate", "t4-single", "--oneshot", "--no-timestamp", "-o", str(output))
    refused = gfd("--sleep-interval", "60", *common)
    assert refused.returncode == 2
    assert refused.stderr == "gfd: error: --sleep-interval: '60' has no unit; write 60s\n"
    assert not output.exists()
    assert gfd(*common, env={"GFD_SLEEP_INTERVAL": "60s"}).returncode == 0
    config = tmp_path / "gfd.yaml"
    config.write_text("version: v1\nflags: {gfd: {sleepInterval: 60000000000}}\n")
    assert gfd("--config-file", str(config), *common).returncode == 0
    assert output.exists()


def test_oneshot_failure_is_non_zero_with_one_line_reason(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("a file where the features folder should be")
    output = tmp_path / "a-file" / "features.d" / "gfd"
    run = gfd("--simulate", "t4-single", "--oneshot", "--output-file", str(output))
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("gfd: error: feature-file:") and "cannot create" in last


@pytest.mark.slow
def test_sigterm_stops_the_periodic_agent_promptly(tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    with running_gfd(
        "--simulate", "dgx-h100", "--sleep-interval", "60s", "-o", str(output)
    ) as process:
        assert wait_for(output.exists), "first cycle did not write the file"
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=5)
    assert code == 0
    assert output.exists(), "the feature file must be kept on exit"


@pytest.mark.slow
def test_sigint_stops_too(tmp_path: Path) -> None:
    output = tmp_path / "gfd"
    with running_gfd(
        "--simulate", "t4-single", "--sleep-interval", "60s", "-o", str(output)
    ) as process:
        assert wait_for(output.exists)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=5) == 0


@pytest.mark.slow
def test_sighup_reloads_the_config_file(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    config = tmp_path / "gfd.yaml"
    config.write_text(
        f"version: v1\nflags:\n  gfd:\n    outputFile: {first}\n    noTimestamp: true\n"
    )
    with AgentProcess(
        "--simulate", "t4-single", "--sleep-interval", "60s", "--config-file", str(config),
        metrics=False,
    ) as agent:  # fmt: skip
        agent.wait_for(first.exists, "the first configuration's file")
        config.write_text(
            f"version: v1\nflags:\n  gfd:\n    outputFile: {second}\n    noTimestamp: false\n"
        )
        agent.process.send_signal(signal.SIGHUP)
        agent.wait_for(second.exists, "SIGHUP to reload the config")
        assert "nvidia.com/gfd.timestamp" in read_features_dir(tmp_path, NOW)
        # A broken config on reload is reported and the running configuration stays; wait
        # for the report itself, not a fixed time (a busy machine may take longer).
        config.write_text("version: v9\n")
        agent.process.send_signal(signal.SIGHUP)
        agent.wait_for_event("config reload failed; keeping the running configuration")
        assert agent.alive()
        assert agent.stop() == 0


def profile_with_faults(tmp_path: Path, base: str, faults: str) -> str:
    path = tmp_path / f"{base}-faulty.yaml"
    path.write_text(dump_facts(load_profile(base).facts) + faults)
    return str(path)


def test_init_failure_exits_non_zero_by_default(tmp_path: Path) -> None:
    profile = profile_with_faults(tmp_path, "t4-single", "faults:\n  driver_not_loaded_inits: 5\n")
    run = gfd("--simulate", profile, "--sleep-interval", "60s", "-o", str(tmp_path / "gfd"))
    assert run.returncode == 1
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in run.stderr
    assert "--fail-on-init-error=false" in run.stderr
    assert not (tmp_path / "gfd").exists()


@pytest.mark.slow
def test_init_failure_then_recovery_without_restart(tmp_path: Path) -> None:
    """With --fail-on-init-error=false the agent retries with backoff (1 s, 2 s, ...) and labels once NVML is up."""
    output = tmp_path / "gfd"
    profile = profile_with_faults(tmp_path, "t4-single", "faults:\n  driver_not_loaded_inits: 2\n")
    with running_gfd(
        "--simulate",
        profile,
        "--sleep-interval",
        "60s",
        "--fail-on-init-error=false",
        "-o",
        str(output),
    ) as process:
        # First the labels of a node without GPUs (the reference does the same), then the GPU's.
        assert wait_for(
            lambda: output.exists() and "gpu.product" in output.read_text(), timeout=30
        ), "labels never appeared after NVML came up"
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
        _, stderr = process.communicate(timeout=5)
    assert stderr.count("NVML_ERROR_DRIVER_NOT_LOADED") >= 2
    assert read_features_dir(tmp_path, NOW)["nvidia.com/gpu.product"] == "Tesla-T4"


def test_oneshot_gpu_lost_mid_read_fails_cleanly(tmp_path: Path) -> None:
    profile = profile_with_faults(
        tmp_path, "dgx-h100", "faults:\n  gpu_lost:\n  - {gpu: 3, after_calls: 2}\n"
    )
    run = gfd("--simulate", profile, "--oneshot", "-o", str(tmp_path / "gfd"))
    assert run.returncode == 1
    assert "NVML_ERROR_GPU_IS_LOST" in run.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "gfd").exists()


def test_feature_file_and_stdout_together(tmp_path: Path) -> None:
    """Sinks compose: the file and stdout carry the same labels in one run."""
    run = gfd(
        "--simulate",
        "t4-single",
        "--oneshot",
        "--no-timestamp",
        "--print-labels",
        "-o",
        str(tmp_path / "gfd"),
    )
    assert run.returncode == 0, run.stderr
    assert parse_lines(run.stdout) == read_features_dir(tmp_path, NOW)
    assert parse_lines(run.stdout)["nvidia.com/gpu.product"] == "Tesla-T4"


def test_no_sink_at_all_is_a_configuration_error(tmp_path: Path) -> None:
    run = gfd("--simulate", "t4-single", "--oneshot", "--no-output-file")
    assert run.returncode == 2
    assert "nothing to publish to" in run.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_an_output_file_that_is_a_device_is_refused_and_kept(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    run = gfd("--simulate", "t4-single", "--oneshot", "-o", str(null), timeout=20)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1] == (
        f"gfd: error: feature-file: feature file {null}: exists and is a character device, "
        "not a regular file; gfd never writes through or replaces it: remove it or choose "
        "another --output-file"
    )
    assert stat.S_ISCHR(null.lstat().st_mode)


def run_in_process(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``gfd.cli.main`` in this process: status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv, env=env or {}, stdout=out)
    return code, out.getvalue(), err.getvalue()


def test_facts_dash_o_writes_the_capture_and_it_replays(tmp_path: Path) -> None:
    capture = tmp_path / "node.yaml"
    code, stdout, stderr = run_in_process(["--simulate", "pcie-l4x4", "facts", "-o", str(capture)])
    assert (code, stdout, stderr) == (0, "", "")
    assert load_facts_text(capture.read_text(), str(capture)) == load_profile("pcie-l4x4").facts
    assert sorted(path.name for path in tmp_path.iterdir()) == ["node.yaml"], "no temporary left"
    assert stat.S_IMODE(capture.stat().st_mode) == 0o644
    printed = run_in_process(["--simulate", str(capture), "labels"])
    assert printed[0] == 0 and "nvidia.com/gpu.count=4" in printed[1]


def test_a_failed_read_leaves_the_capture_file_as_it_was(tmp_path: Path) -> None:
    """What ``gfd facts > node.yaml`` cannot do: the shell empties the file before gfd runs."""
    capture = tmp_path / "node.yaml"
    capture.write_text("the previous capture\n")
    (tmp_path / "driver-root").mkdir()
    code, stdout, stderr = run_in_process(
        ["--driver-root-ctr-path", str(tmp_path / "driver-root"), "facts", "-o", str(capture)]
    )
    assert code == 1 and stdout == "" and "NVML_ERROR_LIBRARY_NOT_FOUND" in stderr
    assert capture.read_text() == "the previous capture\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["driver-root", "node.yaml"]


def test_a_capture_replaces_a_symlink_and_never_writes_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("not yours\n")
    capture = tmp_path / "node.yaml"
    capture.symlink_to(victim)
    assert run_in_process(["--simulate", "t4-single", "facts", "-o", str(capture)])[0] == 0
    assert victim.read_text() == "not yours\n"
    assert not capture.is_symlink() and "Tesla T4" in capture.read_text()


def test_a_capture_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    capture = tmp_path / "absent" / "node.yaml"
    code, stdout, stderr = run_in_process(["--simulate", "t4-single", "facts", "-o", str(capture)])
    assert (code, stdout) == (1, "")
    assert stderr == (
        f"gfd: error: facts file {capture}: cannot create a file in {capture.parent}: "
        "No such file or directory\n"
    )


@pytest.mark.parametrize("where", ["environment", "config file"])
def test_the_deployments_output_file_is_never_taken_for_a_capture(
    where: str, tmp_path: Path
) -> None:
    """GFD_OUTPUT_FILE or outputFile name the feature file of the agent (a `kubectl exec
    gfd facts` in its pod sees them): facts prints, and the feature file stays."""
    feature_file = tmp_path / "gfd"
    feature_file.write_text("nvidia.com/gpu.count=8\n")
    argv, env = ["--simulate", "t4-single", "facts"], {}
    if where == "environment":
        env = {"GFD_OUTPUT_FILE": str(feature_file)}
    else:
        config = tmp_path / "gfd.yaml"
        config.write_text(f"version: v1\nflags: {{gfd: {{outputFile: {feature_file}}}}}\n")
        argv = ["--config-file", str(config), *argv]
    code, stdout, _ = run_in_process(argv, env)
    assert code == 0 and "Tesla T4" in stdout
    assert feature_file.read_text() == "nvidia.com/gpu.count=8\n"
