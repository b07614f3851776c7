"""The goodput gain's lower bound covers the true gain as often as it says: many simulated
trials with a known true gain (drafts accepted as a prefix, per-window step-time noise),
each bounded by `trial_stats.goodput_gain` as the tuner bounds a trial."""

from __future__ import annotations

import random

import pytest

from benchmarks import gain_coverage
from specfleet.operator import speed
from specfleet.operator.api import TrackTotals
from specfleet.operator.observations import TrackWindow
from specfleet.operator.trial_stats import goodput_gain, totals_add
from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import cumulative_acceptance
from tests.decisions import CODE

DRAFTS = gain_coverage.DRAFTS
TRIALS = 2000


def _lengths(k: int) -> tuple[list[int], list[float]]:
    """Accepted tokens per draft (0..k) and their probabilities: a prefix of CODE."""
    reach = [1.0, *cumulative_acceptance(CODE, k)]  # P(accepted >= j)
    weights = [reach[j] - (reach[j + 1] if j < k else 0.0) for j in range(k + 1)]
    return list(range(k + 1)), weights


def _window(rng: random.Random, k: int, step_ms: float, noise: float) -> TrackWindow:
    values, weights = _lengths(k)
    accepted = rng.choices(values, weights, k=DRAFTS)
    step = step_ms / 1000.0 * max(0.2, rng.gauss(1.0, noise))
    return gain_coverage.window_of(accepted, k, step)


def _true_gain(before_k: int, after_k: int, before_ms: float, after_ms: float) -> float:
    def length(k: int) -> float:
        return 1.0 + sum(cumulative_acceptance(CODE, k))

    return (length(after_k) / after_ms) / (length(before_k) / before_ms) - 1


@pytest.mark.parametrize(
    ("noise", "windows"),
    [(0.08, (9, 9)), (0.08, (3, 9)), (0.03, (3, 3)), (0.02, (9, 9))],
    ids=["noisy-9-9", "noisy-3-9", "calm-3-3", "calm-9-9"],
)
def test_the_gain_lower_bound_covers_the_true_gain_95_percent_of_the_time(
    noise: float, windows: tuple[int, int]
) -> None:
    """Nominal one-sided 95%: the true gain is at or above the lower bound in 93-97% of
    trials. (Counting the step spread on both tracks' sides, as the bound once did,
    covered ~0.998: a true +4% needed 174 windows to be promoted.)"""
    rng = random.Random(27)
    cost = speed.prior(Drafting.PARALLEL)
    before_k, after_k, before_ms, after_ms = 3, 6, 5.0, 5.4
    truth = _true_gain(before_k, after_k, before_ms, after_ms)
    covered = 0
    for _ in range(TRIALS):
        before, after = TrackTotals(), TrackTotals()
        for _ in range(windows[0]):
            before = totals_add(before, _window(rng, before_k, before_ms, noise))
        for _ in range(windows[1]):
            after = totals_add(after, _window(rng, after_k, after_ms, noise))
        gain, _ = goodput_gain(before, before_k, after, after_k, 1.0, cost)
        covered += gain.low <= truth
    assert 0.93 <= covered / TRIALS <= 0.97, covered / TRIALS


@pytest.mark.parametrize(
    "case",
    [c for c in gain_coverage.CASES if c.acceptance_noise > 0],
    ids=lambda c: c.name,
)
def test_the_bound_covers_the_true_gain_when_acceptance_varies_from_window_to_window(
    case: gain_coverage.Case,
) -> None:
    """Issue 47: the traffic mix moves each window's acceptance (as `engine.noise` does in
    the simulator). Counted over all drafts as one draw, it covered 0.82-0.93 (code at
    0.03 a window, no step noise: 0.82) and promoted a true +1.1% in 8% of trials."""
    result = gain_coverage.run_case(case, trials=600, seed=3)
    assert 0.93 <= result.coverage <= 0.985, result.coverage
    assert result.false_promotions <= 0.03, result.false_promotions
