"""Trials: a candidate climbs through a canary or in place, judged on measured windows
at one fleet size."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

import pytest

from specfleet.operator import speed, trials
from specfleet.operator.api import (
    TrackTotals,
    TuningStrategy,
)
from specfleet.operator.counts import Counts
from specfleet.operator.durations import parse_duration
from specfleet.operator.observations import CanaryPending, Observation
from specfleet.operator.outcomes import ActionKind, TrialOutcome
from specfleet.operator.run import Run
from specfleet.operator.trial_stats import TRIAL_EXTENSION, goodput_gain, totals_add
from specfleet.operator.tuner import decide
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import StepCost, goodput
from tests.decisions import CODE, DEAR_VERIFY, Fleet, make_spec, scaled, window


def test_high_acceptance_climbs_through_a_canary() -> None:
    fleet = Fleet(make_spec())
    for _ in range(40):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StartCanary" in flat and "Promote" in flat
    assert (fleet.status.speculation.tokens or 0) > 3
    assert fleet.status.speculation.last_known_good is not None
    assert [d.action for d in fleet.status.history][:2] == ["StartCanary", "Promote"]


def test_a_trial_end_is_planned_as_a_value_then_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_end changes nothing (issue 40: transitions return values); finish applies what
    it planned: the decision and its words in history, the K the stable pods run, the Ks
    rejected."""
    planned: list[trials.TrialEnd] = []
    plan = trials.plan_end

    def watched(run: Run, **how: bool | TrialOutcome | str) -> trials.TrialEnd:
        before, actions = run.status.model_dump(), list(run.actions)
        end = plan(run, **how)  # type: ignore[arg-type]
        assert run.status.model_dump() == before and run.actions == actions
        planned.append(end)
        return end

    monkeypatch.setattr(trials, "plan_end", watched)
    seen: set[type] = set()
    # Promoted on the prior's engine, aborted where verifying costs more than it says.
    for fleet, _ in itertools.product(
        (Fleet(make_spec()), Fleet(make_spec(), engine=DEAR_VERIFY)), range(60)
    ):
        planned.clear()
        fleet.step(CODE)
        if not planned:
            continue
        (end,) = planned
        then = end.then
        seen.add(type(then))
        (entry,) = [
            d
            for d in fleet.status.history
            if d.time == fleet.now and d.action in (ActionKind.PROMOTE, ActionKind.ABORT)
        ]
        assert entry.reason == f"{end.outcome}: {end.message}"
        sp = fleet.status.speculation
        assert sp.trial is None
        if isinstance(then, trials.Promotion):
            assert entry.action == ActionKind.PROMOTE and entry.to_tokens == then.tokens
            assert (sp.tokens, sp.last_known_good) == (then.tokens, then.good)
        else:
            assert isinstance(then, trials.Abort)
            assert entry.action == ActionKind.ABORT
            assert entry.to_tokens == end.sides.before_tokens
            assert set(then.rejected_tokens) <= set(sp.rejected_tokens)
            if then.back_to is not None:
                assert sp.tokens == then.back_to
    assert seen == {trials.Promotion, trials.Abort}


def test_a_trial_whose_canary_says_nothing_ends_inconclusive_once_overdue() -> None:
    """A canary that measures nothing (no window of it comes) ends its trial
    CanaryInconclusive, not before the longest its windows can take: canaryWindows x
    TRIAL_EXTENSION windows of up to maxWindowAge, maxInconclusiveWindows intervals, and
    canaryPendingTimeout."""
    fleet = Fleet(make_spec())
    while fleet.status.speculation.trial is None:
        fleet.step(CODE)
    started = fleet.now
    tuning = fleet.spec.tuning
    interval = parse_duration(tuning.interval)
    deadline = (
        max(interval, parse_duration(tuning.max_window_age))
        * tuning.canary_windows
        * TRIAL_EXTENSION
        + interval * tuning.max_inconclusive_windows
        + parse_duration(tuning.canary_pending_timeout)
    )
    stable = window(CODE, fleet.status.speculation.stable_k, 20_000)
    while fleet.status.speculation.trial is not None and fleet.now - started < 2 * deadline:
        fleet.now += timedelta(minutes=1)
        observation = Observation(stable=stable, canary=None)
        fleet.status = decide(fleet.spec, fleet.status, observation, fleet.now).status
    last = fleet.status.history[-1]
    assert last.action == ActionKind.ABORT and last.reason.startswith("CanaryInconclusive: 0 of")
    assert deadline < fleet.now - started <= deadline + timedelta(minutes=1)


