"""Trials of a candidate K, plain decoding or a schedule: what they do their own way over
trial_engine's lifecycle. Start (canary, in place, or interleaved where the pods take K
hot), what the candidate is compared with and held to and what each step does (`KTrial`,
the kind `trial_engine.feed` runs), and end (promote or abort, reject for a while)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specfleet.operator import hot_schedules, schedule, trial_engine
from specfleet.operator.api import (
    ConditionType,
    LastKnownGood,
    Off,
    PairSpread,
    Placement,
    ScheduledBand,
    TrackTotals,
    Trial,
    TuningStrategy,
)
from specfleet.operator.observations import Observation
from specfleet.operator.outcomes import ActionKind, TrialOutcome, TrialStart
from specfleet.operator.prediction import (
    k_words,
    totals_conditional,
    with_deeper,
)
from specfleet.operator.reprobes import (
    Reprobe,
    next_reprobe,
    reenable,
    remember_rejected,
    with_acceptance,
)
from specfleet.operator.rollback_metrics import floor_caps_k, rollback_metric_of
from specfleet.operator.run import Run
from specfleet.operator.speculation_off import stop_speculation
from specfleet.operator.stats import Estimate
from specfleet.operator.trial_engine import (
    Ended,
    Sides,
    TrialSubject,
    Turn,
    candidate_rate,
    measured_gain,
)
from specfleet.operator.trial_stats import (
    ONE_SIDED_95,
    ONE_SIDED_97_5,
    TRIAL_EXTENSION,
    Stake,
    pair_spread,
    paired_gain,
    pooled_spread,
    step_batch,
)
from specfleet.operator.windows import Judged, stable_failing


def start_trial(
    run: Run,
    judged: Judged,
    k: int,
    candidate: list[ScheduledBand] | None,
    message: str,
    why: TrialStart = TrialStart.PREDICTED_GAIN,
) -> None:
    """A trial of K=k, or of the schedule `candidate`: interleaved where the stable pods
    take K hot (plain decoding, k=0, is never interleaved), else in place or on a canary
    as the strategy says."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    before = Turn(sp.tokens, sp.schedule)
    if k > 0 and hot_schedules.in_effect(spec, run.status):
        # Both sides see the load of the same hours, which a baseline measured before the
        # switch does not; a change of schedule costs the window it lands in (observations
        # cut it).
        placement = Placement.INTERLEAVED
        said = (
            f"{message}; alternating with K={before.tokens} window by window on the stable "
            "pods (hot: no restart, no canary)"
        )
    elif run.trials_in_place:
        # The baseline is measured after the proposal, not taken from the window that
        # proposed it: a window is proposed on for looking bad, so judging against it
        # credits the candidate with that window's noise (the winner's curse).
        placement = Placement.BEFORE
        said = (
            f"{message}; K={before.tokens} measured for {_baseline_windows(run)} more "
            "windows first, as the baseline"
        )
    else:
        placement, said = Placement.CANARY, message
    record = Trial(
        tokens=k,
        schedule=candidate,
        started_at=run.now,
        stable_replicas=spec.replicas,
        explores=why is TrialStart.EXPLORE,
    )
    trial_engine.start(run, KTrial(run), record, placement, before)
    run.act(
        ActionKind.START_CANARY if placement is Placement.CANARY else ActionKind.START_IN_PLACE,
        why,
        said,
        from_tokens=before.tokens,
        to_tokens=k,
        acceptance=judged.metric.value if judged.metric else None,
        goodput=judged.goodput,
    )


def start_reprobe(run: Run, reprobe: Reprobe) -> None:
    """A re-probe on a canary when the strategy has one (the stable pods keep decoding
    plainly until the trial is promoted); in place, speculation back on at its K."""
    k, why, cause = reprobe.tokens, reprobe.why, reprobe.cause
    if not run.trials_in_place:
        record = Trial(tokens=k, started_at=run.now, stable_replicas=run.spec.replicas)
        trial_engine.start(run, KTrial(run), record, Placement.CANARY)
        run.act(ActionKind.REPROBE, why, f"re-probing K={k} on a canary after {cause}", to_tokens=k)
        return
    run.act(
        ActionKind.REPROBE,
        why,
        f"speculation re-enabled at K={k} after {cause}",
        to_tokens=k,
    )
    reenable(run, k)
    run.condition(ConditionType.SPECULATION_ACTIVE, "Unknown", "Reprobing", f"re-probing K={k}")


