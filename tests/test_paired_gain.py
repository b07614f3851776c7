"""An interleaved trial judged on matched pairs (issue 47): a pair compares the candidate
with what ran before at one load, load buckets are weighted by the tokens at stake, and the
bound comes from the spread within buckets, so that a gain that differs between loads is
not taken for noise."""

from __future__ import annotations

import math
import random

import pytest

from specfleet.operator.api import MatchedPair, PairSpread
from specfleet.operator.trial_stats import (
    ONE_SIDED_95,
    Stake,
    pair_spread,
    paired_gain,
    pooled_spread,
    resolvable_gain,
)

# A window's tokens grow with the requests in flight: one at 8 weighs 4 at 2.
TOKENS_PER_REQUEST = 1000.0


def pair(load: float, gain: float) -> MatchedPair:
    return MatchedPair(load=load, gain=gain, tokens=TOKENS_PER_REQUEST * load)


def weighted(gains: dict[float, float], weights: dict[float, float]) -> float:
    """The gain the buckets' log gains make, each by its weight."""
    total = sum(weights.values())
    return math.expm1(sum(w * math.log1p(gains[b]) for b, w in weights.items()) / total)


def test_without_a_load_history_the_pairs_are_weighted_by_their_own_tokens() -> None:
    pairs = [pair(2, 0.10), pair(2, 0.10), pair(8, -0.05)]
    gain, basis = paired_gain(pairs, ONE_SIDED_95)
    assert gain.value == pytest.approx(weighted({2: 0.10, 8: -0.05}, {2: 4000, 8: 8000}))
    assert "3 pairs of windows at matched load (batch 2.0 to 8.0)" in basis


def test_a_gain_that_differs_between_loads_is_not_taken_for_noise() -> None:
    """+10% at 2 in flight, -4% at 8, each pair within 0.5% of its bucket's gain: the
    bound is as narrow as that spread. Pooled as one sample, the two loads' gains
    would spread the pairs 14 points apart and no bound would exclude zero."""
    rng = random.Random(5)
    pairs = [pair(load, truth * (1 + rng.gauss(0, 0.005))) for load, truth in [(2, 0.10)] * 5]
    pairs += [pair(8, -0.04 + rng.gauss(0, 0.005)) for _ in range(4)]
    gain, _ = paired_gain(pairs, ONE_SIDED_95)
    truth = weighted({2: 0.10, 8: -0.04}, {2: 5 * 2000, 8: 4 * 8000})
    assert truth == pytest.approx(-0.0075, abs=0.001)
    assert gain.value == pytest.approx(truth, abs=0.004)
    assert gain.value - gain.low < 0.01


def test_without_two_pairs_in_one_bucket_there_is_no_bound() -> None:
    gain, _ = paired_gain([pair(2, 0.10), pair(8, 0.05)], ONE_SIDED_95)
    assert gain.low == -1.0 and gain.high == math.inf
    assert pair_spread([pair(2, 0.10), pair(8, 0.05)]) is None


@pytest.mark.parametrize("pairs", [3, 5, 9])
def test_the_lower_bound_covers_the_true_gain_95_percent_of_the_time(pairs: int) -> None:
    """Pairs at 2 and 8 in flight in a random mix (a trial's windows fall as the load
    flips), each pair's log gain its bucket's plus noise of 4%: the true gain, by the
    pairs' tokens, is at or above the lower bound in 93-97% of 2,000 trials."""
    rng = random.Random(11)
    truths = {2.0: 0.08, 8.0: -0.03}
    covered = judged = 0
    while judged < 2000:
        loads = [rng.choice([2.0, 8.0]) for _ in range(pairs)]
        drawn = [pair(b, math.expm1(math.log1p(truths[b]) + rng.gauss(0, 0.04))) for b in loads]
        gain, _ = paired_gain(drawn, ONE_SIDED_95)
        if gain.low == -1.0:
            continue  # no bucket with two pairs: nothing to bound
        weights = {b: sum(p.tokens for p in drawn if p.load == b) for b in set(loads)}
        covered += gain.low <= weighted(truths, weights)
        judged += 1
    assert 0.93 <= covered / judged <= 0.97, covered / judged


