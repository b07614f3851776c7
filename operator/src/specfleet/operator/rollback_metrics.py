"""The rollback metrics (spec.rollback.metric), one row each: how a window and a trial's
totals measure it, what it is expected to be at a K, whether it caps K, what a window
needs to say anything of it, and its PromQL. A new metric is one row here and a value of
`api.RollbackMetric`; `specfleet crds` writes the rows' PromQL into the chart
(`alert_figures`: files/alert-figures.yaml, from which the AcceptanceBelowFloor
alert has a branch a metric; tests/test_rollback_metrics.py checks it renders each)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specfleet.operator.api import Rollback, RollbackMetric, SpeculativeModelSpec, TrackTotals
from specfleet.operator.observations import (
    ACCEPTED_PER_POS,
    ACCEPTED_TOKENS,
    DRAFT_TOKENS,
    DRAFTS,
    GENERATION_TOKENS,
    TrackWindow,
)
from specfleet.operator.stats import Estimate, draft_acceptance_rate, per_position, wilson
from specfleet.operator.trial_stats import totals_rate
from specfleet.runtime.decoding import expected_draft_acceptance_rate

# The operator's gauge of the figure the floor judged in a model's last window
# (observability exports it): RelativeToBaseline's, whose baseline only the operator knows.
ACCEPTANCE_JUDGED = "specfleet_acceptance_judged"
# Where a figure's PromQL puts the alert's window (the chart's alerts.*.window).
WINDOW = "WINDOW"


def stable_rate(counter: str, labels: str = "") -> str:
    """A vLLM counter's rate over the stable pods of each model, in PromQL: a canary's K is
    an experiment the operator ends by itself (`track!="canary"` also matches pods
    without the label)."""
    selector = f'{{track!="canary"{labels}}}'
    return f"sum by (namespace, model) (rate({counter}_total{selector}[{WINDOW}]))"


def _ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


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
    # Its figure of each model (namespace, model) in PromQL, over the alert's WINDOW: what
    # the chart's SpecfleetAcceptanceBelowFloor compares with the model's floor.
    promql: str
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
            promql=_ratio(stable_rate(ACCEPTED_TOKENS), stable_rate(DRAFT_TOKENS)),
        ),
        RollbackMetricKind(
            RollbackMetric.FIRST_POSITION_ACCEPTANCE,
            of_window=_first_position,
            of_totals=_first_position_of_totals,
            expected=lambda conditional, k: conditional[0] if conditional and k else 0.0,
            caps_k=False,
            promql=_ratio(stable_rate(ACCEPTED_PER_POS, ',position="0"'), stable_rate(DRAFTS)),
            needs_per_position=True,
        ),
        RollbackMetricKind(
            RollbackMetric.RELATIVE_TO_BASELINE,
            of_window=_relative_to_baseline,
            of_totals=lambda _: None,
            # Its baseline is re-measured when a K is promoted: 1.0 at every K.
            expected=lambda _conditional, _k: 1.0,
            caps_k=False,
            promql=f"max by (namespace, model) ({ACCEPTANCE_JUDGED})",
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


def alert_figures() -> dict[str, Any]:
    """What the chart's alerts read (files/alert-figures.yaml), each PromQL a list of
    its lines, with WINDOW for the alert's window: for AcceptanceBelowFloor each metric's
    figure, the figure judged where the operator exports nothing (the spec's default
    metric, against the chart's floor) and the drafts a second that make a window worth
    alerting on; for SpeculationInactive those drafts and the tokens served a second."""
    return {
        "metrics": [
            {"metric": kind.metric.value, "figure": kind.promql.splitlines()}
            for kind in ROLLBACK_METRICS.values()
        ],
        "withoutOperator": ROLLBACK_METRICS[Rollback().metric].promql.splitlines(),
        "draftsPerSecond": stable_rate(DRAFTS),
        "generationTokensPerSecond": stable_rate(GENERATION_TOKENS),
    }
