"""Config trials: a changed draft model, method, runtime image or vLLM args is tried
against the running config and promoted on measured goodput, or rejected with the stable
pods kept on the last good config (docs/rollouts.md).

The running config lives in status.config (the operator never writes spec); a trial
runs the spec's config on the canary (or, InPlace, on the stable pods after their
windows before), runs the lifecycle of a K trial (trial_engine.feed; `ConfigKind`
says what a config's does its own way), and on
promotion K and the step cost are learned anew: the new draft's acceptance and step
cost are its own.
"""

from __future__ import annotations

from specfleet.operator import schedule, trial_engine
from specfleet.operator.api import (
    ConditionType,
    ConfigRejection,
    ConfigState,
    ConfigTrial,
    DraftMethod,
    Placement,
    RolloutStrategy,
    RunningConfig,
    ScheduledBand,
    SpeculativeModelSpec,
)
from specfleet.operator.configs import (
    FORCE_CONFIG_ANNOTATION,
    changes,
    config_hash,
    config_of,
    target_changes,
)
from specfleet.operator.observations import Observation
from specfleet.operator.outcomes import ActionKind, TrialOutcome
from specfleet.operator.reprobes import enable
from specfleet.operator.rollback_metrics import rollback_metric_of
from specfleet.operator.run import Run
from specfleet.operator.speculation_off import clear_below_floor
from specfleet.operator.stats import Estimate
from specfleet.operator.trial_engine import (
    Ended,
    Sides,
    TrialSubject,
    Turn,
    candidate_rate,
    measured_gain,
    placed,
)
from specfleet.operator.trial_stats import ONE_SIDED_95, TRIAL_EXTENSION
from specfleet.operator.trials import end_trial
from specfleet.operator.windows import Judged, with_collected


def sync(run: Run) -> None:
    """On every reconcile: take the spec's config as running when there is none yet (a
    new model, or a status from before config trials), start a trial for a new one, end
    a trial the spec no longer asks for."""
    state = run.status.config
    if state is not None and _runs_as_is(run.spec, state):
        return
    wanted = config_of(run.spec)
    if state is None:
        run.status.config = ConfigState(running=wanted)
        return
    target = target_changes(run.spec, state.running)
    if target is not None:
        _new_target(run, wanted, target)
        return
    trial = state.trial
    if wanted.hash == state.running.hash:
        # What else the pods are rendered from is in force on every pod at once.
        state.running = wanted
        if trial is not None:
            _cancel(run, f"the spec is back at the running config {wanted.hash}")
        if state.rejected is not None:
            state.rejected = None
            run.condition(
                ConditionType.CONFIG_REJECTED,
                "False",
                "SpecReverted",
                f"the spec names the running config {wanted.hash} again",
            )
        return
    if trial is not None and trial.config.hash == wanted.hash:
        return
    if state.rejected is not None and state.rejected.hash == wanted.hash:
        return  # held back until the spec changes or a user forces it
    if trial is not None:
        _cancel(run, f"config {wanted.hash} replaces config {trial.config.hash} on trial")
    _start(run, wanted)


def _runs_as_is(spec: SpeculativeModelSpec, state: ConfigState) -> bool:
    """The spec's config runs, its pods rendered from these very fields, with nothing
    on trial or rejected: `sync` would change nothing. Nearly every reconcile, and told
    without building the spec's config (three deep copies of the spec's parts)."""
    running = state.running
    return (
        state.trial is None
        and state.rejected is None
        and running.pods is not None
        and running.pods.model == spec.model
        and running.pods.draft == spec.draft
        and running.pods.runtime == spec.runtime
        and config_hash(spec) == running.hash
    )


def _new_target(run: Run, wanted: RunningConfig, target: str) -> None:
    """A commit that changes the target model is a new config end to end: it runs on
    every pod at once, without a trial (the goodput of two target models is not
    compared, and no pod runs one commit's target with another's draft or runtime)."""
    state = run.status.config
    assert state is not None
    what = f"the target model changes ({target})"
    if wanted.hash != state.running.hash:
        what += f", with {changes(state.running, wanted)}"
    if state.trial is not None:
        _cancel(run, f"{what}: config {wanted.hash} is a new config end to end")
    _end_k_trial(run, f"{what}: config {wanted.hash} is a new config end to end")
    message = (
        f"{what}: config {wanted.hash} runs on every pod at once, without a trial (the "
        "goodput of two target models is not compared)"
    )
    _adopt(run, wanted, ActionKind.ADOPT_CONFIG, "TargetChanged", message)


