"""The acceptance floor: counting failing windows, rolling back (last known good K, a
step down, a schedule's fallback), keeping the fastest K below it, disabling
speculation (or stopping it when plain decoding is faster: plain.py decides when), and
recovering above it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from specfleet.operator import schedule, speed
from specfleet.operator.api import (
    BelowFloorPolicy,
    ConditionType,
    LastKnownGood,
    ScheduledBand,
    SinceChange,
    SpeculationState,
    SpeculativeModelSpec,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.outcomes import ActionKind
from specfleet.operator.plain import PlainMeasure, how_measured, start_measuring
from specfleet.operator.prediction import (
    Prediction,
    conditional_for,
    fastest_and_plain,
    predictions_at,
    window_conditional,
)
from specfleet.operator.reprobes import held, remember_rejected, with_acceptance
from specfleet.operator.rollback_metrics import floor_caps_k, rollback_metric_of
from specfleet.operator.run import Run
from specfleet.operator.speculation_off import clear_below_floor, disable
from specfleet.operator.windows import Judged, stable_failing


def floor_message(run: Run, judged: Judged) -> str:
    low = judged.metric.low if judged.metric else float("nan")
    return (
        f"{run.spec.rollback.metric.value} lower bound {low:.3f} < "
        f"floor {run.floor:.3f} at K={run.sp.tokens}"
    )


@dataclass(frozen=True)
class StableCount:
    """A conclusive stable window counted against the floor: what was seen of the K since
    it changed, the acceptance a re-probe starts from, and whether a re-probe held."""

    since_change: SinceChange
    good_acceptance: list[float] | None
    reprobe_held: bool


def count_stable_window(
    spec: SpeculativeModelSpec, sp: SpeculationState, now: datetime, judged: Judged
) -> StableCount:
    seen = sp.since_change
    windows = seen.windows + 1
    if rollback_metric_of(spec).needs_baseline and seen.baseline_acceptance is None:
        # The first conclusive window at a K is its baseline: measured, not judged.
        baseline = round(judged.rate.value, 6) if judged.rate else None
        update = {"windows": windows, "baseline_acceptance": baseline, "failing_windows": 0}
        return StableCount(seen.model_copy(update=update), sp.good_acceptance, False)
    floor = spec.rollback.min_acceptance
    failing = seen.failing_windows + 1 if stable_failing(judged, floor) else 0
    good = sp.good_acceptance
    if failing == 0 and sp.schedule is None and judged.window is not None:
        # What a recovered draft is expected to do again: where a re-probe looks first.
        good = with_acceptance(good, window_conditional(judged.window))
    passing = failing == 0 and windows >= 2 * spec.rollback.failure_limit
    counted = seen.model_copy(update={"windows": windows, "failing_windows": failing})
    # A re-probe that held: the back-off starts over.
    return StableCount(counted, good, passing and held(sp.reprobing, now))


@dataclass(frozen=True)
class RollbackTo:
    """Where the stable pods roll back to: K=tokens (a ROLLBACK or a STEP_DOWN), the
    schedule in effect after (None: one K), the last known good after, and the words."""

    kind: ActionKind
    tokens: int
    schedule: list[ScheduledBand] | None
    good: LastKnownGood | None
    message: str


@dataclass(frozen=True)
class Rollback:
    """What failureLimit failing windows do: the Ks (or the schedule) not proposed again
    for reprobeAfter, and where the stable pods go; None: no K clears the floor, and
    `below_floor` decides, for `why`."""

    rejected_tokens: range
    rejected_schedule: list[ScheduledBand] | None
    to: RollbackTo | None
    why: str


def plan_rollback(run: Run, judged: Judged) -> Rollback:
    """failureLimit failing windows: last known good K, else step down, else (None) the
    fastest K if speculation still pays, or plain decoding. Changes nothing."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    current = sp.tokens
    why = floor_message(run, judged) + f" for {sp.since_change.failing_windows} windows"
    if not floor_caps_k(spec):
        return Rollback(range(0), None, None, why)
    if sp.schedule is not None:
        return _roll_back_schedule(run, judged, why)
    # A K that failed the floor is not proposed again, nor any larger one, for a while.
    rejected = range(current, spec.speculation.max_tokens + 1)
    predicted = predictions_at(run.spec, judged.window, run.sp.good_acceptance, run.cost)
    good = sp.last_known_good
    lkg = good.tokens if good else None
    if (
        lkg is not None
        and lkg != current
        and lkg in predicted
        and predicted[lkg].metric >= run.floor
    ):
        message = f"{why}; back to last known good K={lkg}"
        to = RollbackTo(ActionKind.ROLLBACK, lkg, None, good, message)
        return Rollback(rejected, None, to, why)
    k = _largest_clearing_below(run, predicted, current)
    if k is None:
        return Rollback(rejected, None, None, why)
    message = f"{why}; K={k} is the largest predicted to clear it ({predicted[k].metric:.3f})"
    stepped = LastKnownGood(tokens=k, schedule=good.schedule if good else None)
    to = RollbackTo(ActionKind.STEP_DOWN, k, None, stepped, message)
    return Rollback(rejected, None, to, why)


