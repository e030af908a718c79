"""Sinks: where labels go. This package owns the sink contract.

A sink takes one :class:`Publication` per cycle and makes the outside world match
it. Every sink is idempotent: publishing what is already there writes nothing and
returns ``False``. A sink raises :class:`gfd.base.errors.SinkError` (or its permanent
subclass) when it could not publish, leaving what it published before intact.

Sinks that talk to Kubernetes import the ``kubernetes`` client themselves, so the
feature-file and stdout paths never pay for it.

Which sinks a configuration gets, and how each is built from the settings, is the
registry in :mod:`gfd.app.sinks`: a new sink is its own file here and one entry there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Protocol

from gfd.base.frozen import frozen_dataclass


@frozen_dataclass
class Publication:
    """What one cycle publishes.

    ``labels`` are validated Kubernetes labels. ``annotations`` are extra node
    annotations (the topology matrix, an optional timestamp) for sinks that can
    carry them; sinks that cannot (feature file, stdout) ignore them.
    """

    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)


class Sink(Protocol):
    """Anything that can publish a :class:`Publication`."""

    #: Short name used in logs and metrics (``feature-file``, ``node``, ...).
    name: str

    def publish(self, publication: Publication) -> bool:
        """Make the target match ``publication``; return True if anything was written."""
        ...

    def close(self) -> None:
        """Release resources. Never removes what was published."""
        ...