def force(run: Run, forced: str | None) -> None:
    """The annotation names the spec's config: it becomes the running config at once."""
    if forced is None:
        return
    wanted = config_of(run.spec)
    state = run.status.config
    if forced != wanted.hash or (state is not None and state.running.hash == wanted.hash):
        return
    if state is not None and state.trial is not None:
        _cancel(run, f"{FORCE_CONFIG_ANNOTATION} forces config {wanted.hash}")
    _end_k_trial(run, f"{FORCE_CONFIG_ANNOTATION} forces config {wanted.hash}")
    _adopt(
        run,
        wanted,
        ActionKind.ADOPT_CONFIG,
        "Forced",
        f"{FORCE_CONFIG_ANNOTATION} names config {wanted.hash}: the stable pods run it "
        "without a trial",
    )


def _end_k_trial(run: Run, message: str) -> None:
    """A trial of K ends unjudged: the config change comes first (one trial at a time)."""
    if run.sp.trial is not None:
        end_trial(
            run,
            promote=False,
            reason=TrialOutcome.CONFIG_CHANGED,
            message=message,
            reject=False,
            judged=False,
        )


def _matched(run: Run) -> tuple[int, list[ScheduledBand] | None]:
    """The K (and schedule) a new config is tried and started at: the stable pods' own,
    so that a trial compares the configs, not two Ks; the spec's with speculation off.
    Everything K was tuned from (acceptance, step cost) is measured afresh after."""
    sp = run.sp
    if sp.off is not None or sp.tokens is None:
        fixed = schedule.fixed(run.spec)
        return (schedule.largest(fixed) if fixed else run.spec.speculation.tokens), fixed
    return sp.tokens, sp.schedule


def _start(run: Run, wanted: RunningConfig) -> None:
    sp, spec = run.sp, run.spec
    state = run.status.config
    assert state is not None
    _end_k_trial(run, f"config {wanted.hash} is tried first")
    what = changes(state.running, wanted)
    strategy = spec.rollout.strategy
    if strategy is RolloutStrategy.IMMEDIATE or DraftMethod.NONE in (
        wanted.method,
        state.running.method,
    ):
        # No trial wanted, or no draft to compare (plain decoding on either side).
        _adopt(run, wanted, ActionKind.ADOPT_CONFIG, "Immediate", f"config {wanted.hash}: {what}")
        return
    k, bands = _matched(run)
    # Plain stable pods (speculation disabled) have no windows before to switch from.
    in_place = strategy is RolloutStrategy.IN_PLACE and sp.off is None
    record = ConfigTrial(
        config=wanted.model_copy(update={"pods": None}),  # the canary runs the spec
        tokens=k,
        schedule=None if in_place else bands,
        started_at=run.now,
    )
    placement = Placement.BEFORE if in_place else Placement.CANARY
    trial_engine.start(run, ConfigKind(run), record, placement, Turn(k, bands))
    where = "the stable pods, after their windows before," if in_place else "a canary"
    message = (
        f"config {wanted.hash} ({what}) on {where} at K={k}, against the running config "
        f"{state.running.hash}"
    )
    run.act(
        ActionKind.START_CONFIG_TRIAL, "ConfigChanged", message, from_tokens=sp.tokens, to_tokens=k
    )
    run.condition(ConditionType.CONFIG_REJECTED, "False", "Trying", message)