class KTrial:
    """A trial of a K, plain decoding or a schedule, as the trial engine runs it."""

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def windows(self) -> int:
        return self.run.spec.tuning.canary_windows

    @property
    def k0_band(self) -> bool:
        return True

    @property
    def may_go_in_place(self) -> bool:
        return True

    def measured_before(self, record: Trial, added: bool) -> bool:
        return record.stable.windows >= _baseline_windows(self.run)  # counted so far

    def waits_for_canary(self, record: Trial, pending: bool) -> bool:
        return False  # a canary Pending too long ends the trial (fall_back_in_place)

    def failing_window(self, canary: Judged) -> str | None:
        run = self.run
        if not (floor_caps_k(run.spec) and stable_failing(canary, run.floor)):
            return None
        low = canary.metric.low if canary.metric else float("nan")
        return (
            f"canary {run.spec.rollback.metric.value} lower bound {low:.3f} < floor {run.floor:.3f}"
        )

    def failing_totals(self, record: Trial) -> str | None:
        return None  # each canary window is held to the floor as it comes

    def subject(self, record: Trial) -> TrialSubject | Ended:
        run, trial, spec = self.run, record, self.run.spec
        sides = _sides(run, trial)
        tried, before = sides.tried, sides.before
        if (tried is not None or before is not None) and not (
            trial.stable.timed_windows and trial.canary.timed_windows
        ):
            message = "a schedule is judged on the step times its pods measure; they export none"
            return Ended(TrialOutcome.NO_STEP_TIMES, message)
        return TrialSubject(
            sides=sides,
            tried_words=schedule.describe(tried) if tried else k_words(trial.tokens),
            before_words=schedule.describe(before) if before else f"K={sides.before_tokens}",
            required=_required(run, trial),
            # An exploration is a fixed-length test: each look of a sequential one is
            # another chance of a false promotion, and an exploration is already one of
            # several tries.
            windows=(1 if trial.explores else TRIAL_EXTENSION) * spec.tuning.canary_windows,
            metric=None if trial.plain else rollback_metric_of(spec).of_totals(trial.canary),
            floor_caps=floor_caps_k(spec),
            margin=run.margin,
            confidence=ONE_SIDED_97_5 if trial.explores else ONE_SIDED_95,
        )

    def measure(self, record: Trial, subject: TrialSubject, batch: float) -> tuple[Estimate, str]:
        """Over matched pairs where the trial interleaves, else between the tracks' totals;
        over the load history where a schedule is learned for it."""
        run, trial = self.run, record
        sides = _sides(run, trial)
        model = _load_model(run, trial, sides)
        pairs = trial.in_place.pairs if trial.in_place else None
        if pairs:
            stakes = model.stakes(run) if model is not None else None
            return paired_gain(pairs, subject.confidence, stakes)
        gain, basis = measured_gain(subject, trial.stable, trial.canary, batch, run.cost)
        if model is None:
            return gain, basis
        gain, over = _over_load(run, gain, model, _measured_at(trial.stable, batch))
        return gain, f"{basis}; {over}"

    def ended_unfed(self, record: Trial, observation: Observation) -> Ended | None:
        if self.run.spec.tuning.enabled:
            return None
        return Ended(TrialOutcome.TUNING_DISABLED, "spec.tuning.enabled is false")

    def keep(self, record: Trial) -> None:
        self.run.sp.trial = record

    def overdue(self, record: Trial) -> Ended | None:
        """A trial that has not gathered its windows in the longest time they can take
        ends inconclusive."""
        run, spec = self.run, self.run.spec
        started = record.started_at
        interval = spec.tuning.interval.length
        # Each canary window may grow up to maxWindowAge before it is conclusive.
        longest = max(interval, spec.tuning.max_window_age.length)
        deadline = (
            longest * spec.tuning.canary_windows * TRIAL_EXTENSION
            + interval * spec.tuning.max_inconclusive_windows
            + spec.tuning.canary_pending_timeout.length
        )
        if run.now - started <= deadline:
            return None
        return Ended(
            TrialOutcome.CANARY_INCONCLUSIVE,
            f"{record.canary.windows} of {spec.tuning.canary_windows} conclusive windows "
            f"after {run.now - started}",
        )

    def fall_back_in_place(self, record: Trial, pending: float, waiting: str | None) -> None:
        """Past canaryPendingTimeout the trial ends, and the next runs in place."""
        run, spec = self.run, self.run.spec
        message = (
            f"the canary pod has been Pending for {pending:.0f}s "
            f"(> {spec.tuning.canary_pending_timeout})"
            + (f", the scheduler says: {waiting}" if waiting else "")
            + f"; trying K={record.tokens} in place instead"
        )
        run.sp.strategy = TuningStrategy.IN_PLACE
        reason = TrialOutcome.CANARY_PENDING
        end_trial(run, promote=False, reason=reason, message=message, reject=False)
        run.act(
            ActionKind.IN_PLACE_FALLBACK,
            "CanaryPending",
            message,
            warning=True,
            from_tokens=run.sp.tokens,
            to_tokens=run.sp.tokens,
        )

    def wait_for_canary(self, record: Trial, why: str | None) -> None:
        """Never asked: a K trial does not wait (`waits_for_canary`)."""

    def canary_runs(self, record: Trial) -> None:
        """Nothing to say: a K trial never waited for its canary."""

    def switch(self, record: Trial) -> None:
        """The stable pods change to the candidate."""
        # A new part, not an edit of it: the record the engine was handed shares it.
        assert record.in_place is not None
        switched = record.in_place.model_copy(update={"switched": True})
        self.run.sp.trial = trial = record.model_copy(update={"in_place": switched})
        # Plain decoding is no K: the stable pods stop drafting (SpeculationState.stable_k),
        # and the K before stays the one a rejection goes back to.
        self.run.stable_runs(None if trial.plain else trial.tokens, trial.schedule)

    def end(self, record: Trial, ended: Ended) -> None:
        outcome = ended.outcome
        # A schedule without step times says nothing against its candidate.
        reject = outcome is not TrialOutcome.NO_STEP_TIMES
        promote = outcome is TrialOutcome.GOODPUT_GAIN
        end_trial(self.run, promote=promote, reason=outcome, message=ended.message, reject=reject)


