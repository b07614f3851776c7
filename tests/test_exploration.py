"""Exploration: the fit's intervals, and trials of Ks it is unsure of within a budget."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from specfleet.operator import exploration, speed, track_plan
from specfleet.operator.api import Decision, SpeculativeModelStatus, StepTimeSample
from specfleet.operator.observations import Observation
from specfleet.operator.outcomes import ActionKind, TrialStart
from specfleet.operator.prediction import predictions_at
from specfleet.operator.run import Run
from specfleet.operator.tuner import decide
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import StepCost, step_seconds
from tests.decisions import CODE, T0, Fleet, make_spec, window

# Memory-bound up to 128 verified tokens: at batch 8 deep Ks cost almost nothing more,
# where the prior (knee 32) says every K past 3 pays for verification.
WIDE_KNEE = StepCost(compute_bound_tokens=128)
BATCH = 8


def sample(cost: StepCost, k: int, batch: float = BATCH) -> StepTimeSample:
    ms = step_seconds(cost, k, round(batch), Drafting.PARALLEL) * 1000
    return StepTimeSample(tokens=k, batch=batch, step_ms=ms, steps=5000, windows=4, measured_at=T0)


def test_the_interval_is_narrow_where_measured_and_holds_the_truth_where_not() -> None:
    """One sample at K=3, batch 8 of an engine whose knee is at 128 tokens: the fit
    (the prior's knee, 32) is sure of K=3 and says K=8 costs 9 ms; the truth, 5 ms, is
    outside anything the fit alone would say but inside its interval."""
    posterior = speed.posterior([sample(WIDE_KNEE, 3)], Drafting.PARALLEL, T0)
    at_3, at_8 = posterior.interval(3, BATCH), posterior.interval(8, BATCH)
    assert (at_3.high - at_3.low) / at_3.ms < 0.1
    truth = step_seconds(WIDE_KNEE, 8, BATCH, Drafting.PARALLEL) * 1000
    assert at_8.ms > 1.5 * truth
    assert at_8.low <= truth <= at_8.high
    assert (at_8.high - at_8.low) / at_8.ms > 0.5
    # Measured at K=8 too, the fit is sure there and right.
    both = speed.posterior([sample(WIDE_KNEE, 3), sample(WIDE_KNEE, 8)], Drafting.PARALLEL, T0)
    measured = both.interval(8, BATCH)
    assert (measured.high - measured.low) / measured.ms < 0.1
    assert measured.ms == pytest.approx(truth, rel=0.05)


def _run(status: SpeculativeModelStatus, samples: list[StepTimeSample]) -> Run:
    status.step_cost = speed.record(None, 3, None, T0, Drafting.PARALLEL).model_copy(
        update={"samples": samples}
    )
    status.speculation.tokens = 3
    spec = make_spec()
    return Run(spec, status, T0 + timedelta(minutes=10), None, track_plan.plan(spec, status))


def _choose(run: Run) -> exploration.Exploration | None:
    shown = window(CODE, 3, batch=BATCH)
    predicted = predictions_at(run.spec, shown, run.sp.good_acceptance, run.cost)
    eligible = [p for k, p in predicted.items() if k != 3]
    return exploration.choose(run, eligible, predicted[3], BATCH)


def test_an_unmeasured_k_in_doubt_is_explored_within_the_budget() -> None:
    run = _run(SpeculativeModelStatus(), [sample(WIDE_KNEE, 3)])
    chosen = _choose(run)
    assert chosen is not None and chosen.tokens != 3
    assert chosen.chance >= exploration.MIN_CHANCE
    assert "90% interval" in chosen.message and "exploration 1 of 2" in chosen.message
    # Two explorations within speed.MAX_AGE: the budget is spent.
    started = [
        Decision(
            time=run.now - timedelta(hours=hours),
            action=ActionKind.START_CANARY,
            reason=f"{TrialStart.EXPLORE}: K=5 ...",
        )
        for hours in (1, 5)
    ]
    spent = _run(SpeculativeModelStatus(history=started), [sample(WIDE_KNEE, 3)])
    assert _choose(spent) is None
    # One of them older than MAX_AGE: room for one more.
    started[1] = started[1].model_copy(update={"time": run.now - speed.MAX_AGE})
    room = _run(SpeculativeModelStatus(history=started), [sample(WIDE_KNEE, 3)])
    assert _choose(room) is not None


def test_measured_ks_and_untimed_pods_are_not_explored() -> None:
    every = [sample(WIDE_KNEE, k) for k in range(1, 9)]
    assert _choose(_run(SpeculativeModelStatus(), every)) is None
    assert _choose(_run(SpeculativeModelStatus(), [])) is None  # no step times at all


def test_a_k_the_fit_is_sure_of_is_not_explored() -> None:
    """Samples on both sides of the prior's knee place it: what is left has a narrow
    interval, and no K gains by it."""
    engine = StepCost()
    placed = [sample(engine, 3), sample(engine, 6), sample(engine, 1)]
    assert _choose(_run(SpeculativeModelStatus(), placed)) is None


def test_exploration_finds_a_deep_k_the_prior_hides_and_then_stops() -> None:
    """At batch 8 on the wide-knee engine the fit, from K=3 alone, predicts no K gains;
    exploring measures one, the fit learns the knee, and the tuner climbs to a deep K.
    Never more explorations than the budget, each a canary (the stable pods serve)."""
    fleet = Fleet(make_spec(), engine=WIDE_KNEE, batch=BATCH)
    for _ in range(240):
        fleet.step(CODE)
    starts = [d for d in fleet.status.history if d.action == ActionKind.START_CANARY]
    explored = [d for d in starts if d.reason.startswith(f"{TrialStart.EXPLORE}:")]
    assert starts[0] in explored, starts[0].reason
    assert 1 <= len(explored) <= exploration.EXPLORATION_BUDGET
    assert fleet.status.speculation.tokens is not None
    assert fleet.status.speculation.tokens >= 6
    assert not any("StartInPlace" in kinds for kinds in fleet.kinds)


def test_no_exploration_from_idle_windows() -> None:
    """After the first exploration ends the budget has room and Ks are still in doubt,
    but windows without traffic measure nothing: no trial starts from them."""
    fleet = Fleet(make_spec(), engine=WIDE_KNEE, batch=BATCH)
    for _ in range(30):
        if {"Promote", "Abort"} & set(fleet.step(CODE)):
            break
    assert fleet.status.history[0].reason.startswith(f"{TrialStart.EXPLORE}:")
    history = list(fleet.status.history)
    for _ in range(30):
        assert "StartCanary" not in fleet.step(None)
    assert fleet.status.history == history
    assert "StartCanary" in fleet.step(CODE)  # the first window of traffic may


def test_a_proposal_states_its_predicted_gain_with_an_interval() -> None:
    fleet = Fleet(make_spec(), engine=StepCost(), batch=1)
    assert any("StartCanary" in fleet.step(CODE) for _ in range(30))
    reason = fleet.status.history[-1].reason
    assert reason.startswith(f"{TrialStart.PREDICTED_GAIN}: K=")
    assert "goodput over K=3" in reason and "(90% interval " in reason


def test_decide_explores_in_place_at_most_once_an_hour() -> None:
    """In place, an exploratory trial restarts the pods that serve: like any in-place
    trial, at most one starts in an hour."""
    fleet = Fleet(make_spec(tuning={"strategy": "InPlace"}), engine=WIDE_KNEE, batch=BATCH)
    times = []
    for _ in range(300):
        if "StartInPlace" in fleet.step(CODE):
            times.append(fleet.now)
    assert times
    assert all(b - a >= timedelta(hours=1) for a, b in itertools.pairwise(times))


def test_decide_is_unchanged_by_exploration_without_step_times() -> None:
    """Pods that export no step times: nothing to explore, the tuner proposes as before."""
    status = SpeculativeModelStatus()
    spec = make_spec()
    now = T0
    for _ in range(20):
        now += timedelta(minutes=1)
        status = decide(
            spec, status, Observation(stable=window(CODE, 3, batch=BATCH), canary=None), now
        ).status
    assert not any(d.reason.startswith(f"{TrialStart.EXPLORE}:") for d in status.history)


def test_in_place_exploration_must_repay_the_restarts_of_failing() -> None:
    """In place, an exploration that fails restarts the serving pods twice: with 300 s
    startups it needs a 2/3 chance of the required gain (+8.3%), on a canary 5%."""
    canary = _run(SpeculativeModelStatus(startup_seconds=300), [sample(WIDE_KNEE, 3)])
    assert exploration._chance_needed(canary, canary.required_gain()) == exploration.MIN_CHANCE
    in_place = _run(SpeculativeModelStatus(startup_seconds=300), [sample(WIDE_KNEE, 3)])
    in_place.spec = make_spec(tuning={"strategy": "InPlace"})
    required = in_place.required_gain()
    assert required == pytest.approx(300 / 3600)
    assert exploration._chance_needed(in_place, required) == pytest.approx(2 / 3)
    chosen = _choose(in_place)
    assert chosen is None or chosen.chance >= 2 / 3