def test_the_load_history_weighs_the_buckets_by_the_tokens_at_stake() -> None:
    """The pairs ran mostly at 2 in flight; the hours the decision lives through serve
    three quarters of their tokens at 8: bucket 8's gain counts for three quarters."""
    pairs = [pair(2, 0.10), pair(2, 0.10), pair(2, 0.10), pair(8, -0.05), pair(8, -0.05)]
    stakes = [Stake(load=2, tokens=1, predicted=0.05), Stake(load=8, tokens=3, predicted=-0.02)]
    gain, basis = paired_gain(pairs, ONE_SIDED_95, stakes)
    assert gain.value == pytest.approx(weighted({2: 0.10, 8: -0.05}, {2: 1, 8: 3}))
    assert "over the last 2 intervals' load" in basis


def test_a_bucket_no_pair_ran_in_takes_the_fit_corrected_where_the_sides_differ() -> None:
    """Pairs at 2 in flight only, where the candidate gains 10% and the fit said 5%. At
    8 in flight the sides run one K: the same steps, no gain, whatever the fit's error.
    Where they differ there, the fit's -2% takes the pairs' correction (+10% for +5%)."""
    pairs = [pair(2, 0.10), pair(2, 0.10), pair(2, 0.10)]
    correction = math.log1p(0.10) - 0.05
    same = [Stake(load=2, tokens=1, predicted=0.05), Stake(load=8, tokens=1, predicted=0.0)]
    gain, basis = paired_gain(pairs, ONE_SIDED_95, same)
    assert gain.value == pytest.approx(math.expm1(math.log1p(0.10) / 2))
    assert "no pair ran" not in basis
    differ = [Stake(load=2, tokens=1, predicted=0.05), Stake(load=8, tokens=1, predicted=-0.02)]
    gain, basis = paired_gain(pairs, ONE_SIDED_95, differ)
    assert gain.value == pytest.approx(math.expm1((math.log1p(0.10) - 0.02 + correction) / 2))
    assert "near batch 8, 50% of the tokens at stake, no pair ran" in basis


def test_a_bucket_carried_by_the_pairs_correction_widens_the_bound() -> None:
    rng = random.Random(2)
    pairs = [pair(2, 0.10 + rng.gauss(0, 0.01)) for _ in range(4)]
    same = [Stake(load=2, tokens=1, predicted=0.05), Stake(load=8, tokens=1, predicted=0.0)]
    differ = [Stake(load=2, tokens=1, predicted=0.05), Stake(load=8, tokens=1, predicted=-0.02)]
    narrow, _ = paired_gain(pairs, ONE_SIDED_95, same)
    wide, _ = paired_gain(pairs, ONE_SIDED_95, differ)
    assert wide.value - wide.low > 1.5 * (narrow.value - narrow.low)


def test_the_gain_a_trial_can_prove_follows_the_spread_its_pods_measured() -> None:
    """9 pairs at a spread of 4% a pair: t(8) x 4% / 3; at 1%, a quarter of it."""
    noisy = PairSpread(squares=0.04**2 * 10, dof=10)
    calm = PairSpread(squares=0.01**2 * 10, dof=10)
    assert resolvable_gain(noisy, 9, ONE_SIDED_95) == pytest.approx(math.expm1(1.860 * 0.04 / 3))
    assert resolvable_gain(calm, 9, ONE_SIDED_95) < resolvable_gain(noisy, 9, ONE_SIDED_95) / 3.5


def test_an_older_spread_weighs_no_more_than_the_newest() -> None:
    old = PairSpread(squares=0.05**2 * 40, dof=40)
    new = PairSpread(squares=0.01**2 * 4, dof=4)
    pooled = pooled_spread(old, new)
    assert pooled is not None and pooled.dof == 8
    assert pooled.squares / pooled.dof == pytest.approx((0.05**2 + 0.01**2) / 2)
    assert pooled_spread(None, new) == new and pooled_spread(old, None) == old
