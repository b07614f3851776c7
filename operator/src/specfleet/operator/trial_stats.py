"""A trial's statistics: each track's totals over its windows, and the goodput gain of
the candidate over the stable track with confidence bounds (one K, or a schedule)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.operator import schedule, speed
from specfleet.operator.api import (
    FittedStepCost,
    MatchedPair,
    PairSpread,
    ScheduledBand,
    TrackTotals,
)
from specfleet.operator.observations import TrackWindow
from specfleet.operator.stats import (
    Z_ONE_SIDED_95,
    Estimate,
    wilson,
)

# A trial whose measured gain clears its required gain while its lower bound does not yet
# runs on, up to this many times its windows: a sequential test, not a fixed length.
TRIAL_EXTENSION = 3


def step_batch(totals: TrackTotals) -> float:
    """Decoding requests per engine step over a track's timed windows."""
    return totals.timed.decode_steps / totals.timed.engine_steps


def totals_merge(one: TrackTotals, other: TrackTotals) -> TrackTotals:
    """Two tracks' sums as one (every field is a sum)."""
    return TrackTotals(
        counts=one.counts + other.counts,
        timed=one.timed + other.timed,
        seconds=one.seconds + other.seconds,
        windows=one.windows + other.windows,
        timed_windows=one.timed_windows + other.timed_windows,
        step_seconds_sum=one.step_seconds_sum + other.step_seconds_sum,
        step_seconds_squares=one.step_seconds_squares + other.step_seconds_squares,
        token_seconds_sum=one.token_seconds_sum + other.token_seconds_sum,
        token_seconds_squares=one.token_seconds_squares + other.token_seconds_squares,
    )


def totals_add(totals: TrackTotals, window: TrackWindow) -> TrackTotals:
    point = speed.measured(window)
    step = point[0] / 1000.0 if point else None
    # Seconds per token a request got: the window's step time over its tokens per step
    # (1 + accepted per decode step), so its spread holds acceptance's too.
    # Totals from before they were kept (timed windows, no sum) stay without: a sum of
    # the later windows alone would not be theirs.
    kept = totals.timed_windows == 0 or totals.token_seconds_sum > 0
    per_token = (
        step / (1.0 + window.accepted_tokens / window.decode_steps)
        if step and window.decode_steps > 0 and kept
        else 0.0
    )
    return TrackTotals(
        counts=totals.counts + window,
        timed=totals.timed + window if step else totals.timed,
        seconds=totals.seconds + window.pod_seconds,
        windows=totals.windows + 1,
        timed_windows=totals.timed_windows + (1 if step else 0),
        step_seconds_sum=totals.step_seconds_sum + (step or 0.0),
        step_seconds_squares=totals.step_seconds_squares + (step or 0.0) ** 2,
        token_seconds_sum=totals.token_seconds_sum + per_token,
        token_seconds_squares=totals.token_seconds_squares + per_token**2,
    )


def totals_rate(totals: TrackTotals) -> Estimate:
    counts = totals.counts
    if counts.draft_tokens <= 0:
        return Estimate(0.0, 0.0, 1.0)
    return wilson(counts.accepted_tokens / counts.draft_tokens, counts.drafts)


def acceptance_length(totals: TrackTotals, rate: float) -> float:
    """Tokens a decoding request gets per step, 1 + accepted / drafts, at a rate of
    accepted draft tokens: measured draft lengths, not K (dspark, ngram, suffix and
    schedules draft fewer than K), the same count `schedule_gain` and
    `stats.mean_acceptance_length` use. A track with no drafts (plain decoding): 1."""
    counts = totals.counts
    return 1.0 + rate * counts.draft_tokens / counts.drafts if counts.drafts > 0 else 1.0


@dataclass(frozen=True)
class Confidence:
    """A one-sided confidence level for a gain's bounds: Student's t quantiles for 1..30
    degrees of freedom, and past 30 the normal's. A mean step time from a few windows is
    known only to its t interval: with the normal's quantile, 3 windows a track would
    cover the true gain ~88% of the time, not 95%."""

    t: tuple[float, ...]
    z: float

    def quantile(self, dof: float) -> float:
        index = math.floor(dof) - 1
        return self.t[max(0, index)] if index < len(self.t) else self.z


