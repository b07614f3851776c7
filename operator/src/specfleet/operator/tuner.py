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
`run.Run`. Each family of transitions has its own module: `windows` (judging), `floor`
(rollback, step-down, below floor), `speculation_off` (disable, stop), `plain` (when
plain decoding is faster), `trials` (start, feed, compare, end) with `trial_stats`,
`reprobes`, `proposals`, and `prediction`; their words are `outcomes`' enums.
docs/architecture.md draws how they fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from specfleet.operator import config_trials, hot_schedules, schedule, speed
from specfleet.operator.api import (
    ConditionType,
    DraftMethod,
    LastKnownGood,
    OffReason,
    Schedule,
    ScheduleMode,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
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
from specfleet.operator.outcomes import Action, ActionKind, TrialOutcome, WindowVerdict
from specfleet.operator.plain import stop_if_plain_is_faster
from specfleet.operator.proposals import propose
from specfleet.operator.reprobes import maybe_reprobe
from specfleet.operator.rollback_metrics import floor_caps_k
from specfleet.operator.run import SWITCH_HORIZON, Run
from specfleet.operator.speculation_off import clear_below_floor
from specfleet.operator.trials import end_trial, end_trial_if_scaled, feed_trial
from specfleet.operator.windows import (
    Judged,
    judge_collected,
    judge_plain,
    metrics_condition,
    record_acceptance,
    record_load,
    stable_failing,
    timed_k0_band,
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

    `generation` is the object's metadata.generation, written into the conditions.
    """
    run = Run(spec, status.model_copy(deep=True), now, generation)
    if spec.draft.method is DraftMethod.NONE:
        run.condition(
            ConditionType.SPECULATION_ACTIVE, "False", "PlainDecoding", "draft.method is none"
        )
        return _decided(run)
    _sync_with_spec(run)
    held = _perturbed(run, observation)
    if held is not None:
        # A slow stretch says nothing about K: recorded, not learnt from nor judged.
        record_acceptance(run, held, observation)
        _speculation_condition(run, observation)
        metrics_condition(run, held)
        return _decided(run)
    _learn_speed(run, observation)
    stable = _judge_stable(run, observation)
    record_acceptance(run, stable, observation)
    record_load(run, observation)
    _speculation_condition(run, observation)
    if run.sp.off is not None:
        if run.sp.trial is not None:  # a re-probe on a canary
            feed_trial(run, stable, observation)
        elif not config_trials.feed(run, stable, observation):
            maybe_reprobe(run, stable)
    else:
        metrics_condition(run, stable)
        if run.sp.measuring_plain:  # no draft runs to judge: the trial measures speed
            feed_trial(run, stable, observation)
        elif not (stable.conclusive and _floor_decided(run, stable)) and not config_trials.feed(
            run, stable, observation
        ):
            _tune(run, stable, observation)
    return _decided(run)


def _decided(run: Run) -> Decided:
    """The decision, with the schedule the stable pods are handed when they take K hot."""
    run.sp.hot_schedule = hot_schedules.planned(run.spec, run.status)
    return Decided(run.status, run.actions)


def _judge_stable(run: Run, observation: Observation) -> Judged:
    sp = run.sp
    if observation.prometheus_error is not None:
        unavailable = WindowVerdict.PROMETHEUS_UNAVAILABLE
        return Judged(None, False, unavailable, detail=observation.prometheus_error)
    if sp.measuring_plain:
        return judge_plain(run.spec, observation.stable)
    running = None if sp.off is not None else sp.schedule
    judged, collecting = judge_collected(
        run.spec,
        run.now,
        run.collected("stable"),
        observation.stable,
        sp.stable_k,
        sp.baseline_acceptance,
        running,
    )
    run.keep_collecting("stable", collecting)
    return judged


def _floor_decided(run: Run, stable: Judged) -> bool:
    """Count a conclusive stable window against the floor; whether the floor decided this
    window (a trial failing it ended, a rollback, speculation switched off)."""
    sp, spec, trial = run.sp, run.spec, run.sp.trial
    count_stable_window(run, stable)
    below = condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR)
    if trial is not None and trial.in_place and trial.in_place.switched and floor_caps_k(spec):
        if stable_failing(run, stable):  # the candidate K fails a floor that caps K
            reason, message = TrialOutcome.BELOW_FLOOR, floor_message(run, stable)
            end_trial(run, promote=False, reason=reason, message=message)
            return True
    elif below == "True":
        if stable_failing(run, stable):
            # Re-checked each window; while speculation pays, tuning goes on below.
            below_floor(run, stable, floor_message(run, stable))
            # A trial of plain decoding it started is fed from the next window: this one,
            # looking bad, would bias its baseline.
            started = sp.trial is not None and sp.trial.started_at == run.now
            return sp.off is not None or started
        if stable.metric is not None and stable.metric.low >= run.floor + run.margin:
            recovered(run, stable)  # the margin keeps noise at the floor from flapping
    elif sp.failing_windows >= spec.rollback.failure_limit:
        if trial is not None:
            message = "the stable K is failing the floor"
            end_trial(run, promote=False, reason=TrialOutcome.STABLE_ROLLING_BACK, message=message)
        rollback(run, stable)
        return True
    return False


def _tune(run: Run, stable: Judged, observation: Observation) -> None:
    """Feed the running trial, or propose one when the stable K has settled."""
    sp, spec = run.sp, run.spec
    if run.sp.trial is not None:
        feed_trial(run, stable, observation)
    elif (
        spec.tuning.enabled
        # A schedule's K=0 band has no acceptance, but its speed says what it serves.
        and (timed_k0_band(stable) or (stable.conclusive and sp.windows >= 1))
        and sp.failing_windows == 0
        and _cooled(run)
        # A schedule decides per load where drafting stops; no switch for the whole model.
        and (
            spec.schedule_in_effect.mode in (ScheduleMode.FIXED, ScheduleMode.LEARNED)
            or _learning(run, stable)
            or not stop_if_plain_is_faster(run, stable)
        )
    ):
        propose(run, stable)


def _learning(run: Run, stable: Judged) -> bool:
    """Mode Auto deciding for the load history (schedule.learning)."""
    window = stable.window
    return window is not None and schedule.learning(
        run.spec,
        run.sp.load,
        run.conditional(window),
        run.cost,
        scheduled=run.sp.schedule is not None,
    )


def _cooled(run: Run) -> bool:
    """`cooldown` since the last change; and when trials run in place, where each one
    restarts the pods that serve (with one pod, all of them), SWITCH_HORIZON since the
    last in-place trial started: the serving K then changes at most once an hour, an
    aborted trial (there and back) included. Pods that take K hot restart for none."""
    sp, spec = run.sp, run.spec
    if sp.changed_at is not None and run.now - sp.changed_at < run.seconds(spec.tuning.cooldown):
        return False
    if not run.in_place or hot_schedules.in_effect(spec, run.status):
        return True
    started = [d.time for d in run.status.history if d.action == ActionKind.START_IN_PLACE]
    return not started or run.now - max(started) >= SWITCH_HORIZON


def _perturbed(run: Run, observation: Observation) -> Judged | None:
    """The stable window held as perturbed (its step time far from the engine's at this
    K and batch), or None. Past speed.PERTURBED_LIMIT windows in a row the engine itself
    changed: the samples go and the fit starts over from what the pods measure now."""
    sp, cost, window = run.sp, run.status.step_cost, observation.stable
    flat = sp.decoding_plainly or sp.schedule is None
    why = speed.perturbation(cost, sp.stable_k, window) if flat else None
    if why is None or cost is None:
        return None
    if cost.perturbed_windows + 1 >= speed.PERTURBED_LIMIT:
        run.status.step_cost = None
        return None
    run.status.step_cost = cost.model_copy(update={"perturbed_windows": cost.perturbed_windows + 1})
    return Judged(window, False, WindowVerdict.PERTURBED, detail=why)


def _learn_speed(run: Run, observation: Observation) -> None:
    """Feed this interval's step times to the fitted cost: the stable track's at the K it
    ran for the whole window (not one that straddles a change of K), the canary's at its
    candidate."""
    sp, window = run.sp, observation.stable
    # A track under a schedule ran several Ks in one window: no single K to learn it at,
    # unless it drafted in none of its steps (all in a K=0 band: the K=0 tax) or its pods
    # timed their steps by K.
    flat = sp.decoding_plainly or sp.schedule is None
    settled = window is not None and (
        sp.changed_at is None or run.now - timedelta(seconds=window.seconds) >= sp.changed_at
    )
    if settled and flat:
        run.learn_speed(sp.stable_k, window)
    elif settled and window is not None and window.drafts == 0:
        run.status.step_cost = speed.record_k0_band(run.status.step_cost, window, run.drafting)
    elif settled and window is not None:
        # Where the pods time their steps by K (hot pods), each K of the schedule.
        run.status.step_cost = speed.record_by_k(
            run.status.step_cost, window, run.now, run.drafting
        )
    trial = sp.trial
    if trial is not None and not trial.in_place and trial.schedule is None:
        # The canary pod is created for its candidate: its windows are all at that K.
        run.learn_speed(trial.tokens, observation.canary)


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
    run = Run(spec, status.model_copy(deep=True), now, generation)
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
    sp.changed_at = None  # the spec's K needs no cooldown before tuning starts


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


def _speculation_condition(run: Run, observation: Observation) -> None:
    sp = run.sp
    if sp.off is not None:
        reason = OffReason.NO_K_PAYS if sp.plain_decoding_chosen else "Disabled"
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", reason, sp.off.message)
    elif sp.measuring_plain:
        assert sp.trial is not None and sp.trial.in_place is not None
        before = sp.trial.in_place.previous_tokens
        message = f"an in-place trial measures plain decoding against K={before}"
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", "PlainDecodingTrial", message)
    elif observation.speculation_missing:
        was = condition_status(run.status.conditions, ConditionType.SPECULATION_ACTIVE)
        message = (
            "pods serve requests but export no vllm:spec_decode_* counters: "
            "the draft is not running"
        )
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", "NotExported", message)
        if was != "False":
            run.act(
                ActionKind.SPECULATION_MISSING, "NotExported", message, warning=True, record=False
            )
    elif observation.stable is not None and observation.stable.drafts > 0:
        run.condition(
            ConditionType.SPECULATION_ACTIVE, "True", "Drafting", f"drafting K={sp.tokens}"
        )
