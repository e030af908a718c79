"""Fleet pacing: agents started together must not keep hitting the API server together.

The loop's :class:`gfd.agent.Pacer` spreads the first sleep after a (re)start of good
cycles over a whole interval. These cases check its bounds, and replay a 1,000-agent
fleet on a virtual clock (no sleeping) to check the goal the fleet benchmark measures:
after start-up, no second sees more than twice the average request rate.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter

import pytest

from gfd.agent import PHASE_SPREAD, SLEEP_JITTER, Pacer

INTERVAL = 60.0


def delays(pacer: Pacer, outcomes: list[bool]) -> list[float]:
    found = []
    for ok in outcomes:
        delay = pacer.next_delay(ok)
        assert delay is not None
        found.append(delay)
    return found


def test_the_first_sleep_after_a_success_spans_a_whole_interval() -> None:
    firsts = [Pacer(INTERVAL, rng=random.Random(seed)).next_delay(True) for seed in range(2000)]
    low, high = INTERVAL * (1 - PHASE_SPREAD), INTERVAL * (1 + PHASE_SPREAD)
    assert all(d is not None and low <= d <= high for d in firsts)
    spread = [d for d in firsts if d is not None]
    assert min(spread) < low + 0.05 * INTERVAL and max(spread) > high - 0.05 * INTERVAL
    assert abs(sum(spread) / len(spread) - INTERVAL) < 0.05 * INTERVAL


def test_later_sleeps_keep_the_small_jitter() -> None:
    later = delays(Pacer(INTERVAL, rng=random.Random(1)), [True] * 200)[1:]
    assert all(abs(d / INTERVAL - 1) <= SLEEP_JITTER for d in later)


def test_failures_back_off_and_the_first_success_after_them_spreads_again() -> None:
    pacer = Pacer(INTERVAL, rng=random.Random(2))
    got = delays(pacer, [True, True, False, False, False, True, True])
    assert [round(d) for d in got[2:5]] == pytest.approx([1, 2, 4], abs=1)
    assert abs(got[6] / INTERVAL - 1) <= SLEEP_JITTER
    spread_again = [
        delays(Pacer(INTERVAL, rng=random.Random(seed)), [True, False, True])[2]
        for seed in range(500)
    ]
    assert min(spread_again) < INTERVAL * 0.6 and max(spread_again) > INTERVAL * 1.4


def test_an_infinite_interval_sleeps_forever_after_success() -> None:
    pacer = Pacer(None, rng=random.Random(3))
    assert pacer.next_delay(True) is None
    assert pacer.next_delay(False) == pytest.approx(1.0, rel=SLEEP_JITTER)


def test_a_fleet_started_together_spreads_to_an_even_request_rate() -> None:
    agents, interval, horizon = 1000, 5.0, 60.0
    rng = random.Random(11)
    pacers = [Pacer(interval, rng=random.Random(rng.random())) for _ in range(agents)]
    # Every agent cycles at t=0, then whenever its pacer says; one request per cycle.
    queue = [(0.0, index) for index in range(agents)]
    per_second: Counter[int] = Counter()
    while queue:
        at, index = heapq.heappop(queue)
        if at >= horizon:
            continue
        per_second[int(at)] += 1
        delay = pacers[index].next_delay(True)
        assert delay is not None
        heapq.heappush(queue, (at + delay, index))
    after_startup = [per_second[s] for s in range(int(interval), int(horizon))]
    average = sum(after_startup) / len(after_startup)
    assert average == pytest.approx(agents / interval, rel=0.05)
    # The goal is 2x; an even spread keeps well inside it, a fleet in step does not.
    assert max(after_startup) <= 1.5 * average, after_startup