def _required(run: Run, trial: Trial) -> float:
    """The gain a trial's lower bound must clear. Interleaved, the candidate was proposed
    on what its pairs can prove and switching back costs nothing: it must prove it is
    faster. In place the restart is paid, and going back costs another: the candidate
    stays on proof of minImprovement. A canary's promotion rolls the stable pods: it must
    repay that restart too."""
    if trial.placement is Placement.CANARY:
        return run.required_gain()
    return 0.0 if trial.placement is Placement.INTERLEAVED else run.spec.tuning.min_improvement


def _baseline_windows(run: Run) -> int:
    """Windows an in-place baseline takes: as many as its trial may (TRIAL_EXTENSION x
    canaryWindows). It cannot grow after the switch, and with few windows the spread of
    its mean step time is known only to a wide t interval (3 windows: t = 2.92)."""
    return TRIAL_EXTENSION * run.spec.tuning.canary_windows


def _sides(run: Run, trial: Trial) -> Sides:
    """A trial's candidate against what it is compared with: plain decoding
    (K=0) for a re-probe, the K before an in-place trial, else the stable K; the schedule
    before an in-place trial, none for a re-probe (plain decoding, not what ran before),
    else the stable pods'."""
    sp = run.sp
    if trial.in_place:
        before_k = 0 if sp.off is not None else trial.in_place.previous_tokens
        return Sides(trial.tokens, trial.schedule, before_k, trial.in_place.previous_schedule)
    if sp.off is not None:
        return Sides(trial.tokens, trial.schedule, 0, None)
    assert sp.tokens is not None
    return Sides(trial.tokens, trial.schedule, sp.tokens, sp.schedule)


