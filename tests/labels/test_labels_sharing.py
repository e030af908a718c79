"""Sharing labels (time-slicing, MPS, renameByDefault, MIG interplay), whole maps compared."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gfd.base.errors import ConfigError
from gfd.config import SharedResource, Sharing
from gfd.facts import Gpu
from gfd.labels import LabelOptions, build_labels
from tests.factories import NODE_LABELS, make_facts, make_gpu
from tests.host import gfd_main as main
from tests.mig_factories import a100, a100_split

P = "nvidia.com/"
MIG_FIXTURE = Path(__file__).parents[1] / "sim" / "fixtures" / "dgx-a100-mig.yaml"

BASE = dict(NODE_LABELS)


def h100(product: str, replicas: int, strategy: str, mps: bool = False) -> dict[str, str]:
    return {
        **BASE,
        f"{P}gpu.product": product,
        f"{P}gpu.count": "2",
        f"{P}gpu.replicas": str(replicas),
        f"{P}gpu.sharing-strategy": strategy,
        f"{P}gpu.memory": "81559",
        f"{P}gpu.compute.major": "9",
        f"{P}gpu.compute.minor": "0",
        f"{P}gpu.family": "hopper",
        f"{P}mps.capable": "true" if mps else "false",
    }


def sharing(
    strategy: str = "time-slicing",
    *resources: SharedResource,
    rename_by_default: bool = False,
) -> Sharing:
    chosen = resources or (SharedResource(name="nvidia.com/gpu", replicas=4),)
    return Sharing(strategy=strategy, rename_by_default=rename_by_default, resources=chosen)


TWO_H100 = [make_gpu(0), make_gpu(1)]
SHARED = "NVIDIA-H100-80GB-HBM3-SHARED"
PLAIN = "NVIDIA-H100-80GB-HBM3"

FULL_GPU_CASES: list[tuple[str, Sharing | None, dict[str, str]]] = [
    ("no sharing", None, h100(PLAIN, 1, "none")),
    ("time-slicing appends -SHARED", sharing(), h100(SHARED, 4, "time-slicing")),
    (
        "renameByDefault drops the suffix",
        sharing(rename_by_default=True),
        h100(PLAIN, 4, "time-slicing"),
    ),
    (
        # The reference clears a per-resource rename (with a warning) before labelling.
        "an explicit rename is ignored like the reference does",
        sharing(
            "time-slicing",
            SharedResource(name="nvidia.com/gpu", replicas=3, rename="nvidia.com/gpu.shared"),
        ),
        h100(SHARED, 3, "time-slicing"),
    ),
    ("MPS", sharing("mps"), h100(SHARED, 4, "mps", mps=True)),
    (
        "MPS renamed by default",
        sharing("mps", rename_by_default=True),
        h100(PLAIN, 4, "mps", mps=True),
    ),
    (
        "a shared resource that is not nvidia.com/gpu leaves full GPUs alone",
        sharing("time-slicing", SharedResource(name="nvidia.com/mig-1g.10gb", replicas=2)),
        h100(PLAIN, 1, "none"),
    ),
    (
        "MPS for another resource still makes MPS the node's strategy",
        sharing("mps", SharedResource(name="nvidia.com/mig-1g.10gb", replicas=2)),
        h100(PLAIN, 1, "none", mps=True),
    ),
]


@pytest.mark.parametrize(
    ("config", "expected"), [c[1:] for c in FULL_GPU_CASES], ids=[c[0] for c in FULL_GPU_CASES]
)
def test_sharing_of_full_gpus(config: Sharing | None, expected: dict[str, str]) -> None:
    label_set = build_labels(make_facts(TWO_H100), LabelOptions(sharing=config))
    assert dict(label_set.labels) == expected


def a100_labels(**overrides: str) -> dict[str, str]:
    return {
        **BASE,
        f"{P}gpu.product": "NVIDIA-A100-SXM4-40GB",
        f"{P}gpu.count": "2",
        f"{P}gpu.replicas": "0",
        f"{P}gpu.sharing-strategy": "none",
        f"{P}gpu.memory": "40960",
        f"{P}gpu.compute.major": "8",
        f"{P}gpu.compute.minor": "0",
        f"{P}gpu.family": "ampere",
        f"{P}mps.capable": "false",
        **{f"{P}{k}": v for k, v in overrides.items()},
    }


def mig_attributes(
    name: str, memory: int, sms: int, slices: int, copy: int, dec: int
) -> dict[str, str]:
    return {
        f"{name}.memory": str(memory),
        f"{name}.multiprocessors": str(sms),
        f"{name}.slices.gi": str(slices),
        f"{name}.slices.ci": str(slices),
        f"{name}.engines.copy": str(copy),
        f"{name}.engines.decoder": str(dec),
        f"{name}.engines.encoder": "0",
        f"{name}.engines.jpeg": "0",
        f"{name}.engines.ofa": "0",
    }


SEVEN = ("1g.5gb",) * 7


def test_mig_enabled_full_gpus_are_never_shared() -> None:
    gpus = [a100_split(0, *SEVEN), a100_split(1, *SEVEN)]
    labels = dict(build_labels(make_facts(gpus), LabelOptions(sharing=sharing())).labels)
    assert labels == a100_labels()


def test_mig_enabled_and_disabled_gpus_of_one_model_share_as_full_gpus() -> None:
    gpus = [a100_split(0, *SEVEN), a100(1)]
    labels = dict(build_labels(make_facts(gpus), LabelOptions(sharing=sharing())).labels)
    assert labels == a100_labels(
        **{
            "gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED",
            "gpu.replicas": "4",
            "gpu.sharing-strategy": "time-slicing",
        }
    )


def test_single_strategy_shares_the_mig_devices() -> None:
    gpus = [a100_split(0, *SEVEN), a100_split(1, *SEVEN)]
    options = LabelOptions(mig_strategy="single", sharing=sharing())
    labels = dict(build_labels(make_facts(gpus), options).labels)
    assert labels == a100_labels(
        **{
            "mig.strategy": "single",
            "gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED",
            "gpu.count": "14",
            "gpu.replicas": "4",
            "gpu.sharing-strategy": "time-slicing",
            **mig_attributes("gpu", 4864, 14, 1, 1, 0),
        }
    )


def test_mixed_strategy_shares_only_the_listed_profile() -> None:
    gpus = [a100_split(0, "3g.20gb", "1g.5gb", "1g.5gb"), a100_split(1, "3g.20gb", "1g.5gb")]
    config = sharing("time-slicing", SharedResource(name="nvidia.com/mig-1g.5gb", replicas=2))
    labels = dict(
        build_labels(make_facts(gpus), LabelOptions(mig_strategy="mixed", sharing=config)).labels
    )
    assert labels == a100_labels(
        **{
            "mig.strategy": "mixed",
            "mig-3g.20gb.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
            "mig-3g.20gb.count": "2",
            "mig-3g.20gb.replicas": "1",
            "mig-3g.20gb.sharing-strategy": "none",
            **mig_attributes("mig-3g.20gb", 19968, 42, 3, 3, 2),
            "mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED",
            "mig-1g.5gb.count": "3",
            "mig-1g.5gb.replicas": "2",
            "mig-1g.5gb.sharing-strategy": "time-slicing",
            **mig_attributes("mig-1g.5gb", 4864, 14, 1, 1, 0),
        }
    )


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_mps_with_a_mig_enabled_gpu_is_a_config_error_naming_gpu_and_setting(
    strategy: str,
) -> None:
    gpus: list[Gpu] = [a100(0), a100_split(1, *SEVEN)]
    with pytest.raises(ConfigError) as info:
        build_labels(make_facts(gpus), LabelOptions(mig_strategy=strategy, sharing=sharing("mps")))
    message = str(info.value)
    assert "sharing.mps" in message
    assert "GPU 1 (NVIDIA A100-SXM4-40GB, GPU-00000000-0000-0000-0000-000000000001" in message
    assert "MIG enabled" in message


def test_mps_with_mig_capable_but_disabled_gpus_is_fine() -> None:
    gpus = [a100(0), a100(1)]
    labels = build_labels(make_facts(gpus), LabelOptions(sharing=sharing("mps"))).labels
    assert labels[f"{P}mps.capable"] == "true"


def test_no_gpus_no_mps_label() -> None:
    assert f"{P}mps.capable" not in build_labels(make_facts([]), LabelOptions()).labels


def write_config(tmp_path: Path, block: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"version: v1\nsharing:\n  {block}:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 4}\n"
    )
    return path


def test_cli_passes_sharing_from_the_config_file(tmp_path: Path) -> None:
    out = io.StringIO()
    config = write_config(tmp_path, "timeSlicing")
    code = main(
        ["labels", "--simulate", "dgx-h100", "--config-file", str(config)], env={}, stdout=out
    )
    assert code == 0
    lines = set(out.getvalue().splitlines())
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED" in lines
    assert "nvidia.com/gpu.replicas=4" in lines
    assert "nvidia.com/gpu.sharing-strategy=time-slicing" in lines


def test_cli_reports_mps_with_mig_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "mps")
    code = main(
        ["labels", "--simulate", str(MIG_FIXTURE), "--config-file", str(config)],
        env={},
        stdout=io.StringIO(),
    )
    assert code != 0
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("gfd: error: config file sharing.mps:")
    assert "GPU 0 (NVIDIA A100-SXM4-40GB" in error
