"""The tuner's predictor: acceptance, rollback metric and goodput at any K, from one
window's measured acceptance per position and the fitted step cost (`speed`). The
arithmetic is `specfleet.runtime.decoding`'s, shared with the simulated engine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.operator import speed
from specfleet.operator.api import (
    FittedStepCost,
    RollbackMetric,
    SpeculativeModelSpec,
)
from specfleet.operator.counts import Counts
from specfleet.operator.observations import TrackWindow
from specfleet.operator.rollback_metrics import ROLLBACK_METRICS
from specfleet.operator.stats import (
    conditional_acceptance,
    draft_acceptance_rate,
    extrapolate,
    mean_length,
    per_position,
)
from specfleet.runtime.decoding import expected_draft_acceptance_rate


@dataclass(frozen=True)
class Prediction:
    tokens: int
    acceptance_rate: float
    mean_length: float
    metric: float
    goodput: float


def k_words(k: int) -> str:
    """A K as messages name it."""
    return "plain decoding (K=0)" if k == 0 else f"K={k}"


def plain(batch: float, cost: FittedStepCost) -> Prediction:
    """Plain decoding at `batch`: one token a step, nothing drafted."""
    return Prediction(0, 0.0, 1.0, 0.0, goodput_at(1.0, 0, batch, cost))


def goodput_at(
    mean_length: float, k: int, batch: float, cost: FittedStepCost, drafted: int | None = None
) -> float:
    """Generated tokens per second of one pod at `batch` decoding requests (k=0: plain),
    `drafted` as in `speed.step_ms`."""
    running = max(1.0, batch)
    return running * mean_length * 1000.0 / speed.step_ms(cost, k, running, drafted)


def predict(
    conditional: Sequence[float],
    k: int,
    batch: float,
    metric: RollbackMetric,
    cost: FittedStepCost,
    cap: bool = False,
) -> Prediction:
    """Expected acceptance, acceptance length, rollback metric and goodput at K=k; with
    `cap` (vLLM's adaptive verification) k is the engine's cap: it drafts k and verifies
    the count at most k that pays best, so the goodput is the best of those."""
    rates = extrapolate(conditional, k)
    length = mean_length(conditional, k)
    good = goodput_at(length, k, batch, cost)
    if cap:
        good = max(goodput_at(mean_length(conditional, j), j, batch, cost, k) for j in range(k + 1))
    return Prediction(
        k,
        expected_draft_acceptance_rate(rates, k),
        length,
        ROLLBACK_METRICS[metric].expected(rates, k),
        good,
    )


def window_conditional(window: TrackWindow) -> list[float]:
    """Measured conditional acceptance per position of a window.

    Without the per-position series, a constant conditional equal to the draft acceptance
    rate is assumed: it under-predicts every K (acceptance falls with depth), which is the
    safe direction.
    """
    positions = [e.value for e in per_position(window)]
    if positions and any(positions):
        return conditional_acceptance(positions)
    return [draft_acceptance_rate(window).value]


def totals_conditional(counts: Counts) -> list[float]:
    """Measured conditional acceptance per position of a trial's totals at one K (none
    without drafts)."""
    if not counts.drafts:
        return []
    empty = TrackWindow(seconds=0.0, pod_seconds=0.0, pods=0, running_requests=0.0)
    return window_conditional(empty.with_counts(counts))


def remembered(measured: Sequence[float], known: Sequence[float] | None) -> list[float]:
    """Conditional acceptance per position to remember: `measured`, then past its last
    position the deeper ones `known`, as a deeper K last measured them."""
    return [*measured, *(known or [])[len(measured) :]]


def with_deeper(measured: Sequence[float], known: Sequence[float] | None) -> list[float]:
    """Conditional acceptance per position to predict from: `measured`, then past its
    last position the decay stats.extrapolate guesses, lowered where a deeper K measured
    less (`known`, moved by as much as the last position both have has moved since). A
    weak head's 0.07 at position 2 stays 0.07 where the decay from a first position of
    0.73 guesses 0.66, which predicted K=4 48% faster at every lapse of its rejection.
    Never raised: deeper positions measured under another traffic mix (code, where chat
    runs now) would predict deep Ks that mix no longer pays for."""
    depth = len(measured)
    if not known or len(known) <= depth or depth == 0 or min(measured[-1], known[depth - 1]) <= 0:
        return list(measured)
    moved = measured[-1] / known[depth - 1]
    guessed = extrapolate(measured, len(known))[depth:]
    return [*measured, *(min(g, c * moved) for g, c in zip(guessed, known[depth:], strict=True))]


def conditional_for(window: TrackWindow, good_acceptance: Sequence[float] | None) -> list[float]:
    """The conditional acceptance per position predictions start from: the window's,
    and past the positions it drafted, as a deeper K last measured them
    (`good_acceptance`, status.speculation.goodAcceptance)."""
    measured = window_conditional(window)
    if window.drafts == 0 and good_acceptance:
        # A window of a schedule's K=0 band drafted nothing: what was measured last.
        return list(good_acceptance)
    return with_deeper(measured, good_acceptance)


def predictions_at(
    spec: SpeculativeModelSpec,
    window: TrackWindow,
    good_acceptance: Sequence[float] | None,
    cost: FittedStepCost,
) -> dict[int, Prediction]:
    """Every K the spec allows, predicted at the window's batch (`conditional_for`)."""
    conditional = conditional_for(window, good_acceptance)
    return predict_ks(spec, conditional, window.batch_per_pod, cost)


def predict_ks(
    spec: SpeculativeModelSpec, conditional: Sequence[float], batch: float, cost: FittedStepCost
) -> dict[int, Prediction]:
    return {
        k: predict(
            conditional,
            k,
            batch,
            spec.rollback.metric,
            cost,
            bool(spec.draft.adaptive_verification),
        )
        for k in range(spec.speculation.min_tokens, spec.speculation.max_tokens + 1)
    }


def fastest_and_plain(
    spec: SpeculativeModelSpec, conditional: Sequence[float], batch: float, cost: FittedStepCost
) -> tuple[Prediction, float]:
    """The K the spec allows with the best predicted goodput, and plain decoding's."""
    fastest = max(predict_ks(spec, conditional, batch, cost).values(), key=lambda p: p.goodput)
    return fastest, plain(batch, cost).goodput
