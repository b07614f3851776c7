"""A trial's statistics: each track's totals over its windows, and the goodput gain of
the candidate over the stable track with confidence bounds (one K, or a schedule)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from specfleet.operator import schedule, speed
from specfleet.operator.api import (
    FittedStepCost,
    RollbackMetric,
    ScheduledBand,
    TrackTotals,
)
from specfleet.operator.metrics import TrackWindow
from specfleet.operator.stats import (
    Z_ONE_SIDED_95,
    Estimate,
    wilson,
)


def totals_add(totals: TrackTotals, window: TrackWindow) -> TrackTotals:
    point = speed.measured(window)
    step = point[0] / 1000.0 if point else None
    return TrackTotals(
        counts=totals.counts + window,
        timed=totals.timed + window if step else totals.timed,
        seconds=totals.seconds + window.pod_seconds,
        windows=totals.windows + 1,
        timed_windows=totals.timed_windows + (1 if step else 0),
        step_seconds_sum=totals.step_seconds_sum + (step or 0.0),
        step_seconds_squares=totals.step_seconds_squares + (step or 0.0) ** 2,
    )


def totals_rate(totals: TrackTotals) -> Estimate:
    counts = totals.counts
    if counts.draft_tokens <= 0:
        return Estimate(0.0, 0.0, 1.0)
    return wilson(counts.accepted_tokens / counts.draft_tokens, counts.drafts)


def totals_metric(totals: TrackTotals, metric: RollbackMetric) -> Estimate | None:
    """A trial track's rollback metric over its windows (None: RelativeToBaseline, which a
    trial does not judge)."""
    if metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE:
        return totals_rate(totals)
    drafts = totals.counts.drafts
    if metric is RollbackMetric.FIRST_POSITION_ACCEPTANCE and drafts > 0:
        return wilson(totals.accepted_first / drafts, drafts)
    return None


def acceptance_length(totals: TrackTotals, rate: float) -> float:
    """Tokens a decoding request gets per step, 1 + accepted / drafts, at a rate of
    accepted draft tokens: measured draft lengths, not K (dspark, ngram, suffix and
    schedules draft fewer than K), the same count `schedule_gain` and
    `stats.mean_acceptance_length` use. A track with no drafts (plain decoding): 1."""
    counts = totals.counts
    return 1.0 + rate * counts.draft_tokens / counts.drafts if counts.drafts > 0 else 1.0


def _step_spread(totals: TrackTotals) -> float:
    """Relative standard error of a track's mean step time, from its windows' spread."""
    n = totals.timed_windows
    if n < 2 or totals.step_seconds_sum <= 0:
        return 0.0
    mean = totals.step_seconds_sum / n
    variance = max(0.0, (totals.step_seconds_squares - n * mean * mean) / (n - 1))
    return math.sqrt(variance / n) / mean


def goodput_gain(
    before: TrackTotals,
    before_k: int,
    after: TrackTotals,
    after_k: int,
    batch: float,
    cost: FittedStepCost,
) -> tuple[Estimate, str]:
    """Relative goodput gain of `after` over `before` at the same load, with bounds, and
    what it rests on.

    Goodput at a load is acceptance length over step time. With step times measured on
    both tracks, each track's own is used, the candidate's moved to the stable track's
    batch by the fitted cost (a faster K serves the same arrivals with fewer requests in
    flight: comparing raw step times would credit it with that). Without them both step
    times come from the fitted cost. Measured tokens per second would not do: below
    saturation both tracks serve exactly the offered load whatever their K. The low bound
    sets after's acceptance at its lower confidence bound and before's at its upper one,
    and the step times apart by their windows' spread.
    """
    a, b = totals_rate(after), totals_rate(before)
    measured = before.timed_windows > 0 and after.timed_windows > 0
    if measured:
        matched = before.timed.decode_steps / before.timed.engine_steps
        after_batch = after.timed.decode_steps / after.timed.engine_steps
        before_ms = 1000.0 * before.timed.decode_seconds / before.timed.decode_steps
        after_ms = (
            1000.0
            * after.timed.decode_seconds
            / after.timed.decode_steps
            * speed.step_ms(cost, after_k, matched)
            / speed.step_ms(cost, after_k, after_batch)
        )
        spread = Z_ONE_SIDED_95 * math.hypot(_step_spread(before), _step_spread(after))
        basis = f"measured step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {matched:.1f}"
    else:
        matched = batch
        before_ms = speed.step_ms(cost, before_k, batch)
        after_ms = speed.step_ms(cost, after_k, batch)
        spread = 0.0
        basis = f"modelled step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {batch:.1f}"

    # Tokens verified per draft as counted (acceptance_length): fewer than K where drafts
    # are shorter or the engine verifies below the K it was handed (adaptive verification).
    def gain(rate_after: float, rate_before: float, widen: float) -> float:
        speed_after = acceptance_length(after, rate_after) / (after_ms * (1 + widen))
        speed_before = acceptance_length(before, rate_before) / (before_ms * (1 - widen))
        return speed_after / speed_before - 1

    estimate = Estimate(
        gain(a.value, b.value, 0.0), gain(a.low, b.high, spread), gain(a.high, b.low, -spread)
    )
    return estimate, basis


def schedule_gain(
    before: TrackTotals,
    after: TrackTotals,
    after_bands: Sequence[ScheduledBand],
    cost: FittedStepCost,
) -> tuple[Estimate, str]:
    """Relative per-request speed of `after` over `before` when either runs a schedule.

    Each track's own decode: tokens (one a request-step, plus those accepted) over the
    step time its requests saw, with the candidate moved to the stable track's batch by
    the fitted cost at the K its bands (one band: one K) run there. With a K that varies by step
    `1 + rate * K` has no single K; this count does not need one. Bounds as in
    `goodput_gain`: acceptance at its bounds, step times apart by their spread.
    """
    a, b = totals_rate(after), totals_rate(before)
    matched = before.timed.decode_steps / before.timed.engine_steps
    after_batch = after.timed.decode_steps / after.timed.engine_steps

    k_after = schedule.k_at(after_bands, matched)
    moved = speed.step_ms(cost, k_after, matched) / speed.step_ms(cost, k_after, after_batch)
    spread = Z_ONE_SIDED_95 * math.hypot(_step_spread(before), _step_spread(after))

    def per_request(totals: TrackTotals, rate: float, scale: float) -> float:
        tokens = totals.timed.decode_steps + rate * totals.counts.draft_tokens
        return tokens / (totals.timed.decode_seconds * scale)

    def gain(rate_after: float, rate_before: float, widen: float) -> float:
        faster = per_request(after, rate_after, moved * (1 + widen))
        return faster / per_request(before, rate_before, 1 - widen) - 1

    after_ms = 1000.0 * after.timed.decode_seconds / after.timed.decode_steps * moved
    before_ms = 1000.0 * before.timed.decode_seconds / before.timed.decode_steps
    basis = f"measured step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {matched:.1f}"
    estimate = Estimate(
        gain(a.value, b.value, 0.0), gain(a.low, b.high, spread), gain(a.high, b.low, -spread)
    )
    return estimate, basis