def test_trials_are_judged_on_measured_step_times_and_settle_on_the_fastest_k() -> None:
    def true_goodput(k: int) -> float:
        return goodput(DEAR_VERIFY, CODE, k, 4, Drafting.PARALLEL)

    best = max(true_goodput(k) for k in range(1, 9))
    fleet = Fleet(make_spec(), engine=DEAR_VERIFY)
    for _ in range(60):
        fleet.step(CODE)
    decisions = [d for d in fleet.status.history if d.action in ("Promote", "Abort")]
    assert decisions and all("measured step" in d.reason for d in decisions)
    assert true_goodput(fleet.status.speculation.tokens or 0) >= 0.97 * best
    # The same fleet without step times trusts the prior and ends where the prior says.
    blind = Fleet(make_spec())
    for _ in range(60):
        blind.step(CODE)
    assert true_goodput(blind.status.speculation.tokens or 0) < 0.95 * best


def test_pending_canary_falls_back_to_in_place() -> None:
    fleet = Fleet(make_spec())
    while fleet.status.canary_run is None:
        fleet.step(CODE)
    pending_since = fleet.now.timestamp()
    fleet.now += timedelta(minutes=10)
    waiting = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    kinds = fleet.step(CODE, canary_pending=CanaryPending(pending_since, waiting))
    assert "InPlaceFallback" in kinds
    # What the canary waited for is in status: the scheduler's own words.
    assert f"the scheduler says: {waiting}" in fleet.status.history[-1].reason
    assert fleet.status.speculation.strategy is TuningStrategy.IN_PLACE
    assert fleet.status.speculation.trial is None
    for _ in range(20):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StartInPlace" in flat
    assert fleet.status.canary_run is None  # never a canary again


@pytest.mark.parametrize("strategy", ["Canary", "InPlace"])
def test_a_trial_running_when_the_fleet_scales_restarts_at_the_new_size(strategy: str) -> None:
    fleet = Fleet(make_spec(tuning={"strategy": strategy}))
    while fleet.status.speculation.trial is None:
        fleet.step(CODE)
    trial = fleet.status.speculation.trial
    assert trial.stable_replicas == 1
    in_place = trial.in_place
    k_before_trial = in_place.previous_tokens if in_place else fleet.status.speculation.tokens
    fleet.step(CODE)  # one window of the trial at the old size
    fleet.spec = scaled(fleet.spec, 4)
    kinds = fleet.step(CODE)
    assert kinds[0] == "Abort", kinds
    last = fleet.status.history[-1]
    assert last.action == "Abort" and last.reason.startswith("FleetScaled")
    assert "from 1 to 4" in last.reason
    sp = fleet.status.speculation
    # Not promoted, not rejected: the candidate may be tried again at the new load.
    assert sp.tokens == k_before_trial and sp.rejected_tokens == []
    assert sp.trial is None and sp.since_change.at == fleet.now
    # The next trial starts after the cooldown and remembers the new size.
    while (trial := fleet.status.speculation.trial) is None:
        fleet.step(CODE)
    assert fleet.now - sp.since_change.at >= timedelta(minutes=3)
    assert trial.stable_replicas == 4


def test_a_trial_is_judged_only_on_windows_at_one_fleet_size() -> None:
    """Every promotion's trial ran at one spec.replicas, however often the fleet scales."""
    fleet = Fleet(make_spec())
    started_at_size: int | None = None
    promotions = restarts = 0
    for step in range(60):
        # The first trial starts at step 0: the scaler steps in at once, then later again.
        fleet.spec = scaled(fleet.spec, 1 if step < 1 else 3 if step < 30 else 2)
        kinds = fleet.step(CODE)
        if "StartCanary" in kinds:
            started_at_size = fleet.spec.replicas
        if "Promote" in kinds:
            promotions += 1
            assert started_at_size == fleet.spec.replicas
        if "Abort" in kinds and fleet.status.history[-1].reason.startswith("FleetScaled"):
            restarts += 1
    assert promotions >= 1 and restarts >= 1, (promotions, restarts)


def test_a_track_verifying_below_its_k_is_judged_on_what_it_verified() -> None:
    # vLLM's adaptive verification: the stable track was handed K=3 and verified one
    # draft token per draft, as the canary at K=1 did; same counts and step times, so
    # no gain either way (taking 3 verified per draft would make the canary 47% worse).
    counts = Counts(
        drafts=10_000,
        draft_tokens=10_000,
        accepted_tokens=8_000,
        decode_seconds=80.0,
        decode_steps=10_000,
        engine_steps=10_000,
    )
    totals = TrackTotals(
        counts=counts,
        timed=counts,
        windows=4,
        timed_windows=4,
        step_seconds_sum=0.032,
        step_seconds_squares=4 * 0.008**2,
    )
    estimate, _ = goodput_gain(totals, 3, totals, 1, 1.0, speed.prior(Drafting.PARALLEL))
    assert estimate.value == pytest.approx(0.0)