ONE_SIDED_95 = Confidence(
    (
        6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
        1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
        1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
    ),
    Z_ONE_SIDED_95,
)  # fmt: skip
# An exploration is one of exploration.EXPLORATION_BUDGET tries of Ks the fit does not
# favour: the budget shares one 5% chance of a false promotion (Bonferroni), so that two
# explorations of Ks that gain 1.5% where 3% is needed do not promote one in 10% of runs.
ONE_SIDED_97_5 = Confidence(
    (
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ),
    1.9600,
)  # fmt: skip


def _step_variance(totals: TrackTotals) -> float | None:
    """Relative variance of a track's mean step time, from its windows' spread (None:
    under 2 timed windows, no spread to measure)."""
    return _relative_variance(
        totals.timed_windows, totals.step_seconds_sum, totals.step_seconds_squares
    )


def _token_variance(totals: TrackTotals) -> float | None:
    """Relative variance of a track's mean seconds per token, from its windows' spread:
    step time and acceptance as they vary together from window to window (None: under 2
    timed windows, or totals from before they were kept)."""
    return _relative_variance(
        totals.timed_windows, totals.token_seconds_sum, totals.token_seconds_squares
    )


def _relative_variance(n: int, total: float, squares: float) -> float | None:
    if n < 2 or total <= 0:
        return None
    mean = total / n
    variance = max(0.0, (squares - n * mean * mean) / (n - 1))
    return variance / n / (mean * mean)


def _accepted_error(totals: TrackTotals, rate: Estimate, low: bool) -> float:
    """Standard error of a track's count of accepted tokens. A draft's tokens are
    accepted as a prefix, so the per-position counts give each draft's accepted length's
    second moment (sum of (2j + 1) x accepted at j): its variance over drafts, not a
    binomial's over tokens. Counts that do not add up (or none): the Wilson bound's side."""
    counts = totals.counts
    drafts, positions = counts.drafts, counts.accepted_per_position
    if drafts > 0 and positions and math.isclose(sum(positions), counts.accepted_tokens):
        mean = counts.accepted_tokens / drafts
        second = sum((2 * j + 1) * c for j, c in enumerate(positions)) / drafts
        return math.sqrt(max(0.0, second - mean * mean) * drafts)
    half = rate.value - rate.low if low else rate.high - rate.value
    return half / Z_ONE_SIDED_95 * counts.draft_tokens


def _bounded(
    point: float,
    errors_low: tuple[float, float],
    errors_high: tuple[float, float],
    timed: tuple[TrackTotals, TrackTotals] | None,
    confidence: Confidence,
) -> Estimate:
    """The gain with one-sided 95% bounds on log(1 + gain): the relative variances of
    both tracks' mean step times (each counted once) and of both tracks' tokens per step
    (`errors_low`: after's and before's errors on the side that lowers the gain;
    `errors_high` the others) add up, at the t quantile of Welch-Satterthwaite's degrees
    of freedom (the acceptance counted over thousands of drafts is known to the normal's).
    Each pushed to its own bound instead counted the step spread twice and covered
    ~0.998, not 0.95. `timed`: the tracks whose windows measured step times (None:
    modelled steps, whose spread is not measured).

    Where both tracks kept their windows' seconds per token, that spread is the whole
    variance: it holds the step time's and the acceptance's as they vary from window to
    window (the traffic mix moves), and the draws within each window. The acceptance
    counted over all drafts as if one draw knows only the last, and covered the true gain
    0.82 of the time at a nominal 0.95 with acceptance varying 0.03 a window
    (benchmarks/gain_coverage.py)."""
    tokens = [
        (v, t.timed_windows - 1) for t in timed or () if (v := _token_variance(t)) is not None
    ]
    if timed is not None and len(tokens) == len(timed):
        errors_low = errors_high = (0.0, 0.0)
        steps = tokens
    else:
        steps = [
            (v, t.timed_windows - 1) for t in timed or () if (v := _step_variance(t)) is not None
        ]
    step_variance = sum(v for v, _ in steps)
    # Degrees of freedom: the step variances' only (the acceptance's are many).
    spread = sum(v * v / d for v, d in steps)

    def half(errors: tuple[float, float]) -> float:
        total = step_variance + errors[0] ** 2 + errors[1] ** 2
        quantile = confidence.quantile(total * total / spread) if spread > 0 else confidence.z
        return quantile * math.sqrt(total)

    ratio = 1.0 + point
    return Estimate(
        point, ratio * math.exp(-half(errors_low)) - 1, ratio * math.exp(half(errors_high)) - 1
    )


