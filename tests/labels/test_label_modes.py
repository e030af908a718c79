"""``--label-mode``: device-plugin is today's label set exactly; hardware is the facts of the
hardware and driver alone, with the MIG layout beside them.

The property test runs, in-process, the differential suite's whole matrix (every bundled
profile × MIG strategy × sharing config, ``tests/conformance/test_differential.py``) through
gfd's own command line, settings and label code, in both modes. Its oracle is the
device-plugin set itself, which the differential suite holds to the reference GFD's
recorded labels: the hardware set must agree with it on every key both publish, except
where the device plugin's MIG strategy or sharing rewrote the value, and there it must be
the value of the unshared, un-partitioned view (the reference's ``--mig-strategy none``
without a config file). The MIG layout's profiles are held to the reference's own names of
them: the ``mig-<profile>`` families of ``--mig-strategy mixed``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from gfd.agent import compute_labels
from gfd.cli import parse_command_line
from gfd.config import ConfigError, resolve_settings
from gfd.config.host import HostPaths
from gfd.facts import NodeFacts
from gfd.labels import LABELERS, CycleInputs, LabelOptions, compose
from gfd.sim import BUNDLED_PROFILES, load_profile
from tests.conformance.test_differential import MIG_STRATEGIES, SHARING_CONFIGS
from tests.factories import make_facts, make_gpu
from tests.mig_factories import A100_SHAPES, a100, a100_split, mig

P = "nvidia.com/"
#: What the device plugin decides, and so what hardware mode never publishes.
DEVICE_PLUGIN_KEYS = (f"{P}gpu.replicas", f"{P}gpu.sharing-strategy", f"{P}mig.strategy")
#: The single strategy's description of one MIG device in the ``gpu.*`` keys, and the MPS
#: capability of the sharing config: the device plugin's view too.
DEVICE_PLUGIN_PATTERN = re.compile(
    r"nvidia\.com/(mig-.*|gpu\.(multiprocessors|slices\..*|engines\..*)|mps\.capable)$"
)
#: The MIG layout, hardware mode's own keys.
MIG_LAYOUT_PATTERN = re.compile(r"nvidia\.com/mig\.(enabled\.count|profile\..+\.count)$")
#: A product that names a MIG device or a shared GPU (the device plugin's suffixes).
PLUGIN_PRODUCT = re.compile(r"-MIG-|-SHARED$")

Labels = Mapping[str, str]


def labels_of(profile: str, argv: list[str], tmp_path: Path) -> Labels | None:
    """gfd's labels for ``profile`` with ``argv`` as flags, in-process (None: refused)."""
    from gfd.app.label_mode import label_options

    _, explicit = parse_command_line(argv)
    try:
        settings = resolve_settings(
            explicit, {}, host=HostPaths(service_account_dir=str(tmp_path / "none"))
        )
        label_set, _ = compute_labels(
            load_profile(profile).facts, label_options(settings, with_timestamp=False)
        )
    except ConfigError:
        return None
    return label_set.labels


@functools.cache
def config_file(tmp_root: Path, sharing: str) -> list[str]:
    text = SHARING_CONFIGS[sharing]
    if text is None:
        return []
    path = tmp_root / f"{sharing}.yaml"
    path.write_text(text)
    return ["--config-file", str(path)]


@pytest.mark.parametrize("profile", BUNDLED_PROFILES)
def test_both_modes_over_the_differential_matrix(profile: str, tmp_path: Path) -> None:
    facts = load_profile(profile).facts
    base = labels_of(profile, ["--mig-strategy", "none"], tmp_path)
    assert base is not None
    mixed = labels_of(profile, ["--mig-strategy", "mixed"], tmp_path)
    assert mixed is not None
    hardware_alone = labels_of(profile, ["--label-mode", "hardware"], tmp_path)
    assert hardware_alone is not None
    for strategy in MIG_STRATEGIES:
        for sharing in SHARING_CONFIGS:
            case = f"{profile} --mig-strategy {strategy} {sharing}"
            flags = ["--mig-strategy", strategy, *config_file(tmp_path, sharing)]
            today = labels_of(profile, flags, tmp_path)
            plugin = labels_of(profile, [*flags, "--label-mode", "device-plugin"], tmp_path)
            hardware = labels_of(profile, [*flags, "--label-mode", "hardware"], tmp_path)
            # device-plugin is the default: today's labels, refusals included.
            assert plugin == today, case
            if hardware is None:
                # Only a config file both modes read can be refused (replicas 1).
                assert plugin is None and sharing == "timeslicing-1", case
                continue
            # Hardware mode does not depend on how a device plugin would share or split.
            assert hardware == hardware_alone, case
            assert not set(DEVICE_PLUGIN_KEYS) & set(hardware), case
            assert not [k for k in hardware if DEVICE_PLUGIN_PATTERN.match(k)], case
            assert not PLUGIN_PRODUCT.search(hardware[f"{P}gpu.product"]), case
            layout = {k for k in hardware if MIG_LAYOUT_PATTERN.match(k)}
            assert set(hardware) - layout <= set(base), case
            for key in set(hardware) - layout:
                if plugin is not None and key in plugin and plugin[key] == base[key]:
                    assert hardware[key] == plugin[key], f"{case}: {key}"
                else:
                    # Rewritten by the strategy or sharing (or refused: MPS with MIG).
                    assert hardware[key] == base[key], f"{case}: {key}"
    assert_mig_layout(facts, hardware_alone, base, mixed)


