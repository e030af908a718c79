"""Start-up: what a process imports for each kind of run.

Importing is most of what a one-shot gfd costs (``docs/benchmarks.md``, "Start-up"), so
what each path must not import is pinned here, by module name, in a fresh interpreter.
Timing is the benchmark's job (``bench/startup.py``), not a test's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gfd.sim import PROFILES_DIR, load_profile, prepare_machine

#: Loaded only by the paths that use them: the Kubernetes sinks, metrics, the config
#: file, the simulator, the config watch of a periodic agent, structlog for a log line,
#: and the topology builder's pure-Python twin (the C extension builds).
HEAVY = (
    "structlog",
    "asyncio",
    "ssl",
    "kubernetes",
    "urllib3",
    "tenacity",
    "prometheus_client",
    "http.server",
    "yaml",
    "gfd.sim",
    "gfd.app.config_watch",
    "gfd.metrics",
    "gfd.kube_api",
    "gfd.topology.python_builder",
)

#: What a one-shot run that writes a feature file does not use, whatever its checks: the
#: Kubernetes sinks and what only they feed (the health condition and taint writers, the
#: DRA driver's ResourceSlices, the device-plugin check, which needs the Node, and the
#: DRA-node decision, which only that check and ``--label-mode auto`` make), the Xid
#: watcher (no Xid reaches a one-shot run), the simulator's fault model and per-branch
#: library copies (a bundled profile of the latest branch has neither), the config file's
#: schema (none is given), and the secrets module (hmac and hashlib) for a temporary
#: file's name.
NOT_IN_A_FILE_RUN = (
    "gfd.config.file",
    "gfd.sinks.node",
    "gfd.sinks.node_update",
    "gfd.sinks.nodefeature",
    "gfd.health.taint",
    "gfd.health.resource_slices",
    "gfd.health.checks.device_plugin",
    "gfd.health.dra_node",
    "gfd.nvml.xid_events",
    "gfd.sim.faults",
    "gfd.sim.branch_library",
    "secrets",
)

PROBE = """
import json, sys
from gfd.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:  # argparse ends --version and --help so
    code = exit.code