def goodput_gain(
    before: TrackTotals,
    before_k: int,
    after: TrackTotals,
    after_k: int,
    batch: float,
    cost: FittedStepCost,
    confidence: Confidence = ONE_SIDED_95,
) -> tuple[Estimate, str]:
    """Relative goodput gain of `after` over `before` at the same load, with bounds, and
    what it rests on.

    Goodput at a load is acceptance length over step time. With step times measured on
    both tracks, each track's own is used, the candidate's moved to the stable track's
    batch by the fitted cost (a faster K serves the same arrivals with fewer requests in
    flight: comparing raw step times would credit it with that). Without them both step
    times come from the fitted cost. Measured tokens per second would not do: below
    saturation both tracks serve exactly the offered load whatever their K. The bounds
    (`_bounded`) add each track's acceptance error and the step times' spread, once each.
    """
    a, b = totals_rate(after), totals_rate(before)
    measured = before.timed_windows > 0 and after.timed_windows > 0
    if measured:
        matched = step_batch(before)
        after_batch = step_batch(after)
        before_ms = 1000.0 * before.timed.decode_seconds / before.timed.decode_steps
        after_ms = (
            1000.0
            * after.timed.decode_seconds
            / after.timed.decode_steps
            * speed.step_ms(cost, after_k, matched)
            / speed.step_ms(cost, after_k, after_batch)
        )
        basis = f"measured step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {matched:.1f}"
    else:
        matched = batch
        before_ms = speed.step_ms(cost, before_k, batch)
        after_ms = speed.step_ms(cost, after_k, batch)
        basis = f"modelled step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {batch:.1f}"

    # Tokens verified per draft as counted (acceptance_length): fewer than K where drafts
    # are shorter or the engine verifies below the K it was handed (adaptive verification).
    length_a, length_b = acceptance_length(after, a.value), acceptance_length(before, b.value)
    point = (length_a / after_ms) / (length_b / before_ms) - 1

    def error(totals: TrackTotals, rate: Estimate, length: float, low: bool) -> float:
        """Relative error of a track's tokens per step (drafts x length of them)."""
        drafts = totals.counts.drafts
        return _accepted_error(totals, rate, low) / (drafts * length) if drafts > 0 else 0.0

    estimate = _bounded(
        point,
        (error(after, a, length_a, True), error(before, b, length_b, False)),
        (error(after, a, length_a, False), error(before, b, length_b, True)),
        # Modelled steps have no measured spread: only the acceptance is bounded.
        (before, after) if measured else None,
        confidence,
    )
    return estimate, basis


def schedule_gain(
    before: TrackTotals,
    after: TrackTotals,
    after_bands: Sequence[ScheduledBand],
    cost: FittedStepCost,
    confidence: Confidence = ONE_SIDED_95,
) -> tuple[Estimate, str]:
    """Relative per-request speed of `after` over `before` when either runs a schedule.

    Each track's own decode: tokens (one a request-step, plus those accepted) over the
    step time its requests saw, with the candidate moved to the stable track's batch by
    the fitted cost at the K its bands (one band: one K) run there. With a K that varies by step
    `1 + rate * K` has no single K; this count does not need one. Bounds as in
    `goodput_gain` (`_bounded`).
    """
    a, b = totals_rate(after), totals_rate(before)
    matched = step_batch(before)
    after_batch = step_batch(after)

    k_after = schedule.k_at(after_bands, matched)
    moved = speed.step_ms(cost, k_after, matched) / speed.step_ms(cost, k_after, after_batch)

    def tokens(totals: TrackTotals, rate: float) -> float:
        return totals.timed.decode_steps + rate * totals.counts.draft_tokens

    def error(totals: TrackTotals, rate: Estimate, low: bool) -> float:
        return _accepted_error(totals, rate, low) / tokens(totals, rate.value)

    faster = tokens(after, a.value) / (after.timed.decode_seconds * moved)
    point = faster / (tokens(before, b.value) / before.timed.decode_seconds) - 1
    estimate = _bounded(
        point,
        (error(after, a, True), error(before, b, False)),
        (error(after, a, False), error(before, b, True)),
        (before, after),
        confidence,
    )
    after_ms = 1000.0 * after.timed.decode_seconds / after.timed.decode_steps * moved
    before_ms = 1000.0 * before.timed.decode_seconds / before.timed.decode_steps
    basis = f"measured step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {matched:.1f}"
    return estimate, basis