def assert_mig_layout(facts: NodeFacts, hardware: Labels, base: Labels, mixed: Labels) -> None:
    """The MIG layout against the facts' MIG modes and the reference's profile names."""
    if base[f"{P}mig.capable"] != "true":
        assert not [k for k in hardware if MIG_LAYOUT_PATTERN.match(k)]
        return
    enabled = sum(1 for gpu in facts.gpus if gpu.mig_mode_current)
    assert hardware[f"{P}mig.enabled.count"] == str(enabled)
    profiles = {
        key[len(P) + len("mig-") : -len(".count")]: value
        for key, value in mixed.items()
        if key.startswith(f"{P}mig-") and key.endswith(".count")
    }
    assert {
        key[len(P) + len("mig.profile.") : -len(".count")]: value
        for key, value in hardware.items()
        if key.startswith(f"{P}mig.profile.")
    } == profiles


def test_the_matrix_reaches_every_kind_of_rewrite(tmp_path: Path) -> None:
    # The property above is only as strong as the cases it meets: MIG devices under single
    # and mixed, shared products, MPS refused with MIG.
    single = labels_of("dgx-a100-mig-single", ["--mig-strategy", "single"], tmp_path)
    assert single is not None and single[f"{P}gpu.product"].endswith("-MIG-1g.5gb")
    shared = labels_of("dgx-h100", config_file(tmp_path, "timeslicing-2"), tmp_path)
    assert shared is not None and shared[f"{P}gpu.product"].endswith("-SHARED")
    assert labels_of("hgx-h200-mig", config_file(tmp_path, "mps-2"), tmp_path) is None


# ------------------------------------------------------------------ the families, by mode


def test_every_family_names_the_modes_it_is_published_in() -> None:
    modes = {labeler.name: sorted(labeler.modes) for labeler in LABELERS}
    plugin_only = [name for name, mode in modes.items() if mode == ["device-plugin"]]
    hardware_only = [name for name, mode in modes.items() if mode == ["hardware"]]
    assert plugin_only == ["product", "MIG strategy", "MPS capability"]
    assert hardware_only == ["product (hardware)", "MIG layout"]
    assert all(mode == ["device-plugin", "hardware"] for mode in modes.values() if len(mode) > 1)


def test_auto_never_reaches_the_labels() -> None:
    # auto is decided per cycle by the assembly; a cycle computes in a decided mode.
    with pytest.raises(ValueError, match="label mode 'auto' is not decided"):
        compose(CycleInputs(make_facts(), LabelOptions(mode="auto")))


def hardware(facts: NodeFacts, **options: object) -> Labels:
    return compose(CycleInputs(facts, LabelOptions(mode="hardware", **options))).labels  # type: ignore[arg-type]


def test_hardware_mode_describes_mig_enabled_gpus_as_gpus() -> None:
    # Two A100s split as 3g.20gb+3g.20gb and 1g.5gb x 2 + 2g.10gb, one without MIG.
    facts = make_facts(
        [
            a100_split(0, "3g.20gb", "3g.20gb"),
            a100_split(1, "1g.5gb", "1g.5gb", "2g.10gb"),
            a100(2, mig_enabled=False),
        ]
    )
    labels = hardware(facts, mig_strategy="single")
    assert labels[f"{P}gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert (labels[f"{P}gpu.count"], labels[f"{P}gpu.memory"]) == ("3", "40960")
    assert {k: v for k, v in labels.items() if k.startswith(f"{P}mig.")} == {
        f"{P}mig.capable": "true",
        f"{P}mig.enabled.count": "2",
        f"{P}mig.profile.3g.20gb.count": "2",
        f"{P}mig.profile.1g.5gb.count": "2",
        f"{P}mig.profile.2g.10gb.count": "1",
    }


def test_mig_on_without_devices_is_the_dynamic_mig_state() -> None:
    # NVIDIA's DRA driver with dynamic MIG keeps MIG on and makes devices per claim.
    labels = hardware(make_facts([a100(0, mig_enabled=True), a100(1, mig_enabled=True)]))
    assert labels[f"{P}mig.enabled.count"] == "2"
    assert not [k for k in labels if k.startswith(f"{P}mig.profile.")]


def test_variants_and_compute_instances_are_named_as_in_every_gfd_label() -> None:
    # NVIDIA writes 1g.5gb+me; a label key cannot hold '+', so '.me' as in mig-<profile>.
    me = mig(A100_SHAPES["1g.5gb+me"], 0)
    one_c = mig(A100_SHAPES["3g.20gb"], 1, ci_slices=1)
    labels = hardware(make_facts([a100(0, me, one_c)]))
    assert labels[f"{P}mig.profile.1g.5gb.me.count"] == "1"
    assert labels[f"{P}mig.profile.1c.3g.20gb.count"] == "1"


def test_gpus_without_mig_get_no_layout() -> None:
    labels = hardware(make_facts([make_gpu(0, mig_mode_current=None, mig_mode_pending=None)]))
    assert labels[f"{P}mig.capable"] == "false"
    assert not [k for k in labels if MIG_LAYOUT_PATTERN.match(k)]


def test_mps_sharing_with_mig_is_no_error_in_hardware_mode() -> None:
    # The device plugin's MPS cannot share MIG devices (the device-plugin set refuses the
    # configuration); hardware mode publishes nothing of the sharing, so it has no conflict.
    from gfd.config import SharedResource, Sharing

    mps = Sharing("mps", resources=(SharedResource("nvidia.com/gpu", 2),))
    facts = make_facts([a100_split(0, "7g.40gb")])
    with pytest.raises(ConfigError, match="MPS sharing is not supported with MIG"):
        compose(CycleInputs(facts, LabelOptions(sharing=mps)))
    assert hardware(facts, sharing=mps)[f"{P}mig.profile.7g.40gb.count"] == "1"