def rollback(run: Run, judged: Judged) -> None:
    """The rollback `plan_rollback` says, applied: the rejections remembered, the stable
    pods rolled back (or `below_floor`)."""
    planned = plan_rollback(run, judged)
    if planned.rejected_tokens or planned.rejected_schedule is not None:
        remember_rejected(run, tokens=planned.rejected_tokens, schedule=planned.rejected_schedule)
    to = planned.to
    if to is None:
        below_floor(run, judged, planned.why)
        return
    run.act(
        to.kind,
        "BelowFloor",
        to.message,
        warning=True,
        from_tokens=run.sp.tokens,
        to_tokens=to.tokens,
        acceptance=judged.metric.value if judged.metric else None,
        goodput=judged.goodput,
    )
    run.sp.last_known_good = to.good
    run.stable_runs(to.tokens, to.schedule)


def _largest_clearing_below(run: Run, predicted: Mapping[int, Prediction], k: int) -> int | None:
    """The largest K under k predicted to clear the floor with the margin, if any."""
    clearing = [j for j, p in predicted.items() if j < k and p.metric >= run.floor + run.margin]
    return max(clearing, default=None)


def _roll_back_schedule(run: Run, judged: Judged, why: str) -> Rollback:
    """A schedule fails as a whole: back to the last known good schedule if there is
    one, else to one K (the last known good, else the schedule's smallest drafting K);
    a failure after that goes down the chain for one K."""
    sp = run.sp
    assert sp.schedule is not None and judged.window is not None
    failed = sp.schedule
    good = sp.last_known_good
    lkg = good.schedule if good else None
    if lkg is not None and lkg != failed:
        k = schedule.largest(lkg)
        target = f"the last known good schedule, {schedule.describe(lkg)}"
        to = _schedule_back(failed, why, target, k, lkg, good)
        return Rollback(range(0), failed, to, why)
    k = (good.tokens if good else None) or min(schedule.drafting_ks(failed))
    # The one K is held to rollback()'s standard: predicted to clear the floor, else the
    # largest smaller K predicted to clear it with the margin, else below_floor.
    predicted = predictions_at(run.spec, judged.window, run.sp.good_acceptance, run.cost)
    if k in predicted and predicted[k].metric < run.floor:
        fails = f"K={k} is predicted {predicted[k].metric:.3f}"
        lower = _largest_clearing_below(run, predicted, k)
        if lower is None:
            return Rollback(range(0), failed, None, f"{why}; {fails}")
        target = f"K={lower} at every load ({fails}; K={lower} {predicted[lower].metric:.3f})"
        to = _schedule_back(failed, why, target, lower, None, LastKnownGood(tokens=lower))
        return Rollback(range(0), failed, to, why)
    one_k = LastKnownGood(tokens=good.tokens) if good is not None else None
    to = _schedule_back(failed, why, f"K={k} at every load", k, None, one_k)
    return Rollback(range(0), failed, to, why)


def _schedule_back(
    failed: list[ScheduledBand],
    why: str,
    target: str,
    k: int,
    after: list[ScheduledBand] | None,
    good: LastKnownGood | None,
) -> RollbackTo:
    message = f"{why}; schedule {schedule.describe(failed)} back to {target}"
    return RollbackTo(ActionKind.ROLLBACK, k, after, good, message)


@dataclass(frozen=True)
class BelowFloor:
    """What the floor does where no K clears it: a trial of plain decoding started first
    (`measure`: the reason it starts for), then the K in effect kept and flagged (`keep`:
    the words), or speculation disabled (`disable`: why)."""

    measure: str | None
    keep: str | None
    disable: str | None