def matched_pair(
    previous: TrackTotals,
    candidate: TrackTotals,
    candidate_bands: Sequence[ScheduledBand],
    load: float,
    cost: FittedStepCost,
) -> MatchedPair:
    """One timed window of each side at a matched `load`: the candidate's per-request
    decode speed over the previous side's (as `schedule_gain` counts it, the candidate
    moved to the previous side's batch by the fitted cost), weighted by the tokens the
    previous side decoded."""

    def tokens(window: TrackTotals) -> float:
        return window.timed.decode_steps + window.timed.accepted_tokens

    matched = step_batch(previous)
    batch = step_batch(candidate)
    k = schedule.k_at(candidate_bands, matched)
    moved = speed.step_ms(cost, k, matched) / speed.step_ms(cost, k, batch)
    faster = tokens(candidate) / (candidate.timed.decode_seconds * moved)
    was = tokens(previous) / previous.timed.decode_seconds
    return MatchedPair(load=load, gain=faster / was - 1, tokens=tokens(previous))


def _bucket(load: float) -> int:
    """A load bucket a factor of 2 wide: pairs in one are compared at one load."""
    return round(math.log2(max(load, 1e-9)))


def pair_spread(pairs: Sequence[MatchedPair]) -> PairSpread | None:
    """The pairs' log gains' spread within load buckets: the gain itself may differ
    between loads (a deep K gains at 2 in flight and loses at 8), which is the
    candidate's, not noise. None without two pairs in one bucket."""
    buckets: dict[int, list[MatchedPair]] = {}
    for pair in pairs:
        buckets.setdefault(_bucket(pair.load), []).append(pair)
    dof = len(pairs) - len(buckets)
    if dof < 1:
        return None
    squares = 0.0
    for members in buckets.values():
        centre = _mean_log(members)
        squares += sum((math.log1p(p.gain) - centre) ** 2 for p in members)
    return PairSpread(squares=squares, dof=dof)


def _mean_log(pairs: Sequence[MatchedPair]) -> float:
    total = sum(p.tokens for p in pairs)
    return sum(p.tokens * math.log1p(p.gain) for p in pairs) / total


def pooled_spread(one: PairSpread | None, other: PairSpread | None) -> PairSpread | None:
    """Two trials' spreads as one, the older weighing at most as much as the newer (the
    pods' noise changes with their traffic)."""
    if one is None or other is None:
        return one or other
    scale = min(1.0, other.dof / one.dof)
    return PairSpread(
        squares=one.squares * scale + other.squares,
        dof=max(1, round(one.dof * scale)) + other.dof,
    )


@dataclass(frozen=True)
class Stake:
    """One sample of the load a decision will live through: the tokens per ms the running
    side serves there, and the fit's log gain of the candidate (0 where both run one K)."""

    load: float
    tokens: float
    predicted: float


