"""Acceptance statistics of a window, with confidence bounds.

Definitions are vLLM's: draft acceptance rate = accepted / draft tokens, mean acceptance
length = 1 + accepted / drafts, per-position rate i = accepted at position i / drafts.

Bounds are one-sided 95% Wilson bounds. The tokens of one draft are not independent
(they are accepted as a prefix: a rejection ends the draft), so the effective sample size
of every rate here is the number of drafts, not of tokens: conservative, never optimistic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.operator.api import RollbackMetric
from specfleet.operator.metrics import TrackWindow
from specfleet.runtime.sim_model import expected_draft_acceptance_rate

Z_ONE_SIDED_95 = 1.6449


@dataclass(frozen=True)
class Estimate:
    """A point estimate with lower and upper confidence bounds."""

    value: float
    low: float
    high: float

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.value * factor, self.low * factor, self.high * factor)


def wilson(rate: float, trials: float, z: float = Z_ONE_SIDED_95) -> Estimate:
    """Wilson score bounds of a proportion `rate` observed over `trials` trials."""
    if trials <= 0:
        return Estimate(rate, 0.0, 1.0)
    p = min(1.0, max(0.0, rate))
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half))


def draft_acceptance_rate(window: TrackWindow) -> Estimate:
    """vLLM's accepted / drafted tokens, bounded with the drafts as sample size."""
    if window.draft_tokens <= 0:
        return Estimate(0.0, 0.0, 1.0)
    return wilson(window.accepted_tokens / window.draft_tokens, window.drafts)


def per_position(window: TrackWindow) -> list[Estimate]:
    """Acceptance of each draft position (the chance a draft got at least that far)."""
    if window.drafts <= 0:
        return []
    return [wilson(a / window.drafts, window.drafts) for a in window.accepted_per_position]


def mean_acceptance_length(window: TrackWindow) -> Estimate:
    """1 + accepted per draft; its bounds follow from the rate's (tokens per draft = K)."""
    if window.drafts <= 0:
        return Estimate(1.0, 1.0, 1.0)
    tokens_per_draft = window.draft_tokens / window.drafts
    rate = draft_acceptance_rate(window)
    return Estimate(
        1 + window.accepted_tokens / window.drafts,
        1 + rate.low * tokens_per_draft,
        1 + rate.high * tokens_per_draft,
    )


def conditional_acceptance(cumulative: list[float]) -> list[float]:
    """Per-position rates (cumulative: P(reached i)) to P(accept i | accepted i-1)."""
    conditional = []
    previous = 1.0
    for rate in cumulative:
        conditional.append(min(1.0, rate / previous) if previous > 0 else 0.0)
        previous = rate
    return conditional


def rollback_metric(
    window: TrackWindow, metric: RollbackMetric, baseline: float | None
) -> Estimate | None:
    """The rollback metric of a window, or None when the window cannot say.

    FirstPositionAcceptance needs the per-position series; RelativeToBaseline needs the
    rate measured at promotion (the caller records the first conclusive window as it).
    """
    if metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE:
        return draft_acceptance_rate(window)
    if metric is RollbackMetric.FIRST_POSITION_ACCEPTANCE:
        positions = per_position(window)
        return positions[0] if positions else None
    if baseline is None or baseline <= 0:
        return None
    return draft_acceptance_rate(window).scaled(1 / baseline)


def expected_rollback_metric(metric: RollbackMetric, conditional: Sequence[float], k: int) -> float:
    """The rollback metric expected at K=k from conditional acceptance per position.

    RelativeToBaseline is 1.0 at every K: its baseline is re-measured when a K is
    promoted, so the floor does not constrain which K may be chosen.
    """
    if metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE:
        return expected_draft_acceptance_rate(conditional, k)
    if metric is RollbackMetric.FIRST_POSITION_ACCEPTANCE:
        return conditional[0] if conditional and k else 0.0
    return 1.0