def plan_below_floor(run: Run, judged: Judged, why: str) -> BelowFloor:
    """No K clears the floor. Plain decoding only if speculation no longer pays (or the
    policy asks for it); otherwise the fastest K stays, flagged AcceptanceBelowFloor.
    Changes nothing."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    current = sp.tokens
    fastest, plain = fastest_and_plain(
        spec,
        conditional_for(judged.window, run.sp.good_acceptance),
        judged.window.batch_per_pod,
        run.cost,
    )
    gain = fastest.goodput / plain - 1
    metric = judged.metric.value if judged.metric else None
    pays = f"K={fastest.tokens} is predicted {gain:+.1%} over plain decoding"
    # Within acceptanceMargin of the floor the draft is not broken: only speed decides.
    near = metric is not None and metric >= run.floor - run.margin
    if spec.rollback.below_floor is BelowFloorPolicy.KEEP_FASTEST and gain > 0 and near:
        return BelowFloor(None, f"{why}; no K clears it, but {pays}: keeping K={current}", None)
    if spec.rollback.below_floor is BelowFloorPolicy.KEEP_FASTEST and gain > 0:
        # Far under the floor (a broken draft): that speculation pays is a prediction,
        # and it rests on plain decoding's step, which the fit cannot tell from the Ks
        # it ran: plain decoding is measured before the K is kept, and a K that
        # measures slower than it is not kept.
        keeping = f"{why}; no K clears it, but {pays}"
        loses = _kept_k_loses(run, judged)
        if loses is None or sp.trial is not None:  # a trial running decides first
            how = None if _plain_measured(run, judged) else how_measured(run, judged)
            measure = keeping if how is PlainMeasure.START else None
            if how is not None and how.measured_first:
                keeping += "; plain decoding is measured first"
            return BelowFloor(measure, f"{keeping}: keeping K={current}", None)
        return BelowFloor(None, None, f"{why}; no K clears it and {loses}")
    if spec.rollback.below_floor is BelowFloorPolicy.DISABLE:
        return BelowFloor(
            None, None, f"{why}; no K clears it and rollback.belowFloor is Disable ({pays})"
        )
    reason = f"{why}; speculation no longer pays: {pays}"
    # Near the floor plain decoding's speed is measured before it is chosen
    # (plain.py). So it is where both steps are measured and the predicted loss is
    # within what one window's acceptance moves it: a noisy window is no measurement
    # of plain decoding. (With plain decoding unmeasured, a small predicted loss is
    # the fit's guess at its step, as a stale draft's -1.2% that measured -47%.)
    close = gain > -run.required_gain() and _plain_measured(run, judged)
    how = how_measured(run, judged) if near or close else None
    if how is not None and how.measured_first:
        measure = reason if how is PlainMeasure.START else None
        keep = f"{reason}; keeping K={current}: plain decoding is measured first"
        return BelowFloor(measure, keep, None)
    return BelowFloor(None, None, reason)


def below_floor(run: Run, judged: Judged, why: str) -> None:
    """What `plan_below_floor` says, applied."""
    planned = plan_below_floor(run, judged, why)
    if planned.measure is not None:
        start_measuring(run, judged, planned.measure)
    if planned.keep is not None:
        _keep_fastest(run, judged, planned.keep)
    else:
        assert planned.disable is not None
        metric = judged.metric.value if judged.metric else None
        disable(run, planned.disable, metric, judged.goodput)


def _plain_measured(run: Run, judged: Judged) -> bool:
    """Whether plain decoding has a step-time sample at the window's batch."""
    assert judged.window is not None
    return speed.matching(run.samples, 0, judged.window.batch_per_pod) is not None


def _kept_k_loses(run: Run, judged: Judged) -> str | None:
    """Why the K in effect is slower than plain decoding, both measured at the window's
    batch (their samples), for the acceptance the window measured; None when it is not
    (or either is unmeasured there)."""
    assert judged.window is not None and run.sp.tokens is not None
    k, batch = run.sp.tokens, judged.window.batch_per_pod
    samples = run.samples
    at_k, at_plain = speed.matching(samples, k, batch), speed.matching(samples, 0, batch)
    if at_k is None or at_plain is None:
        return None
    window = judged.window
    length = 1.0 + window.accepted_tokens / window.drafts if window.drafts > 0 else 1.0
    k_ms, plain_ms = samples[at_k].step_ms, samples[at_plain].step_ms
    gain = length * plain_ms / k_ms - 1
    if gain >= 0:
        return None
    return (
        f"K={k} measures {gain:+.1%} over plain decoding (step {k_ms:.3g} ms vs "
        f"{plain_ms:.3g} ms at batch {batch:.1f}, acceptance length {length:.2f})"
    )


def _keep_fastest(run: Run, judged: Judged, message: str) -> None:
    """The K in effect stays under the floor, flagged AcceptanceBelowFloor (an Event when
    it turns True; re-checked every window from then on)."""
    current = run.sp.tokens
    if condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR) != "True":
        run.act(
            ActionKind.KEEP_FASTEST,
            "NoKClearsFloor",
            message,
            warning=True,
            from_tokens=current,
            to_tokens=current,
            acceptance=judged.metric.value if judged.metric else None,
            goodput=judged.goodput,
        )
    run.sp.since_change.failing_windows = 0
    run.condition(ConditionType.ACCEPTANCE_BELOW_FLOOR, "True", "NoKClearsFloor", message)


def recovered(run: Run, judged: Judged) -> None:
    low = judged.metric.low if judged.metric else float("nan")
    message = (
        f"{run.spec.rollback.metric.value} lower bound {low:.3f} clears the floor "
        f"{run.floor:.3f} again at K={run.sp.tokens}"
    )
    run.act(ActionKind.ACCEPTANCE_RECOVERED, "AboveFloor", message, to_tokens=run.sp.tokens)
    clear_below_floor(run, "AboveFloor", message)
