"""The rollback metrics (spec.rollback.metric), one row each: how a window and a trial's
totals measure it, what it is expected to be at a K, whether it caps K, and what a
window needs to say anything of it. A new metric is one row here, a value of
`api.RollbackMetric` and its alert branch in the chart (tests/test_rollback_metrics.py
checks each metric has one)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specfleet.operator.api import RollbackMetric, SpeculativeModelSpec, TrackTotals
from specfleet.operator.observations import TrackWindow
from specfleet.operator.stats import Estimate, draft_acceptance_rate, per_position, wilson
from specfleet.operator.trial_stats import totals_rate
from specfleet.runtime.decoding import expected_draft_acceptance_rate


@dataclass(frozen=True)
class RollbackMetricKind:
    metric: RollbackMetric
    # A window's figure (given the rate its K was promoted at), None when it cannot say.
    of_window: Callable[[TrackWindow, float | None], Estimate | None]
    # A trial track's figure over its windows; None: a trial does not judge it.
    of_totals: Callable[[TrackTotals], Estimate | None]
    # Expected at K from conditional acceptance per position.
    expected: Callable[[Sequence[float], int], float]
    # It depends on K, so the floor chooses and refuses Ks; otherwise it judges the draft,
    # and rolling back to another K cannot help.
    caps_k: bool
    # A window without the per-position series is inconclusive.
    needs_per_position: bool = False
    # The first conclusive window at a K is its baseline: measured, not judged.
    needs_baseline: bool = False


def _first_position(window: TrackWindow, baseline: float | None) -> Estimate | None:
    positions = per_position(window)
    return positions[0] if positions else None


def _first_position_of_totals(totals: TrackTotals) -> Estimate | None:
    drafts = totals.counts.drafts
    return wilson(totals.accepted_first / drafts, drafts) if drafts > 0 else None


def _relative_to_baseline(window: TrackWindow, baseline: float | None) -> Estimate | None:
    if baseline is None or baseline <= 0:
        return None
    return draft_acceptance_rate(window).scaled(1 / baseline)


ROLLBACK_METRICS: Mapping[RollbackMetric, RollbackMetricKind] = {
    kind.metric: kind
    for kind in (
        RollbackMetricKind(
            RollbackMetric.DRAFT_ACCEPTANCE_RATE,
            of_window=lambda window, _: draft_acceptance_rate(window),
            of_totals=totals_rate,
            expected=expected_draft_acceptance_rate,
            caps_k=True,
        ),
        RollbackMetricKind(
            RollbackMetric.FIRST_POSITION_ACCEPTANCE,
            of_window=_first_position,
            of_totals=_first_position_of_totals,
            expected=lambda conditional, k: conditional[0] if conditional and k else 0.0,
            caps_k=False,
            needs_per_position=True,
        ),
        RollbackMetricKind(
            RollbackMetric.RELATIVE_TO_BASELINE,
            of_window=_relative_to_baseline,
            of_totals=lambda _: None,
            # Its baseline is re-measured when a K is promoted: 1.0 at every K.
            expected=lambda _conditional, _k: 1.0,
            caps_k=False,
            needs_baseline=True,
        ),
    )
}


def rollback_metric_of(spec: SpeculativeModelSpec) -> RollbackMetricKind:
    """The row of the model's spec.rollback.metric."""
    return ROLLBACK_METRICS[spec.rollback.metric]


def floor_caps_k(spec: SpeculativeModelSpec) -> bool:
    """Whether the model's floor chooses and refuses Ks (its metric depends on K)."""
    return rollback_metric_of(spec).caps_k
