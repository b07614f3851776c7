"""The steps every trial shares, whatever its subject (a K, plain decoding, a schedule:
trials.py; a config: config_trials.py) and wherever it runs (a canary, in place):
its stable windows counted as its comparison, the canary held back by a Pending pod,
the goodput gain measured between the tracks, and the verdict on it with the words that
say it. Each subject describes itself in a `TrialSubject` and applies the verdict
(promotion and rejection differ by subject); the verdict is a value, the engine changes
no state but the totals it is asked to count."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.operator.api import FittedStepCost, ScheduledBand, TrackTotals
from specfleet.operator.outcomes import TrialOutcome
from specfleet.operator.run import Run
from specfleet.operator.stats import Estimate
from specfleet.operator.trial_stats import (
    Confidence,
    goodput_gain,
    schedule_gain,
    totals_add,
    totals_rate,
)
from specfleet.operator.windows import Judged, timed_k0_band

# A trial whose measured gain clears its required gain while its lower bound does not yet
# runs on, up to this many times its windows: a sequential test, not a fixed length.
TRIAL_EXTENSION = 3


@dataclass(frozen=True)
class Sides:
    """What a trial's candidate runs, and what it is compared with."""

    tokens: int  # the K the candidate runs (a schedule's largest)
    tried: list[ScheduledBand] | None  # the candidate's schedule (None: one K)
    before_tokens: int  # the K it is compared with (0: plain decoding)
    before: list[ScheduledBand] | None  # the schedule it is compared with


@dataclass(frozen=True)
class TrialSubject:
    """What a trial tries against what, and how its evidence is held up."""

    sides: Sides
    tried_words: str
    before_words: str
    required: float  # the goodput gain its lower bound must clear
    windows: int  # the candidate's windows measured at most (extended trials included)
    # The rollback metric over the candidate's windows (None: nothing drafts to measure),
    # and whether its lower bound must clear the floor; `margin`: its value must clear
    # floor + margin too (None: the floor alone).
    metric: Estimate | None
    floor_caps: bool
    margin: float | None
    confidence: Confidence  # the one-sided level of the gain's bounds


def count_stable(run: Run, totals: TrackTotals, stable: Judged, *, k0_band: bool) -> TrackTotals:
    """A canary trial's stable window added to its comparison: every one of the trial, the
    same hours and the same mix. Plain stable pods (a re-probe, speculation off) have no
    acceptance to judge: their speed counts. `k0_band`: so do a schedule's K=0-band
    windows with their step times (K trials count them; config trials never have)."""
    window = stable.window
    if window is None:
        return totals
    plain = run.sp.off is not None and window.generation_tokens > 0
    if stable.conclusive or plain or (k0_band and timed_k0_band(stable)):
        return totals_add(totals, window)
    return totals


def pending_seconds(run: Run, pending: float | None) -> float | None:
    """How long the canary pod has been Pending since `pending` (a timestamp), once past
    canaryPendingTimeout (no node for it: the trial goes on in place); None before."""
    limit = run.seconds(run.spec.tuning.canary_pending_timeout).total_seconds()
    if pending is None or run.now.timestamp() - pending < limit:
        return None
    return run.now.timestamp() - pending


def ready(stable: TrackTotals, canary: TrackTotals, windows: int) -> bool:
    """The candidate has its `windows`, and the stable pods one at least to compare with."""
    return canary.windows >= windows and stable.windows >= 1


def candidate_rate(canary: TrackTotals) -> float | None:
    """The acceptance rate the candidate's windows measured, for the history; None where
    they drafted nothing (plain decoding, or no window in yet)."""
    return totals_rate(canary).value if canary.counts.drafts else None


def measured_gain(
    subject: TrialSubject,
    stable: TrackTotals,
    canary: TrackTotals,
    batch: float,
    cost: FittedStepCost,
) -> tuple[Estimate, str]:
    """The goodput gain of the candidate's windows over the stable ones, and what it rests
    on: per-request speed where either side runs a schedule and both timed their steps
    (a schedule has no single K), else goodput at `batch`."""
    sides = subject.sides
    schedules = sides.tried is not None or sides.before is not None
    if schedules and stable.timed_windows and canary.timed_windows:
        after = sides.tried or [ScheduledBand(tokens=sides.tokens)]
        return schedule_gain(stable, canary, after, cost, subject.confidence)
    return goodput_gain(
        stable, sides.before_tokens, canary, sides.tokens, batch, cost, subject.confidence
    )


def verdict(
    run: Run, subject: TrialSubject, gain: Estimate, basis: str, windows: int
) -> tuple[TrialOutcome | None, str]:
    """What `windows` candidate windows measuring `gain` prove, and the summary that says
    why: GOODPUT_GAIN to promote; BELOW_FLOOR, BELOW_MARGIN or NO_GAIN to reject; None
    to measure on while the gain is promising but not proven."""
    metric, margin = subject.metric, subject.margin
    summary = (
        f"{subject.tried_words} vs {subject.before_words}: goodput {gain.value:+.1%} "
        f"(lower bound {gain.low:+.1%}, needs {subject.required:+.1%}; {basis})"
    )
    if metric is not None:
        name = run.spec.rollback.metric.value
        summary += (
            f", {name} {metric.value:.3f} (lower bound {metric.low:.3f}, floor {run.floor:.3f}"
            + (f" + margin {margin:.3f})" if margin is not None else ")")
        )
    if metric is not None and subject.floor_caps:
        # The candidate's measurement must confirm the floor (and margin) it was proposed
        # on, or noise would promote candidates that sit on the floor.
        if metric.low < run.floor:
            return TrialOutcome.BELOW_FLOOR, summary
        if margin is not None and metric.value < run.floor + margin:
            return TrialOutcome.BELOW_MARGIN, summary
    if gain.low >= subject.required:
        return TrialOutcome.GOODPUT_GAIN, summary
    if gain.value >= subject.required and windows < subject.windows:
        return None, summary
    return TrialOutcome.NO_GAIN, summary