def paired_gain(
    pairs: Sequence[MatchedPair], confidence: Confidence, stakes: Sequence[Stake] | None = None
) -> tuple[Estimate, str]:
    """The candidate's gain from matched pairs, by load bucket: each bucket's pairs'
    mean log gain (weighted by their tokens), the buckets weighted by the tokens at stake:
    the load history's (`stakes`), else the pairs' own. A bucket of the history no pair
    ran in takes the fit's prediction, corrected by how far the measured buckets were
    from theirs (none where both sides run one K there: the same steps). Bounded by the
    pairs' spread within buckets (`pair_spread`; pooled totals counted the load's moves
    as spread) at its t quantile; without a spread: no bound."""
    measured: dict[int, list[MatchedPair]] = {}
    for pair in pairs:
        measured.setdefault(_bucket(pair.load), []).append(pair)
    means = {b: _mean_log(members) for b, members in measured.items()}
    loads = [p.load for p in pairs]
    basis = (
        f"{len(pairs)} pairs of windows at matched load (batch {min(loads):.1f} to "
        f"{max(loads):.1f}), weighted by the tokens at stake"
    )
    if stakes:
        weights, predicted = _history(stakes)
        basis += f" over the last {len(stakes)} intervals' load"
    else:
        tokens = {b: sum(p.tokens for p in members) for b, members in measured.items()}
        weights = {b: t / sum(tokens.values()) for b, t in tokens.items()}
        predicted = dict.fromkeys(weights, 0.0)
    # Coefficient of each measured bucket's mean in the estimate: its own weight, and its
    # share of the correction carried to the buckets no pair ran in.
    checked = {b: weights.get(b, 0.0) for b in means if predicted.get(b, 0.0) != 0.0}
    if sum(checked.values()) <= 0:
        checked = {b: 1.0 for b in means if predicted.get(b, 0.0) != 0.0}
    unmeasured = {b: w for b, w in weights.items() if b not in means and predicted[b] != 0.0}
    carried = sum(unmeasured.values())
    total_checked = sum(checked.values())
    correction = (
        sum(w * (means[b] - predicted[b]) for b, w in checked.items()) / total_checked
        if total_checked > 0
        else 0.0
    )
    estimate = sum(weights.get(b, 0.0) * m for b, m in means.items()) + sum(
        w * (predicted[b] + correction) for b, w in unmeasured.items()
    )
    coefficients = {
        b: weights.get(b, 0.0) + (carried * checked[b] / total_checked if b in checked else 0.0)
        for b in means
    }
    if unmeasured:
        edges = [2.0**b for b in unmeasured]
        basis += (
            f"; near batch {', '.join(f'{e:g}' for e in sorted(edges))}, {carried:.0%} of the "
            f"tokens at stake, no pair ran: the fit's prediction there, {correction:+.1%} as "
            "the pairs found it elsewhere"
        )
    spread = pair_spread(pairs)
    if spread is None:
        return Estimate(math.expm1(estimate), -1.0, math.inf), basis
    # Var = (a pair's variance) x sum over pairs of (coefficient x w / bucket's tokens)^2.
    factor = 0.0
    for b, members in measured.items():
        total = sum(p.tokens for p in members)
        factor += sum((coefficients[b] * p.tokens / total) ** 2 for p in members)
    half = confidence.quantile(spread.dof) * math.sqrt(spread.squares / spread.dof * factor)
    return (
        Estimate(math.expm1(estimate), math.expm1(estimate - half), math.expm1(estimate + half)),
        basis,
    )


def _history(stakes: Sequence[Stake]) -> tuple[dict[int, float], dict[int, float]]:
    """Each bucket's share of the tokens at stake over the load history, and the fit's log
    gain there (weighted by those tokens)."""
    tokens: dict[int, float] = {}
    gains: dict[int, float] = {}
    for stake in stakes:
        b = _bucket(stake.load)
        tokens[b] = tokens.get(b, 0.0) + stake.tokens
        gains[b] = gains.get(b, 0.0) + stake.tokens * stake.predicted
    total = sum(tokens.values())
    return (
        {b: t / total for b, t in tokens.items()},
        {b: gains[b] / t if t > 0 else 0.0 for b, t in tokens.items()},
    )


def resolvable_gain(spread: PairSpread, pairs: int, confidence: Confidence) -> float:
    """The smallest gain `pairs` equally weighted matched pairs prove (its lower bound
    above zero) at the pods' measured spread: a candidate predicted to gain less could
    not be promoted by its trial."""
    half = confidence.quantile(pairs - 1) * math.sqrt(spread.squares / spread.dof / pairs)
    return math.expm1(half)