def _measured_at(stable: TrackTotals, batch: float) -> float:
    """The batch a trial's gain is measured at: its stable windows' (the candidate's are
    moved there), else this window's."""
    return step_batch(stable) if stable.timed.engine_steps else batch


@dataclass(frozen=True)
class _LoadModel:
    """The fit's view of a trial's two sides over the load history: the acceptance the
    trial measured, and each side's schedule (None: plain pods)."""

    conditional: list[float]
    before: list[ScheduledBand] | None
    after: list[ScheduledBand] | None

    def ratio(self, run: Run, load: list[float]) -> float:
        was, after = (self.tokens(run, side, load) for side in (self.before, self.after))
        return after / was if was else 1.0

    def tokens(self, run: Run, side: list[ScheduledBand] | None, load: list[float]) -> float:
        parallel = hot_schedules.drafts_its_ceiling(run.spec, run.status)
        return schedule.tokens_over(side, load, self.conditional, run.cost, parallel=parallel)

    def stakes(self, run: Run) -> list[Stake]:
        """Each window of the load history: the tokens the running side serves there, and
        the fit's log gain of the candidate."""
        stakes = []
        for load in run.sp.load:
            was, after = (self.tokens(run, side, [load]) for side in (self.before, self.after))
            stakes.append(Stake(load, was, math.log(after / was) if was else 0.0))
        return stakes


def _load_model(run: Run, trial: Trial, sides: Sides) -> _LoadModel | None:
    """Under a learned schedule a trial is proposed for the load the pods lived through,
    not for its own windows' (load moves faster than a trial): the fit that carries its
    measurement there. None: one K tuned at the load of the moment."""
    sp = run.sp
    # The acceptance the trial measured, on whichever track drafts (a re-probe's stable
    # pods decode plainly, a trial of plain decoding's candidate does).
    drafting = trial.canary.counts if trial.canary.counts.drafts else trial.stable.counts
    conditional = with_deeper(totals_conditional(drafting), sp.good_acceptance) or list(
        sp.good_acceptance or []
    )
    if not conditional or not schedule.learning(
        run.spec,
        sp.load,
        conditional,
        run.cost,
        scheduled=sp.schedule is not None or trial.schedule is not None,
    ):
        return None
    before = sides.before
    after = None if trial.plain else (sides.tried or [ScheduledBand(tokens=trial.tokens)])
    if before is None and sides.before_tokens > 0:
        before = [ScheduledBand(tokens=sides.before_tokens)]
    return _LoadModel(conditional, before, after)


def _over_load(run: Run, gain: Estimate, model: _LoadModel, batch: float) -> tuple[Estimate, str]:
    """The gain measured at `batch`, checking the fit's prediction there: the prediction,
    scaled by what was found, carries the rest of the load history, each window by its
    tokens at stake."""
    sp = run.sp
    at_batch, over_load = model.ratio(run, [batch]), model.ratio(run, sp.load)
    factor = over_load / at_batch

    def projected(measured: float) -> float:
        return (1 + measured) * factor - 1

    estimate = Estimate(projected(gain.value), projected(gain.low), projected(gain.high))
    return estimate, (
        f"over the last {len(sp.load)} intervals' load (batch {min(sp.load):.1f} to "
        f"{max(sp.load):.1f}) {estimate.value:+.1%}: predicted {over_load - 1:+.1%}, and "
        f"{gain.value:+.1%} measured at batch {batch:.1f} where {at_batch - 1:+.1%} was"
    )


