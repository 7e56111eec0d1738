"""The reconcile limit follows the hub's write latency: it settles just above what a
saturated server serves at once, climbs back to ``most`` when the server keeps up, does
not climb on no evidence, and stays within its bounds. The server is modelled as one
that serves ``knee`` requests at once at ``base`` seconds each and shares itself among
more (processor sharing: each waits ``base * in_flight / knee``)."""

from __future__ import annotations

import itertools

from mcad.controller.inflight import BASE_S, LEAST, MIN_SAMPLES, WINDOW_S, InflightLimit

BASE = 0.005
JITTER = (1.0, 1.1, 1.3, 1.05, 1.2, 1.0, 1.15, 1.4)
"""Deterministic spread of one window's answers (the fastest at the base)."""


def run(limit: InflightLimit, *, windows: int, knee: float, used: float = 1.0,
        start: float = 0.0) -> list[int]:
    """``windows`` windows of answers with ``used`` of the limit in progress; the limit
    after each."""
    seen = []
    for w in range(windows):
        in_flight = max(1, round(limit.limit * used))
        rtt = BASE * max(1.0, in_flight / knee)
        opened = start + w * 2 * WINDOW_S
        for i, jitter in zip(range(MIN_SAMPLES), itertools.cycle(JITTER), strict=False):
            now = opened + i * WINDOW_S / (MIN_SAMPLES - 1)  # the last one reads it
            limit.observe(rtt * jitter, in_flight=in_flight, now=now)
        seen.append(limit.limit)
    return seen


def test_it_starts_at_most_and_holds_while_the_server_keeps_up() -> None:
    limit = InflightLimit(most=32)
    assert run(limit, windows=20, knee=64) == [32] * 20


def test_a_saturated_server_brings_it_down_to_a_short_line_above_what_it_serves() -> None:
    limit = InflightLimit(most=32, least=2)
    run(limit, windows=4, knee=64)  # the base learnt while the server kept up
    settled = run(limit, windows=30, knee=6)[-10:]
    # 6 served at once, 3 to 6 queued: settled between 9 and 12, not 32
    assert all(9 <= n <= 12 for n in settled), settled


def test_it_never_goes_under_least_nor_over_most() -> None:
    limit = InflightLimit(most=32)
    run(limit, windows=4, knee=64)
    assert min(run(limit, windows=30, knee=1)) == LEAST
    assert max(run(limit, windows=60, knee=64)) == 32
    assert InflightLimit(most=4).least == 4  # (a floor above the workers is the workers)


def test_it_climbs_back_to_most_once_the_server_keeps_up_again() -> None:
    limit = InflightLimit(most=32)
    run(limit, windows=4, knee=64)
    run(limit, windows=30, knee=2)
    assert limit.limit == LEAST
    climb = run(limit, windows=30, knee=64, start=100.0)
    assert climb[-1] == 32
    assert climb.index(32) < 20  # within ten seconds


def test_a_limit_little_used_does_not_climb() -> None:
    limit = InflightLimit(most=32)
    run(limit, windows=4, knee=64)
    run(limit, windows=30, knee=2)
    # a quiet hub: two in progress of eight, answered at the base: no evidence for more
    assert run(limit, windows=20, knee=64, used=0.25, start=100.0) == [LEAST] * 20


def test_a_window_is_read_only_with_enough_answers_and_time() -> None:
    limit = InflightLimit(most=32)
    for i in range(MIN_SAMPLES - 1):  # too few, however long
        assert not limit.observe(1.0, in_flight=32, now=10.0 * i)
    assert limit.base is None
    limit = InflightLimit(most=32)
    for _ in range(10 * MIN_SAMPLES):  # many, but at one moment
        assert not limit.observe(1.0, in_flight=32, now=0.0)
    assert limit.base is None


def test_the_base_is_forgotten_after_base_s() -> None:
    limit = InflightLimit(most=32)
    run(limit, windows=2, knee=64)
    assert limit.base == BASE * 1.125  # (the median of JITTER)
    for i in range(MIN_SAMPLES):
        limit.observe(0.050, in_flight=8, now=BASE_S + 10.0 + i)
    assert limit.base == 0.050  # the old low is out of its memory


def test_a_quiet_hub_neither_raises_nor_lowers_it() -> None:
    limit = InflightLimit(most=32)
    run(limit, windows=4, knee=64)
    # two in progress of 32, answered at the base: nothing of ours waits
    assert run(limit, windows=20, knee=64, used=2 / 32, start=100.0) == [32] * 20