class ConfigKind:
    """A trial of a config, as the trial engine runs it."""

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def windows(self) -> int:
        return self.run.spec.rollout.windows

    @property
    def k0_band(self) -> bool:
        return False

    @property
    def may_go_in_place(self) -> bool:
        # Plain stable pods (speculation off) have no windows before to switch from.
        return self.run.sp.off is None

    def measured_before(self, record: ConfigTrial, added: bool) -> bool:
        return added  # one window of the running config, then the stable pods switch

    def waits_for_canary(self, record: ConfigTrial, pending: bool) -> bool:
        return _waits_for_canary(record, pending)

    def failing_window(self, canary: Judged) -> str | None:
        return None  # a head is held to the floor over all its windows (failing_totals)

    def failing_totals(self, record: ConfigTrial) -> str | None:
        """Rejected before the windows are in when even the upper bound of the new
        config's rollback metric, over all its windows, is below the floor: a poor head
        goes at once, one near the floor is measured to the end (where its lower bound
        must clear it)."""
        run, canary = self.run, record.canary
        metric = rollback_metric_of(run.spec).of_totals(canary)
        if metric is None or metric.high >= run.floor:
            return None
        return (
            f"the new config's {run.spec.rollback.metric.value} {metric.value:.3f} (upper "
            f"bound {metric.high:.3f}) over {canary.windows} windows < floor {run.floor:.3f}"
        )

    def subject(self, record: ConfigTrial) -> TrialSubject | Ended:
        """The K trial's evidence standard: promoted when the lower bound of the goodput
        gain clears rollout.minGain and the acceptance clears the floor; measured on
        while the gain is promising but not proven, up to TRIAL_EXTENSION times the
        windows."""
        trial, spec, sp = record, self.run.spec, self.run.sp
        if trial.in_place is not None:
            place = trial.in_place
            sides = Sides(trial.tokens, sp.schedule, place.previous_tokens, place.previous_schedule)
        elif sp.off is not None:
            # Beside plain stable pods (speculation off) the new config is compared with
            # plain decoding, not with what ran before.
            sides = Sides(trial.tokens, trial.schedule, 0, None)
        else:
            sides = Sides(trial.tokens, trial.schedule, sp.tokens or 0, sp.schedule)
        running = self._state.running.hash
        return TrialSubject(
            sides=sides,
            tried_words=f"config {trial.config.hash} at K={trial.tokens}",
            before_words=f"{running} at K={sides.before_tokens}",
            required=spec.rollout.min_gain,
            windows=TRIAL_EXTENSION * spec.rollout.windows,
            metric=rollback_metric_of(spec).of_totals(trial.canary),
            floor_caps=True,
            margin=None,
            confidence=ONE_SIDED_95,
        )

    def measure(
        self, record: ConfigTrial, subject: TrialSubject, batch: float
    ) -> tuple[Estimate, str]:
        # A config is compared at the K and load the stable pods run.
        return measured_gain(subject, record.stable, record.canary, batch, self.run.cost)

    def ended_unfed(self, record: ConfigTrial, observation: Observation) -> Ended | None:
        """The new config's pods fail to run it, or rollout.timeout passed while it ran."""
        run = self.run
        # The pods running the new config: the canary, or switched in place the stable pods.
        where = record.placement
        track = "stable" if record.stable_runs_candidate else "canary"
        failed = observation.runtime_failures.get(track)
        if failed is not None and where is not Placement.BEFORE:
            return Ended(TrialOutcome.RUNTIME_FAILED, f"the new config does not run: {failed}")
        timeout = run.spec.rollout.timeout.length
        if run.now - record.started_at > timeout and not _waits_for_canary(
            record, observation.canary_pending is not None
        ):
            return Ended(
                TrialOutcome.TIMEOUT,
                f"{record.canary.windows} of {run.spec.rollout.windows} conclusive windows of "
                f"the new config after {run.now - record.started_at} (rollout.timeout "
                f"{run.spec.rollout.timeout})",
            )
        return None

    @property
    def _state(self) -> ConfigState:
        state = self.run.status.config
        assert state is not None
        return state

    def keep(self, record: ConfigTrial) -> None:
        self._state.trial = record

    def overdue(self, record: ConfigTrial) -> Ended | None:
        return None  # rollout.timeout ends it (ended_unfed)

    def fall_back_in_place(self, record: ConfigTrial, pending: float, waiting: str | None) -> None:
        """The trial goes on in place, as a K trial's would; the stable windows so far are
        its windows before (the canary's judged, if any, go with the canary). A new
        record: the one the engine was handed is left as it was."""
        run = self.run
        # Its K and schedule before are taken at the switch, after the windows before.
        before = Turn(run.sp.tokens or 0, run.sp.schedule)
        # The trial starts here: its canary never ran.
        restarted = record.model_copy(update={"schedule": None, "started_at": run.now})
        self._state.trial = trial = placed(restarted, Placement.BEFORE, before)
        _drop_canary_window(run)
        run.act(
            ActionKind.IN_PLACE_FALLBACK,
            "CanaryPending",
            f"the canary pod has been Pending for {pending:.0f}s (> "
            f"{run.spec.tuning.canary_pending_timeout}); config {trial.config.hash} is tried "
            "in place instead",
            warning=True,
        )

    def wait_for_canary(self, record: ConfigTrial, why: str | None) -> None:
        """A trial whose canary does not run has not started: rollout.timeout counts from
        when it runs (a config that never ran is never rejected for Timeout), and
        ConfigRejected says what it waits for. Past canaryPendingTimeout it goes on in
        place (trial_engine.advance), unless the stable pods decode plainly and have no
        windows before."""
        run = self.run
        record.started_at = run.now
        message = (
            f"config {record.config.hash} waits for its canary pod"
            + (f": {why}" if why else "")
            + "; the trial starts when the canary runs"
        )
        if run.sp.off is not None:
            message += " (the stable pods decode plainly: no trial in place)"
        run.condition(ConditionType.CONFIG_REJECTED, "False", "CanaryNotRunning", message)

    def canary_runs(self, record: ConfigTrial) -> None:
        """ConfigRejected says the trial is on again once the canary it waited for runs."""
        run = self.run
        waited = any(
            c.type is ConditionType.CONFIG_REJECTED and c.reason == "CanaryNotRunning"
            for c in run.status.conditions
        )
        if waited:
            message = (
                f"config {record.config.hash} runs on its canary at K={record.tokens}, "
                f"against the running config {self._state.running.hash}"
            )
            run.condition(ConditionType.CONFIG_REJECTED, "False", "Trying", message)

    def switch(self, record: ConfigTrial) -> None:
        """The window before is in: the stable pods switch to the new config, at their K."""
        run, state = self.run, self._state
        assert record.in_place is not None
        # A new part, not an edit of it: the record the engine was handed shares it.
        place = record.in_place.model_copy(
            update={
                "previous_tokens": run.sp.tokens or 0,
                "previous_schedule": run.sp.schedule,
                "switched": True,
            }
        )
        state.trial = trial = record.model_copy(update={"in_place": place})
        run.changed(trial.tokens)  # the same K and schedule: a fresh start of its windows
        message = (
            f"the stable pods switch to config {trial.config.hash} at K={trial.tokens}; "
            f"compared with K={place.previous_tokens} of config {state.running.hash} before"
        )
        run.act(
            ActionKind.SWITCH_CONFIG_IN_PLACE,
            "ConfigChanged",
            message,
            from_tokens=place.previous_tokens,
            to_tokens=trial.tokens,
        )

    def end(self, record: ConfigTrial, ended: Ended) -> None:
        # Each outcome named: the reasons ConditionType.CONFIG_REJECTED can give are read
        # from the code (reference.condition_reasons), and no margin applies here.
        run, outcome, message = self.run, ended.outcome, ended.message
        if outcome is TrialOutcome.GOODPUT_GAIN:
            _adopt(
                run, record.config, ActionKind.PROMOTE_CONFIG, TrialOutcome.GOODPUT_GAIN, message
            )
        elif outcome is TrialOutcome.NO_GAIN:
            _reject(run, TrialOutcome.NO_GAIN, message)
        elif outcome is TrialOutcome.RUNTIME_FAILED:
            _reject(run, TrialOutcome.RUNTIME_FAILED, message)
        elif outcome is TrialOutcome.TIMEOUT:
            _reject(run, TrialOutcome.TIMEOUT, message)
        else:
            assert outcome is TrialOutcome.BELOW_FLOOR, outcome
            _reject(run, TrialOutcome.BELOW_FLOOR, message)