@dataclass(frozen=True)
class StopsSpeculation:
    """Plain decoding measured faster than the stable K: speculation stops, and a
    re-probe predicts from `acceptance`, what the stable pods measured beside it."""

    acceptance: list[float]


@dataclass(frozen=True)
class Reenables:
    """A re-probe measured faster than plain decoding: speculation back on at its K."""


@dataclass(frozen=True)
class Promotion:
    """The candidate promoted: the stable pods run K=tokens (and `schedule`), what ran
    before is the last known good; `failures_count_on`: in place, the stable pods ran it
    through the trial, so its failing windows count on."""

    tokens: int
    schedule: list[ScheduledBand] | None
    good: LastKnownGood
    failures_count_on: bool


@dataclass(frozen=True)
class Abort:
    """Back to what ran before: the re-probe's back-off after (None: speculation is on),
    the Ks or schedule not proposed again for reprobeAfter, and the K (and schedule) the
    stable pods go back to (None: they ran the candidate on no pod: its cooldown
    restarts)."""

    off: Off | None
    rejected_tokens: list[int]
    rejected_schedule: list[ScheduledBand] | None
    back_to: int | None
    back_schedule: list[ScheduledBand] | None


@dataclass(frozen=True)
class TrialEnd:
    """A trial's end as `plan_end` works it out, changing nothing: what it tried against
    what, how it ended and why, the acceptance it measured, what the status remembers of
    it (the pooled spread of its pairs; the conditional acceptance to predict from, with
    the canary's measurement: None, nothing new), and
    what follows."""

    trial: Trial
    sides: Sides
    outcome: TrialOutcome
    message: str
    rate: float | None
    pair_spread: PairSpread | None
    good_acceptance: list[float] | None
    then: StopsSpeculation | Reenables | Promotion | Abort


def end_trial(
    run: Run,
    *,
    promote: bool,
    reason: TrialOutcome,
    message: str,
    reject: bool = True,
    judged: bool = True,
) -> None:
    """Promote or abort the trial: `plan_end`, then `finish`."""
    finish(
        run,
        plan_end(
            run, promote=promote, reason=reason, message=message, reject=reject, judged=judged
        ),
    )


def plan_end(
    run: Run,
    *,
    promote: bool,
    reason: TrialOutcome,
    message: str,
    reject: bool = True,
    judged: bool = True,
) -> TrialEnd:
    """How the running trial ends, promoted or aborted. `judged=False`: it ended before
    its windows could say anything (a scale), so a re-probe is retried after the
    cooldown, not counted failed. Changes nothing."""
    sp, trial = run.sp, run.sp.trial
    assert trial is not None and sp.tokens is not None
    sides = _sides(run, trial)
    place, on_canary = trial.in_place, trial.placement is Placement.CANARY
    spread = (
        pooled_spread(sp.pair_spread, pair_spread(place.pairs)) if place and place.pairs else None
    )
    failed_floor = reason in (TrialOutcome.BELOW_FLOOR, TrialOutcome.BELOW_MARGIN)
    remembered = None
    if on_canary and not trial.plain and sides.tried is None and not failed_floor:
        # What the canary measured at its K predicts that K (and deeper ones) next time,
        # as the stable windows after an in-place switch were remembered as they came;
        # not under the floor, as they were not (the re-probe's "what a draft does").
        measured = totals_conditional(trial.canary.counts)
        remembered = with_acceptance(sp.good_acceptance, measured)
    then: StopsSpeculation | Reenables | Promotion | Abort
    if not promote:
        then = _abort(run, trial, sides, reject=reject and sp.off is None, judged=judged)
    elif trial.plain:  # plain decoding measured faster than the stable K
        measured = totals_conditional(trial.stable.counts)
        then = StopsSpeculation(with_deeper(measured, sp.good_acceptance))
    elif sp.off is not None:  # a re-probe that measured faster than plain decoding
        then = Reenables()
    else:
        good = LastKnownGood(tokens=sides.before_tokens, schedule=sides.before)
        then = Promotion(trial.tokens, sides.tried, good, failures_count_on=not on_canary)
    rate = candidate_rate(trial.canary)
    return TrialEnd(trial, sides, reason, message, rate, spread, remembered, then)


