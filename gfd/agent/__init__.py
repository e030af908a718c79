"""The agent: one labelling cycle, and the loop's pacing and stop/reload control.

This package owns what the run loop (:mod:`gfd.app.run`) repeats and how it waits,
one concern a module:

- :mod:`gfd.agent.cycle`: :class:`Agent` (read the facts, derive the topology and the
  labels, publish to every sink, never raise from a cycle), the telemetry, health and
  label-mode hooks it reports to or asks, and :func:`compute_labels`, the pure facts-to-labels step;
- :mod:`gfd.agent.pacing`: :class:`Pacer`, the sleep between cycles with jitter, the
  spread of the first one, and the backoff after failures;
- :mod:`gfd.agent.control`: :class:`LoopControl`, the stop and reload requests the
  signal handlers set and the loop's sleep wakes on, and :class:`StopRequested`.

The names the assembly, the benchmarks and the tests use are importable from here.
"""

from gfd.agent.control import LoopControl as LoopControl
from gfd.agent.control import StopRequested as StopRequested
from gfd.agent.cycle import Agent as Agent
from gfd.agent.cycle import CycleOutcome as CycleOutcome
from gfd.agent.cycle import Derived as Derived
from gfd.agent.cycle import LabelModeChoice as LabelModeChoice
from gfd.agent.cycle import NullTelemetry as NullTelemetry
from gfd.agent.cycle import compute_labels as compute_labels
from gfd.agent.cycle import derive_topology as derive_topology
from gfd.agent.pacing import PHASE_SPREAD as PHASE_SPREAD
from gfd.agent.pacing import SLEEP_JITTER as SLEEP_JITTER
from gfd.agent.pacing import Pacer as Pacer
from gfd.agent.pacing import next_delay as next_delay
