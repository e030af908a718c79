"""The sink registry: which sinks a configuration gets, in which order, and that each
registered kind builds the sink it names."""

from __future__ import annotations

import dataclasses
import io
import threading
from pathlib import Path

import pytest

from gfd.app.sinks import SINK_KINDS, SinkContext, SinkFactory
from gfd.base.errors import ConfigError
from gfd.config import Settings


def wanted(settings: Settings) -> list[str]:
    return [kind.name for kind in SINK_KINDS if kind.wanted(settings)]


def test_each_kind_builds_the_sink_it_names(tmp_path: Path) -> None:
    settings = Settings(
        output_file=str(tmp_path / "gfd"), node_name="node-1", namespace="gfd", pod_name="gfd-0"
    )
    # The Kubernetes sinks only keep their client until they publish.
    context = SinkContext(io.StringIO(), threading.Event(), client=object())
    built = {kind.name: kind.build(settings, context).name for kind in SINK_KINDS}
    assert built == {name: name for name in built}
    assert len(built) == len(SINK_KINDS)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, ["feature-file"]),
        ({"output_file": "-"}, ["stdout"]),
        ({"output_file": "", "print_labels": True}, ["stdout"]),
        ({"print_labels": True}, ["stdout", "feature-file"]),
        ({"no_output_file": True, "print_labels": True}, ["stdout"]),
        ({"no_output_file": True, "output_file": "-"}, []),
        ({"patch_node": True}, ["feature-file", "node"]),
        ({"use_node_feature_api": True, "no_output_file": True}, ["nodefeature"]),
        (
            {"patch_node": True, "use_node_feature_api": True, "print_labels": True},
            ["stdout", "feature-file", "node", "nodefeature"],
        ),
    ],
)
def test_the_settings_choose_the_sinks_in_publication_order(
    flags: dict[str, object], expected: list[str]
) -> None:
    assert wanted(dataclasses.replace(Settings(), **flags)) == expected


def test_file_sinks_are_built_without_a_kubernetes_client(tmp_path: Path) -> None:
    settings = Settings(output_file=str(tmp_path / "gfd"), print_labels=True)
    built = SinkFactory(threading.Event()).build(settings, io.StringIO())
    assert [sink.name for sink in built.sinks] == ["stdout", "feature-file"]
    assert built.client is None


def test_a_configuration_that_publishes_nowhere_is_refused() -> None:
    with pytest.raises(ConfigError, match="nothing to publish to"):
        SinkFactory(threading.Event()).build(Settings(no_output_file=True), io.StringIO())