def _abort(run: Run, trial: Trial, sides: Sides, *, reject: bool, judged: bool) -> Abort:
    """Back to what ran before; a rejected candidate is not proposed again for a while, a
    failed re-probe backs off further."""
    off = run.sp.off
    if off is not None and judged:
        failed = off.failed_reprobes + 1
        off = off.model_copy(
            update={"failed_reprobes": failed, "reprobe_at": next_reprobe(run, failed)}
        )
    elif off is not None:
        later = run.now + run.spec.tuning.cooldown.length
        off = off.model_copy(update={"reprobe_at": later})
    # A schedule that failed is rejected, not its largest K.
    rejected_schedule = sides.tried if reject else None
    rejected_tokens = [trial.tokens] if reject and sides.tried is None else []
    back = trial.stable_runs_candidate and sides.before_tokens > 0
    return Abort(
        off,
        rejected_tokens,
        rejected_schedule,
        sides.before_tokens if back else None,
        sides.before if back else None,
    )


def finish(run: Run, end: TrialEnd) -> None:
    """The end `plan_end` says, applied."""
    sp, then = run.sp, end.then
    sp.trial = None
    if end.pair_spread is not None:
        sp.pair_spread = end.pair_spread
    if end.good_acceptance is not None:
        sp.good_acceptance = end.good_acceptance
    if isinstance(then, StopsSpeculation):
        stop_speculation(run, end.message, None, then.acceptance)
    elif isinstance(then, Abort):
        _go_back(run, end, then)
    else:
        _promote(run, end, then)


def _go_back(run: Run, end: TrialEnd, then: Abort) -> None:
    sp = run.sp
    if then.off is not None:
        sp.off = then.off
    if then.rejected_tokens or then.rejected_schedule is not None:
        remember_rejected(run, tokens=then.rejected_tokens, schedule=then.rejected_schedule)
    run.act(
        ActionKind.ABORT,
        end.outcome,
        end.message,
        warning=end.outcome is TrialOutcome.BELOW_FLOOR,
        from_tokens=end.trial.tokens,
        to_tokens=end.sides.before_tokens,
        acceptance=end.rate,
    )
    if then.back_to is not None:
        run.stable_runs(then.back_to, then.back_schedule)
    else:
        sp.since_change.at = run.now


def _promote(run: Run, end: TrialEnd, then: Promotion | Reenables) -> None:
    sp, candidate = run.sp, end.trial.tokens
    run.act(
        ActionKind.PROMOTE,
        end.outcome,
        end.message,
        from_tokens=end.sides.before_tokens,
        to_tokens=candidate,
        acceptance=end.rate,
    )
    if isinstance(then, Reenables):
        reenable(run, candidate)  # the back-off starts over once it holds
        run.condition(
            ConditionType.SPECULATION_ACTIVE, "True", "Reprobed", f"drafting K={candidate}"
        )
        return
    sp.last_known_good = then.good
    failing = sp.since_change.failing_windows
    run.stable_runs(then.tokens, then.schedule)
    if then.failures_count_on:
        sp.since_change = sp.since_change.model_copy(update={"failing_windows": failing})


def end_trial_if_scaled(run: Run) -> None:
    """A scaler changed spec.replicas during a trial: the load per pod changed with it, and
    so may the best K. The windows collected so far compare the two Ks at another load
    than the ones to come, so the trial ends unjudged (not rejected); the next candidate
    is proposed after the cooldown, from windows at the new size."""
    trial, replicas = run.sp.trial, run.spec.replicas
    if trial is None or trial.stable_replicas == replicas:
        return
    end_trial(
        run,
        promote=False,
        reason=TrialOutcome.FLEET_SCALED,
        message=f"spec.replicas went from {trial.stable_replicas} to {replicas} during the "
        "trial; its windows are no longer at matched load, so it ends unjudged",
        reject=False,
        judged=False,
    )
