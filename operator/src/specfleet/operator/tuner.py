"""The decision core: (spec, status, observation, now) -> (new status, actions).

Pure: no I/O, no clock, never writes spec. Everything it remembers lives in status, so
an operator restart resumes where it stopped, and recorded windows replay exactly.

States, each an object in status.speculation present while it holds:
  stable          K in effect, no trial; after `cooldown` and one conclusive window at this K
                  it may propose a candidate (best predicted goodput, clearing the floor
                  plus `acceptanceMargin`, at least `minImprovement` better than K).
  canary trial    `trial` without `in_place`: one canary pod runs it; after `canaryWindows`
                  conclusive canary windows it is promoted if the lower bound of its
                  goodput gain is >= minImprovement and its acceptance clears the floor,
                  otherwise aborted (and not proposed again for `reprobeAfter`).
  in-place trial  `trial.in_place`: strategy InPlace (or a canary Pending past
                  `canaryPendingTimeout`): the stable K itself changes; windows after are
                  compared with before.
  plain trial     `trial.tokens == 0`: plain decoding (predicted faster than every K, or
                  explored) runs on a canary, or in place on the stable pods while `tokens`
                  keeps the K they go back to; promoted, it stops speculation (plain.py).
  off             `off`: plain decoding after the floor ruled out every K (or no K pays);
                  re-probed after `reprobeAfter` at the K predicted best for the acceptance
                  last measured above the floor; back on in place, `reprobing` until it holds.
Rollback (works with tuning disabled too): `failureLimit` conclusive stable windows in a
row whose lower bound of `rollback.metric` is below the floor -> last known good K if it
is predicted to clear the floor -> else the largest smaller K predicted to clear the floor
with the margin -> else disable. Inconclusive windows neither pass nor fail.

This module holds `decide` and the spec sync; the working state they pass down is
`run.Run`. `windows.take_in` takes the observation in (perturbation, step cost, the
stable window judged and recorded); `decide` then hands the window to one place: the
floor, the running trial (`trial_engine.feed`, whichever its kind), a re-probe or a
proposal. Each family of transitions has its own module: `windows` (judging), `floor`
(rollback, step-down, below floor), `speculation_off` (disable, stop), `plain` (when
plain decoding is faster), `trials` and `config_trials` (what a K's and a config's trial
do their own way) over `trial_engine` (the lifecycle they share) and `trial_stats`,
`reprobes`, `proposals`, and `prediction`; their words are `outcomes`' enums.
docs/architecture.md draws how they fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specfleet.operator import (
    config_trials,
    hot_schedules,
    reprobes,
    schedule,
    track_plan,
    trial_engine,
)
from specfleet.operator.api import (
    ConditionType,
    DraftMethod,
    LastKnownGood,
    Schedule,
    ScheduleMode,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    TrialRecord,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.floor import (
    below_floor,
    count_stable_window,
    floor_message,
    recovered,
    rollback,
)
from specfleet.operator.observations import Observation
from specfleet.operator.outcomes import Action, ActionKind, TrialOutcome
from specfleet.operator.plain import measure_first, measure_or_stop, stop_if_plain_is_faster
from specfleet.operator.prediction import conditional_for
from specfleet.operator.proposals import Candidate, PlainPredicted, Proposal, propose
from specfleet.operator.rollback_metrics import floor_caps_k
from specfleet.operator.run import SWITCH_HORIZON, Run, working_copy
from specfleet.operator.speculation_off import clear_below_floor
from specfleet.operator.track_plan import TrackPlans
from specfleet.operator.trials import (
    KTrial,
    end_trial,
    end_trial_if_scaled,
    start_reprobe,
    start_trial,
)
from specfleet.operator.windows import (
    Intake,
    Judged,
    metrics_available,
    stable_failing,
    take_in,
    timed_k0_band,
    with_collected,
)


@dataclass(frozen=True)
class Decided:
    status: SpeculativeModelStatus
    actions: list[Action] = field(default_factory=list)


def decide(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
    *,
    generation: int | None = None,
) -> Decided:
    """Judge one observation and decide what K the stable and canary pods should run.

    `generation` is the object's metadata.generation, written into the conditions. An
    evaluation, which planned the tracks already to find their pods, calls
    `decide_planned` with that plan."""
    plans = track_plan.plan(spec, status)
    return decide_planned(spec, status, observation, now, plans, generation=generation)


def decide_planned(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
    plans: TrackPlans,
    *,
    generation: int | None = None,
) -> Decided:
    """`decide`, with `plans`: what each track runs by this spec and status
    (track_plan.plan)."""
    run = Run(spec, working_copy(status), now, generation, plans)
    if spec.draft.method is DraftMethod.NONE:
        return _plain_by_spec(run)
    _sync_with_spec(run)
    intake = take_in(run.spec, run.status, observation, run.now, run.drafting)
    _write_intake(run, intake)
    stable = intake.stable
    if stable is None:  # held as perturbed
        _write_metrics_available(run, intake.recorded)
        return _decided(run)
    if run.sp.off is None:
        _write_metrics_available(run, stable)
        if not run.sp.measuring_plain and stable.conclusive and _floor_decided(run, stable):
            return _decided(run)
    running = _running_trial(run)
    if running is not None:
        kind, record = running
        trial_engine.feed(run, kind, record, stable, observation)
    elif run.sp.off is not None:  # speculation off: back on when its back-off is over
        reprobe = reprobes.due(run, stable)
        if reprobe is not None:
            start_reprobe(run, reprobe)
    else:
        _propose_if_settled(run, stable)
    return _decided(run)


def _plain_by_spec(run: Run) -> Decided:
    """A model whose spec drafts nothing: plain decoding, nothing to judge or tune."""
    run.condition(
        ConditionType.SPECULATION_ACTIVE, "False", "PlainDecoding", "draft.method is none"
    )
    return _decided(run)


def _write_intake(run: Run, intake: Intake) -> None:
    """What the observation taught, into status (in the order it was learnt)."""
    run.status.step_cost = intake.step_cost
    if intake.open_window_changed:
        run.status.open_windows = with_collected(
            run.status.open_windows, "stable", intake.open_window
        )
    run.status.acceptance = intake.acceptance
    run.sp.load = intake.load
    if intake.speculation_active is not None:
        run.set_condition(intake.speculation_active)
    run.actions.extend(intake.actions)


def _write_metrics_available(run: Run, judged: Judged) -> None:
    """What the window says of the metrics, into status."""
    said = metrics_available(run.spec, run.sp, run.status.conditions, judged)
    run.sp.inconclusive_windows = said.inconclusive_windows
    if said.gap:
        run.sp.since_change.failing_windows = 0
    if said.condition is not None:
        run.set_condition(said.condition)
    run.actions.extend(said.actions)


def _running_trial(run: Run) -> tuple[trial_engine.RunningKind[Any], TrialRecord] | None:
    """The one trial a stable window the floor left undecided feeds, and its kind; None:
    no trial runs. A re-probe (a K's trial while speculation is off) and a trial of plain
    decoding (no draft runs to judge: it measures speed) go before a config's trial; while
    a config is on trial, K is not tuned."""
    sp, config = run.sp, run.status.config
    if sp.trial is not None and (sp.off is not None or sp.measuring_plain):
        return KTrial(run), sp.trial
    if config is not None and config.trial is not None:
        return config_trials.ConfigKind(run), config.trial
    if sp.trial is not None:
        return KTrial(run), sp.trial
    return None


def _decided(run: Run) -> Decided:
    """The decision, with the schedule the stable pods are handed when they take K hot."""
    run.sp.hot_schedule = hot_schedules.planned(run.spec, run.status)
    return Decided(run.status, run.actions)


def _floor_decided(run: Run, stable: Judged) -> bool:
    """Count a conclusive stable window against the floor; whether the floor decided this
    window (a trial failing it ended, a rollback, speculation switched off)."""
    sp, spec, trial = run.sp, run.spec, run.sp.trial
    counted = count_stable_window(spec, sp, run.now, stable)
    sp.since_change, sp.good_acceptance = counted.since_change, counted.good_acceptance
    if counted.reprobe_held:
        sp.reprobing = None
    below = condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR)
    if trial is not None and trial.stable_runs_candidate and floor_caps_k(spec):
        if stable_failing(stable, run.floor):  # the candidate K fails a floor that caps K
            reason, message = TrialOutcome.BELOW_FLOOR, floor_message(run, stable)
            end_trial(run, promote=False, reason=reason, message=message)
            return True
    elif below == "True":
        if stable_failing(stable, run.floor):
            # Re-checked each window; while speculation pays, tuning goes on below.
            below_floor(run, stable, floor_message(run, stable))
            # A trial of plain decoding it started is fed from the next window: this one,
            # looking bad, would bias its baseline.
            started = sp.trial is not None and sp.trial.started_at == run.now
            return sp.off is not None or started
        if stable.metric is not None and stable.metric.low >= run.floor + run.margin:
            recovered(run, stable)  # the margin keeps noise at the floor from flapping
    elif sp.since_change.failing_windows >= spec.rollback.failure_limit:
        if trial is not None:
            message = "the stable K is failing the floor"
            end_trial(run, promote=False, reason=TrialOutcome.STABLE_ROLLING_BACK, message=message)
        rollback(run, stable)
        return True
    return False


def _propose_if_settled(run: Run, stable: Judged) -> None:
    """Propose a candidate when the stable K has settled, and start what is proposed."""
    sp, spec = run.sp, run.spec
    if (
        spec.tuning.enabled
        # A schedule's K=0 band has no acceptance, but its speed says what it serves.
        and (timed_k0_band(stable) or (stable.conclusive and sp.since_change.windows >= 1))
        and sp.since_change.failing_windows == 0
        and _cooled(run)
        # A schedule decides per load where drafting stops; no switch for the whole model.
        and (
            spec.schedule_in_effect.mode in (ScheduleMode.FIXED, ScheduleMode.LEARNED)
            or _learning(run, stable)
            or not stop_if_plain_is_faster(run, stable)
        )
    ):
        _start(run, stable, propose(run, stable))


def _start(run: Run, stable: Judged, proposal: Proposal | None) -> None:
    """A trial of the proposed candidate; or plain decoding, predicted faster, measured
    (or speculation stopped on the prediction, where the proposal says so)."""
    match proposal:
        case Candidate(tokens, candidate_schedule, message, why):
            start_trial(run, stable, tokens, candidate_schedule, message, why)
        case PlainPredicted(reason, stop=True):
            measure_or_stop(run, stable, reason)
        case PlainPredicted(reason, stop=False):
            measure_first(run, stable, reason)


def _learning(run: Run, stable: Judged) -> bool:
    """Mode Auto deciding for the load history (schedule.learning)."""
    window = stable.window
    return window is not None and schedule.learning(
        run.spec,
        run.sp.load,
        conditional_for(window, run.sp.good_acceptance),
        run.cost,
        scheduled=run.sp.schedule is not None,
    )


def _cooled(run: Run) -> bool:
    """`cooldown` since the last change; and when trials run in place, where each one
    restarts the pods that serve (with one pod, all of them), SWITCH_HORIZON since the
    last in-place trial started: the serving K then changes at most once an hour, an
    aborted trial (there and back) included. Pods that take K hot restart for none."""
    sp, spec = run.sp, run.spec
    changed_at = sp.since_change.at
    if changed_at is not None and run.now - changed_at < spec.tuning.cooldown.length:
        return False
    if not run.trials_in_place or hot_schedules.in_effect(spec, run.status):
        return True
    started = [d.time for d in run.status.history if d.action == ActionKind.START_IN_PLACE]
    return not started or run.now - max(started) >= SWITCH_HORIZON


def sync_with_spec(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    now: datetime,
    *,
    generation: int | None = None,
    forced_config: str | None = None,
) -> Decided:
    """Status after a spec edit, on every reconcile (not only when a window is judged):
    a new `speculation.tokens` resets K, clears a trial and re-enables speculation, and
    K or a trial outside new bounds is clamped or ended; each change is in history.
    `forced_config`: the hash a user's annotation forces through (config_trials.force)."""
    run = Run(spec, working_copy(status), now, generation, track_plan.plan(spec, status))
    config_trials.force(run, forced_config)
    _sync_with_spec(run)
    return _decided(run)


def _sync_with_spec(run: Run) -> None:
    """Fill unset status, take a new K from the spec, keep K within [min, max]."""
    spec, sp = run.spec, run.sp
    if sp.drafting != run.drafting:
        run.status.step_cost = None  # measured for another drafting style
    sp.drafting = run.drafting
    # A status from before schedules existed saw the default then, Off: no change.
    requested = sp.requested_schedule or Schedule(mode=ScheduleMode.OFF)
    schedule_changed = requested != spec.schedule_in_effect
    if schedule_changed and _one_k_either_way(requested, spec, sp.schedule is None):
        # Off (the default before Auto) and Auto both run the K that runs: an upgrade of
        # the operator restarts no model's tuning.
        sp.requested_schedule = spec.schedule_in_effect
        schedule_changed = False
    if (
        sp.tokens is None
        or sp.requested_tokens is None
        or sp.requested_tokens != spec.speculation.tokens
        or schedule_changed
    ):
        _restart_from_spec(run, schedule_changed)
    _keep_within_range(run)
    end_trial_if_scaled(run)
    if sp.rejected is not None and run.now >= sp.rejected.until:
        sp.rejected = None
    config_trials.sync(run)


def _one_k_either_way(requested: Schedule, spec: SpeculativeModelSpec, one_k_runs: bool) -> bool:
    """Whether a change between schedule modes Off and Auto finds one K running, which
    both keep."""
    modes = {requested.mode, spec.schedule_in_effect.mode}
    return one_k_runs and modes == {ScheduleMode.OFF, ScheduleMode.AUTO}


def _restart_from_spec(run: Run, schedule_changed: bool) -> None:
    """The spec's K (or schedule) replaces the tuner's, and every memory of the old one."""
    spec, sp = run.spec, run.sp
    requested, written = spec.speculation.tokens, spec.schedule_in_effect
    if sp.tokens is not None and sp.requested_tokens is not None:
        if schedule_changed and written != spec.speculation.schedule:
            what = (
                f"spec.runtime.parallelism.data is now {spec.runtime.parallelism.data}: one K "
                "(vLLM drops per-batch schedules with data parallel ranks)"
            )
        elif schedule_changed:
            what = f"spec.speculation.schedule is now {written.mode.value}"
        else:
            what = f"spec.speculation.tokens is now {requested}"
        run.act(
            ActionKind.SPEC_CHANGED,
            "ScheduleChanged" if schedule_changed else "RequestedTokensChanged",
            f"{what}; tuning restarts from it",
            from_tokens=sp.tokens,
            to_tokens=requested,
        )
    sp.trial = sp.off = sp.reprobing = sp.rejected = None
    config_trials.forget_canary_schedule(run)
    sp.requested_schedule = written
    sp.schedule = schedule.fixed(spec)
    start = schedule.largest(sp.schedule) if sp.schedule else requested
    clear_below_floor(run, "SpecChanged", f"spec.speculation.tokens is now {requested}")
    sp.requested_tokens = requested
    # A Fixed schedule that fails rolls back to one K: its smallest drafting K, the safest
    # (its largest is where acceptance is lowest, and it is what the pods run as K).
    drafting = schedule.drafting_ks(sp.schedule) if sp.schedule else ()
    sp.last_known_good = LastKnownGood(
        tokens=min(drafting) if drafting else start, schedule=sp.schedule
    )
    run.changed(start)
    sp.since_change.at = None  # the spec's K needs no cooldown before tuning starts


def _keep_within_range(run: Run) -> None:
    """K, the last known good K and a trial's candidate within [minTokens, maxTokens]."""
    sp = run.sp
    low, high = run.spec.speculation.min_tokens, run.spec.speculation.max_tokens
    assert sp.tokens is not None
    trial = sp.trial
    # A trial ends first: in place, the K it would go back to may be outside it too.
    if trial is not None:
        before = trial.in_place.previous_tokens if trial.in_place else None
        if not trial.plain and not low <= trial.tokens <= high:
            message, reject = "candidate outside the range", True
        elif before is not None and not low <= before <= high:
            message, reject = f"K={before}, which it would go back to, is outside the range", False
        else:
            message = None
        if message is not None:
            end_trial(
                run,
                promote=False,
                reason=TrialOutcome.OUTSIDE_RANGE,
                message=message,
                reject=reject,
                judged=reject,  # the previous K's case says nothing about the candidate
            )
    if sp.schedule is None and not low <= sp.tokens <= high:
        clamped = min(high, max(low, sp.tokens))
        run.act(
            ActionKind.CLAMP,
            "OutsideRange",
            f"K={sp.tokens} is outside speculation [{low}, {high}]; using {clamped}",
            from_tokens=sp.tokens,
            to_tokens=clamped,
        )
        run.changed(clamped)
    good = sp.last_known_good
    if good is not None and not low <= good.tokens <= high:
        good.tokens = min(high, max(low, good.tokens))