def _waits_for_canary(trial: ConfigTrial, pending: bool) -> bool:
    """The trial's canary has not run: its pod is Pending, or its Deployment cannot create
    it (`pending`: quota, admission, a missing ServiceAccount:
    pod_reading.canary_pending), and no window of the new config is in."""
    return pending and trial.placement is Placement.CANARY and trial.canary.windows == 0


def _adopt(run: Run, wanted: RunningConfig, kind: ActionKind, reason: str, message: str) -> None:
    """The stable pods run `wanted` from now on, at the K they ran (the trial's); the
    step cost and every memory of K are learned anew for it."""
    sp, state = run.sp, run.status.config
    trial = state.trial if state is not None else None
    rate = candidate_rate(trial.canary) if trial is not None else None
    spec_config = config_of(run.spec)
    if spec_config.hash == wanted.hash:
        wanted = spec_config  # with what the spec's pods are rendered from
    previous = sp.tokens
    if state is None:
        run.status.config = ConfigState(running=wanted)
    else:
        state.running, state.trial, state.rejected = wanted, None, None
    k, bands = _matched(run)
    k = trial.tokens if trial is not None else k
    _drop_canary_window(run)
    run.status.step_cost = None  # measured with another draft, image or vLLM
    run.drafting = sp.drafting = wanted.method.runtime.drafting
    sp.schedule = bands
    # Learned anew for the new config: enable() makes K=k (and the schedule) last known good.
    sp.rejected = sp.reprobing = sp.last_known_good = sp.good_acceptance = None
    enable(run, k)
    clear_below_floor(run, "ConfigChanged", f"the stable pods run config {wanted.hash}")
    run.act(kind, reason, message, from_tokens=previous, to_tokens=k, acceptance=rate)
    run.condition(ConditionType.CONFIG_REJECTED, "False", reason, message)


