"""When the loop runs its next cycle: the sleep interval with jitter, the phase spread
after a (re)start of good cycles, and the backoff after failures."""

from __future__ import annotations

import random

#: Relative jitter applied to each sleep, so a fleet started together spreads out.
SLEEP_JITTER = 0.1
#: Half-width of the spread of the first sleep after a (re)start of good cycles, as a
#: fraction of the interval: one whole interval wide (see :class:`Pacer`).
PHASE_SPREAD = 0.5
#: First retry delay after a failed cycle; doubles up to the sleep interval.
RETRY_INITIAL_SECONDS = 1.0
_JITTER = random.Random()


class Pacer:
    """When the loop runs its next cycle, given how the last one went.

    After a success the loop sleeps the interval with :data:`SLEEP_JITTER`; after a
    failure it backs off (:func:`next_delay`). Agents that cycled in step, because a
    fleet was started together or an API server outage ended for all of them at once,
    would stay in step under a 10 % jitter for dozens of intervals: the API server
    would see the whole fleet every interval within a fraction of it. So the first
    sleep after the first success, and after the first success that ends a run of
    failures, is drawn from the whole range ``interval × [1 - PHASE_SPREAD, 1 + PHASE_SPREAD)``,
    which spreads the fleet evenly over one interval; the mean period is unchanged.
    """

    def __init__(self, sleep_interval: float | None, *, rng: random.Random | None = None) -> None:
        self.sleep_interval = sleep_interval
        self._rng = rng if rng is not None else _JITTER
        self._failures = 0
        self._in_phase = False

    def next_delay(self, ok: bool) -> float | None:
        """Seconds to sleep after a cycle that succeeded (``ok``) or failed; None: forever."""
        if not ok:
            self._failures += 1
            self._in_phase = False
            return next_delay(self.sleep_interval, self._failures, rng=self._rng)
        self._failures = 0
        if self.sleep_interval is not None and not self._in_phase:
            self._in_phase = True
            return self.sleep_interval * (1 + self._rng.uniform(-PHASE_SPREAD, PHASE_SPREAD))
        return next_delay(self.sleep_interval, 0, rng=self._rng)


def next_delay(
    sleep_interval: float | None, failures_in_a_row: int, *, rng: random.Random | None = None
) -> float | None:
    """Seconds until the next cycle: the interval with jitter, or a shorter backoff after failures."""
    chance = rng if rng is not None else _JITTER
    if failures_in_a_row > 0:
        backoff: float = RETRY_INITIAL_SECONDS * 2.0 ** min(failures_in_a_row - 1, 16)
        if sleep_interval is not None:
            backoff = min(backoff, sleep_interval)
        return backoff * (1 + chance.uniform(-SLEEP_JITTER, SLEEP_JITTER))
    if sleep_interval is None:
        return None
    return sleep_interval * (1 + chance.uniform(-SLEEP_JITTER, SLEEP_JITTER))
