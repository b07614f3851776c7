"""The working state of one `tuner.decide` call: a deep copy of status, the spec, the
time, and the actions taken so far. Every transition module takes it; it imports none
of them, so the transitions form layers under `tuner` instead of a loop back to it."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from specfleet.operator import hot_schedules, speed
from specfleet.operator.api import (
    HISTORY_LIMIT,
    ConditionType,
    Decision,
    FittedStepCost,
    ScheduledBand,
    SinceChange,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    StepTimeSample,
    TuningStrategy,
)
from specfleet.operator.conditions import ConditionChange, ConditionStatus, set_condition
from specfleet.operator.outcomes import Action, ActionKind
from specfleet.operator.track_plan import TrackPlans
from specfleet.operator.trial_stats import ONE_SIDED_95, TRIAL_EXTENSION, resolvable_gain

# How long a new K is expected to hold: a change must repay its restarts within it. An
# hour, as the tuner changes K at most about once an hour once settled.
SWITCH_HORIZON = timedelta(hours=1)


def working_copy(status: SpeculativeModelStatus) -> SpeculativeModelStatus:
    """A deep copy of status for `Run` to change, sharing its configs: they are frozen and
    replaced whole, and, holding the spec's pod settings, they were half of copying a
    status (which every reconcile does)."""
    memo: dict[int, Any] = {}
    config = status.config
    if config is not None:
        for kept in (config.running, config.trial.config if config.trial else None):
            if kept is not None:
                memo[id(kept)] = kept
    copied: SpeculativeModelStatus = copy.deepcopy(status, memo)
    return copied


class Run:
    """The mutable working state of one `decide` call (a deep copy of status)."""

    def __init__(
        self,
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        now: datetime,
        generation: int | None,
        plans: TrackPlans,
    ) -> None:
        self.spec = spec
        self.status = status
        self.sp = status.speculation
        self.now = now
        self.generation = generation
        self.actions: list[Action] = []
        # The stable pods' drafting: the running config's while a new one is on trial.
        # `plans`: what each track runs by (spec, status) (track_plan.plan).
        self.drafting = plans.stable.spec.draft.method.runtime.drafting
        self.floor = spec.rollback.min_acceptance
        self.margin = spec.tuning.acceptance_margin

    def act(
        self,
        kind: ActionKind,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        from_tokens: int | None = None,
        to_tokens: int | None = None,
        acceptance: float | None = None,
        goodput: float | None = None,
        record: bool = True,
    ) -> None:
        self.actions.append(Action(kind, reason, message, warning))
        if record:
            entry = Decision(
                time=self.now,
                action=kind,
                from_tokens=from_tokens,
                to_tokens=to_tokens,
                reason=f"{reason}: {message}",
                acceptance=acceptance,
                goodput=goodput,
            )
            self.status.history = [*self.status.history, entry][-HISTORY_LIMIT:]

    def condition(
        self, type: ConditionType, status: ConditionStatus, reason: str, message: str
    ) -> None:
        self.status.conditions = set_condition(
            self.status.conditions,
            type,
            status,
            reason,
            message,
            self.now,
            self.generation,
        )

    def set_condition(self, change: ConditionChange) -> None:
        """A condition a transition returned, set."""
        self.condition(change.type, change.status, change.reason, change.message)

    def changed(self, tokens: int | None) -> None:
        """K in effect changed (None: to plain decoding, speculation off or on trial):
        cooldown restarts, and what was seen of the K before is dropped whole."""
        if tokens is not None:
            self.sp.tokens = tokens
        self.sp.since_change = SinceChange(at=self.now)
        self.status.open_windows = None

    def stable_runs(self, tokens: int | None, schedule: list[ScheduledBand] | None) -> None:
        """The stable pods change to K=tokens (None: plain decoding) and `schedule`, the
        per-batch K they take hot: K changed (see changed)."""
        self.sp.schedule = schedule
        self.changed(tokens)

    @property
    def cost(self) -> FittedStepCost:
        """The step cost to predict with: status' fit, or the prior for the stable pods'
        drafting before a measurement (or after one was dropped). Derived, never kept: a
        write of status.stepCost is its only change."""
        return speed.cost_in(self.status.step_cost, self.drafting)

    @property
    def trials_in_place(self) -> bool:
        """Trials run on the stable pods: the spec's strategy, or the fallback a canary
        Pending past canaryPendingTimeout switched to (status.speculation.strategy)."""
        strategy = self.sp.strategy or self.spec.tuning.strategy
        return strategy is TuningStrategy.IN_PLACE

    def required_gain(self) -> float:
        """The relative goodput gain a change of K must promise (and a trial prove):
        minImprovement, or more when restarting a pod costs more than that gain returns
        within SWITCH_HORIZON (each restarted pod serves nothing for status.startupSeconds).
        Where the pods take K hot a change costs no restart, and an interleaved trial
        proves it on matched pairs: a change must promise what such a trial can prove at
        the spread its pairs measured (minImprovement until one has ended)."""
        spread = self.sp.pair_spread
        if spread is not None and hot_schedules.in_effect(self.spec, self.status):
            pairs = TRIAL_EXTENSION * self.spec.tuning.canary_windows
            return resolvable_gain(spread, pairs, ONE_SIDED_95)
        return max(self.spec.tuning.min_improvement, self.restart_cost())

    @property
    def samples(self) -> list[StepTimeSample]:
        """The step times the pods measured, that the fitted cost rests on."""
        return self.status.step_cost.samples if self.status.step_cost else []

    def restart_cost(self) -> float:
        """The share of SWITCH_HORIZON one restart of the serving pods loses: none where
        they take a new K hot, between two steps."""
        if hot_schedules.in_effect(self.spec, self.status):
            return 0.0
        return (self.status.startup_seconds or 0.0) / SWITCH_HORIZON.total_seconds()

    def failed_exploration_cost(self, loss: float) -> float:
        """The share of SWITCH_HORIZON an in-place exploration that fails loses: a restart
        there and one back, and `loss` (the goodput it gives up while it runs) over the
        windows that judge it."""
        tuning = self.spec.tuning
        runs = tuning.canary_windows * tuning.interval.length.total_seconds()
        return 2 * self.restart_cost() + loss * runs / SWITCH_HORIZON.total_seconds()