def _end(run: Run, trial: ConfigTrial) -> None:
    """The stable pods back on the running config (InPlace), the canary gone."""
    state = run.status.config
    assert state is not None
    state.trial = None
    place = trial.in_place
    if place is not None:
        if place.switched:
            run.status.step_cost = None  # its last samples are the rejected config's
            tokens = place.previous_tokens or run.spec.speculation.tokens
            run.stable_runs(tokens, place.previous_schedule)
        return
    _drop_canary_window(run)


def _drop_canary_window(run: Run) -> None:
    """What the canary collected on is dropped: it runs another config, or none."""
    run.status.open_windows = with_collected(run.status.open_windows, "canary", None)


def forget_canary_schedule(run: Run) -> None:
    """The spec's K or schedule replaced the tuner's: a config trial's canary goes on at
    its K, not at the schedule it was matched to (kept as it was when both lived in
    speculation's candidate fields, which the spec's K cleared)."""
    state = run.status.config
    if state is not None and state.trial is not None:
        state.trial.schedule = None


def _reject(run: Run, reason: TrialOutcome, message: str) -> None:
    state = run.status.config
    assert state is not None and state.trial is not None
    trial = state.trial
    rate = candidate_rate(trial.canary)
    _end(run, trial)
    state.rejected = ConfigRejection(
        hash=trial.config.hash, reason=reason.value, message=message, at=run.now
    )
    said = (
        f"config {trial.config.hash} rejected; the stable pods stay on config "
        f"{state.running.hash}: {message}"
    )
    run.act(
        ActionKind.REJECT_CONFIG,
        reason,
        said,
        warning=True,
        from_tokens=trial.tokens,
        to_tokens=run.sp.tokens,
        acceptance=rate,
    )
    run.condition(ConditionType.CONFIG_REJECTED, "True", reason, said)


def _cancel(run: Run, message: str) -> None:
    """A trial the spec no longer asks for ends unjudged: nothing is rejected."""
    state = run.status.config
    assert state is not None and state.trial is not None
    trial = state.trial
    _end(run, trial)
    run.condition(ConditionType.CONFIG_REJECTED, "False", "Cancelled", message)
    run.act(
        ActionKind.CANCEL_CONFIG_TRIAL,
        TrialOutcome.CONFIG_CHANGED,
        message,
        from_tokens=trial.tokens,
        to_tokens=run.sp.tokens,
    )