def test_the_gain_counts_measured_acceptance_length_not_k() -> None:
    """Drafts shorter than K (dspark, ngram, suffix, schedules): equal true acceptance
    lengths and a 4% slower candidate are a 4% loss, not the "+66%" 1 + rate x K made of
    it."""
    before_w = window(CODE, 3, engine=StepCost())
    after_w = replace(
        before_w,
        decode_seconds=before_w.decode_seconds * 1.04,  # 4% slower steps
        draft_tokens=before_w.draft_tokens,  # K=8 configured, 3 tokens a draft drafted
    )
    before = totals_add(TrackTotals(), before_w)
    after = totals_add(TrackTotals(), after_w)
    gain, _ = goodput_gain(before, 3, after, 8, 4.0, speed.prior(Drafting.PARALLEL))
    assert gain.value == pytest.approx(1 / 1.04 - 1, abs=0.005)
    assert gain.low < 0


def test_an_in_place_trial_is_judged_against_a_baseline_measured_after_proposing() -> None:
    """The window that proposed a trial was chosen for how it looked: judging against it
    credits the candidate with its noise (the winner's curse). In place, the K that runs
    is measured afresh for 3 x canaryWindows windows, then the pods switch."""
    fleet = Fleet(make_spec(tuning={"strategy": "InPlace"}), engine=StepCost())
    while "StartInPlace" not in fleet.step(CODE):
        pass
    sp = fleet.status.speculation
    trial = sp.trial
    assert trial is not None and trial.in_place is not None and not trial.in_place.switched
    assert trial.stable.windows == 0  # not the proposing window
    previous = trial.in_place.previous_tokens
    assert sp.tokens == previous  # the pods still run the old K
    for _ in range(3 * 3 - 1):
        fleet.step(CODE)
        assert fleet.status.speculation.tokens == previous
    fleet.step(CODE)
    sp = fleet.status.speculation
    trial = sp.trial
    assert trial is not None and trial.in_place is not None and trial.in_place.switched
    assert trial.stable.windows == 9 and sp.tokens == trial.tokens


def test_in_place_trials_start_at_most_once_an_hour() -> None:
    """Each in-place trial restarts the serving pods: the next one waits out
    run.SWITCH_HORIZON since the last started, whatever tuning.cooldown (3m) says."""
    fleet = Fleet(make_spec(tuning={"strategy": "InPlace"}), engine=StepCost())
    starts = []
    for minute in range(150):
        if minute == 40:  # K=1 now (as after a rollback): another trial pays at once
            sp = fleet.status.speculation.model_copy(update={"tokens": 1})
            fleet.status = fleet.status.model_copy(update={"speculation": sp})
        if "StartInPlace" in fleet.step(CODE):
            starts.append(minute)
    assert len(starts) >= 2, starts
    assert all(b - a >= 60 for a, b in itertools.pairwise(starts)), starts
    assert starts[1] - starts[0] < 65, starts  # and no longer


def test_a_proposal_says_what_its_predicted_step_time_rests_on() -> None:
    """A K never run is an extrapolation of the fit (or the prior alone), and the proposal
    says so: the trial is what checks it."""
    timed = Fleet(make_spec(), engine=StepCost())
    while "StartCanary" not in timed.step(CODE):
        pass
    reason = timed.status.history[-1].reason
    k = timed.status.canary_run and timed.status.canary_run[0]
    assert f"step time at K={k} extrapolated from K=3" in reason
    untimed = Fleet(make_spec())
    while "StartCanary" not in untimed.step(CODE):
        pass
    assert "from the prior alone (no K measured yet)" in untimed.status.history[-1].reason


@pytest.mark.parametrize("strategy", ["InPlace", "Canary"])
def test_a_deep_k_measured_no_faster_is_not_tried_again_on_an_extrapolation(
    strategy: str,
) -> None:
    """A weak head at K=1 (0.73, then 0.07 and 0.05 at the positions after it): the
    decay from 0.73 predicts K=4 48% faster. Its trial measures the deeper positions, and
    the proposals after it predict from them, not from the decay again once the
    rejection lapses (which retried K=4 every hour in place, two restarts each, and K=2-4
    in turn on a canary)."""
    spec = make_spec(
        speculation={"tokens": 1, "minTokens": 1, "maxTokens": 4},
        tuning={"strategy": strategy},
        rollback={"metric": "FirstPositionAcceptance", "minAcceptance": 0.5},
    )
    fleet = Fleet(spec)
    weak_head = [0.73, 0.07, 0.05]
    for _ in range(300):
        fleet.step(weak_head)
    trials = [d for d in fleet.status.history if d.action in ("StartInPlace", "StartCanary")]
    assert len(trials) == 1, [d.reason for d in trials]
    assert fleet.status.speculation.good_acceptance == pytest.approx([0.73, 0.07, 0.05, 0.05])