print("PROBE " + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules_after(arguments: list[str], env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    report = json.loads(line.removeprefix("PROBE "))
    return report["code"], set(report["modules"])


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_load_neither_nvml_nor_logging(flag: str) -> None:
    code, modules = _modules_after([flag])
    assert code == 0
    assert _loaded(modules, (*HEAVY, "pynvml", "gfd.agent", "gfd.nvml", "gfd.labels")) == []


@pytest.mark.parametrize("level", ["error", "debug"])
def test_a_oneshot_file_run_loads_only_what_it_uses(tmp_path: Path, level: str) -> None:
    """The real-node path (library by LD_LIBRARY_PATH, sysfs and DMI by flag) writing a
    feature file: no structlog (its JSON log lines are gfd's), no client, no YAML."""
    machine = prepare_machine(load_profile("dgx-h100").facts, tmp_path / "machine")
    out = tmp_path / "gfd"
    env = {**os.environ, **machine.environment()}
    arguments = [
        "--oneshot", "--no-timestamp", "--log-level", level, "--output-file", str(out),
        "--sysfs-root", str(machine.sysfs_root),
        "--machine-type-file", str(machine.machine_type_file),
    ]  # fmt: skip
    code, modules = _modules_after(arguments, env)
    assert code == 0
    assert "nvidia.com/gpu.count=8" in out.read_text().splitlines()
    assert _loaded(modules, (*HEAVY, *NOT_IN_A_FILE_RUN)) == []
    assert "pynvml" in modules  # the probe is not vacuous: the reader ran
    # The checks it runs are loaded (and only they: device-plugin needs the Node).
    assert "gfd.health.checks.gpu_lost" in modules


def test_a_simulated_oneshot_file_run_loads_only_what_it_uses(tmp_path: Path) -> None:
    """``--simulate`` with a bundled profile: the simulator, but no YAML (the profile's
    parsed twin is read), none of the fault model (the profile has no ``faults:``), the
    branch copies or the driver-root search (the simulator's library is loaded by its
    path)."""
    out = tmp_path / "gfd"
    arguments = ["--simulate", "dgx-h100", "--oneshot", "--no-timestamp", "-o", str(out)]
    code, modules = _modules_after(arguments)
    assert code == 0
    assert "nvidia.com/gpu.count=8" in out.read_text().splitlines()
    heavy = tuple(name for name in HEAVY if name != "gfd.sim")
    assert _loaded(modules, (*heavy, *NOT_IN_A_FILE_RUN, "gfd.nvml.driver_root")) == []
    assert "gfd.sim" in modules


def test_a_simulated_run_of_a_profile_file_parses_its_yaml(tmp_path: Path) -> None:
    """A profile given by path has no twin: YAML is loaded for it (the probe is not
    vacuous: the twin is what keeps YAML out above)."""
    profile = tmp_path / "mine.yaml"
    profile.write_text((PROFILES_DIR / "t4-single.yaml").read_text(encoding="utf-8"))
    arguments = ["--simulate", str(profile), "--oneshot", "-o", str(tmp_path / "gfd")]
    code, modules = _modules_after(arguments)
    assert code == 0
    assert "yaml" in modules


def test_a_run_without_checks_loads_no_health_and_one_check_only_it(tmp_path: Path) -> None:
    machine = prepare_machine(load_profile("dgx-h100").facts, tmp_path / "machine")
    env = {**os.environ, **machine.environment()}
    common = [
        "--oneshot", "--no-timestamp", "--output-file", str(tmp_path / "gfd"),
        "--sysfs-root", str(machine.sysfs_root),
        "--machine-type-file", str(machine.machine_type_file),
    ]  # fmt: skip
    code, modules = _modules_after([*common, "--health-checks", "none"], env)
    assert code == 0
    assert _loaded(modules, ("gfd.health",)) == []
    code, modules = _modules_after([*common, "--health-checks", "nvlink"], env)
    assert code == 0
    assert sorted(m for m in modules if m.startswith("gfd.health.checks.")) == [
        "gfd.health.checks.nvlink"
    ]


def test_json_lines_never_load_structlog_and_a_terminal_line_does() -> None:
    code = (
        "import io, json, sys\n"
        "from gfd.base.logs import configure_logging, get_logger\n"
        "out = io.StringIO()\n"
        "configure_logging('warning', stream=out, json=True)\n"
        "log = get_logger(node='n1')\n"
        "log.info('quiet')\n"
        "log.warning('loud', key='k')\n"
        "configure_logging('error', stream=out, json=True)\n"
        "log.warning('filtered after a reload')\n"
        "log.bind(extra=1).error('bound')\n"
        "assert 'structlog' not in sys.modules, 'loaded for a JSON line'\n"
        "console = io.StringIO()\n"
        "configure_logging('info', stream=console, json=False)\n"
        "log.info('on a terminal')\n"
        "assert 'structlog' in sys.modules\n"
        "assert 'on a terminal' in console.getvalue()\n"
        "print(out.getvalue(), end='')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["event"], line["level"]) for line in lines] == [
        ("loud", "warning"),
        ("bound", "error"),
    ]
    assert lines[0]["node"] == "n1" and lines[0]["key"] == "k"
    assert lines[1]["node"] == "n1" and lines[1]["extra"] == 1
    assert all(line["timestamp"].endswith("Z") for line in lines)


def _modules_after_code(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_health_package_imports_no_check_and_a_monitor_only_those_it_enables(
    tmp_path: Path,
) -> None:
    """The registry names each check by module and class: a check's module is imported
    when a configuration enables it, never by importing the package or the registry."""
    from gfd.health.registry import CHECKS, CHECKS_PACKAGE

    every_check = tuple(f"{CHECKS_PACKAGE}.{entry.module}" for entry in CHECKS)
    assert _loaded(_modules_after_code("import gfd.health, gfd.health.registry"), every_check) == []
    code = (
        "from pathlib import Path\n"
        "from gfd.health import NVLINK, XID, HealthMonitor\n"
        f"monitor = HealthMonitor(sysfs_root=Path({str(tmp_path)!r}), checks=[XID, NVLINK])\n"
        "assert monitor.checks == (NVLINK, XID), monitor.checks\n"
    )
    assert _loaded(_modules_after_code(code), every_check) == [
        f"{CHECKS_PACKAGE}.nvlink",
        f"{CHECKS_PACKAGE}.xid",
    ]
