"""Plain decoding when it measures faster: a prediction starts a canary of plain
decoding, and only its measurement stops speculation (plain.py)."""

from __future__ import annotations

from specfleet.operator import exploration, speed
from specfleet.operator.api import Decision, OffReason, SpeculativeModelStatus
from specfleet.operator.outcomes import ActionKind, TrialOutcome, TrialStart
from specfleet.operator.prediction import plain, predictions_at
from specfleet.operator.run import Run
from specfleet.runtime.sim_model import StepCost
from tests.decisions import CODE, NO_K_PAYS, UNDER_FLOOR, Fleet, make_spec, window
from tests.test_exploration import BATCH, WIDE_KNEE, _run, sample

# Memory-bound to 128 verified tokens at 32 in flight: K=3 pays, but from K=3 alone the
# fit (the prior's knee, 32) predicts verification compute-bound, and plain faster.
IN_FLIGHT = 32


def _plain_starts(fleet: Fleet, where: ActionKind = ActionKind.START_CANARY) -> list[Decision]:
    """Trials of plain decoding started (on a canary, or in place)."""
    return [d for d in fleet.status.history if d.action == where and d.to_tokens == 0]


def test_a_wrong_prediction_of_plain_decoding_is_measured_not_acted_on() -> None:
    fleet = Fleet(make_spec(), engine=WIDE_KNEE, batch=IN_FLIGHT)
    for _ in range(120):
        fleet.step(CODE)
    flat = {k for kinds in fleet.kinds for k in kinds}
    assert "StopSpeculation" not in flat and "Disable" not in flat
    assert fleet.status.speculation.off is None
    started = _plain_starts(fleet)
    assert started, [d.reason for d in fleet.status.history]
    ended = [d for d in fleet.status.history if d.action == ActionKind.ABORT and d.from_tokens == 0]
    assert ended and "plain decoding (K=0) vs K=" in ended[0].reason
    assert "measured step" in ended[0].reason


def test_plain_decoding_once_measured_is_not_tried_again() -> None:
    """After a canary measured plain decoding slower, it is rejected for reprobeAfter, and
    past that the fit has its sample: no second plain canary, no stop."""
    fleet = Fleet(make_spec(), engine=WIDE_KNEE, batch=IN_FLIGHT)
    while "Abort" not in fleet.step(CODE):
        assert len(fleet.kinds) < 30
    assert fleet.status.history[-1].from_tokens == 0
    assert 0 in fleet.status.speculation.rejected_tokens
    for _ in range(240):
        fleet.step(CODE)
    assert len(_plain_starts(fleet)) == 1
    assert fleet.status.speculation.off is None


def test_in_place_plain_decoding_is_measured_before_speculation_stops() -> None:
    """In place the prediction starts a trial of plain decoding on the stable pods (at
    most an hour after the last in-place change, as any in-place change): a baseline at
    K=3, then plain decoding. Speculation stops on what it measures, with no restart
    more: the pods decode plainly from the switch on."""
    fleet = Fleet(make_spec(tuning={"strategy": "InPlace"}), engine=NO_K_PAYS)
    ks = []
    for _ in range(90):
        fleet.step(CODE)
        ks.append(fleet.status.speculation.stable_k)
    started = _plain_starts(fleet, ActionKind.START_IN_PLACE)
    assert started and started[0].reason.startswith(f"{TrialStart.PLAIN_PREDICTED}:")
    off = fleet.status.speculation.off
    assert off is not None and off.message.startswith("plain decoding (K=0) vs K=3")
    assert "measured step" in off.message
    # From the switch on the pods decode plainly: the stop restarts nothing.
    assert ks[-1] == 0 and all(k == 0 for k in ks[ks.index(0) :]), ks


def test_in_place_a_wrong_prediction_of_plain_decoding_goes_back_to_its_k() -> None:
    fleet = Fleet(make_spec(tuning={"strategy": "InPlace"}), engine=WIDE_KNEE, batch=IN_FLIGHT)
    for _ in range(120):
        fleet.step(CODE)
    assert fleet.status.speculation.off is None
    started = _plain_starts(fleet, ActionKind.START_IN_PLACE)
    assert started, [d.reason for d in fleet.status.history]
    ended = [d for d in fleet.status.history if d.action == ActionKind.ABORT and d.from_tokens == 0]
    assert ended and ended[0].to_tokens == started[0].from_tokens
    assert fleet.status.speculation.stable_k == started[0].from_tokens


def _explored(run_at: Run, tokens: int) -> Decision:
    words = "plain decoding (K=0)" if tokens == 0 else f"K={tokens}"
    return Decision(
        time=run_at.now,
        action=ActionKind.START_CANARY,
        reason=f"{TrialStart.EXPLORE}: {words} ...",
        to_tokens=tokens,
    )


def test_plain_decoding_is_explored_on_its_own_budget() -> None:
    """Plain decoding's interval is the widest (a draft's fixed cost hides in it): on the
    budget of Ks it would crowd them out, so it has its own."""
    samples = [sample(WIDE_KNEE, 3)]
    fresh = _run(SpeculativeModelStatus(), samples)
    shown = window(CODE, 3, batch=BATCH)
    predicted = predictions_at(fresh.spec, shown, fresh.sp.good_acceptance, fresh.cost)
    candidates = [p for k, p in predicted.items() if k != 3] + [plain(BATCH, fresh.cost)]

    def choose(history: list[Decision]) -> exploration.Exploration | None:
        run = _run(SpeculativeModelStatus(history=history), samples)
        return exploration.choose(run, candidates, predicted[3], BATCH)

    ks_spent = [_explored(fresh, 5)] * exploration.EXPLORATION_BUDGET
    chosen = choose(ks_spent)
    assert chosen is not None and chosen.tokens == 0
    assert "plain decoding (K=0) is not measured" in chosen.message
    assert "1 of 1 of plain decoding" in chosen.message
    plain_spent = [_explored(fresh, 0)] * exploration.PLAIN_EXPLORATION_BUDGET
    assert choose(ks_spent + plain_spent) is None
    # A K still has room on its own budget.
    again = choose(plain_spent)
    assert again is not None and again.tokens != 0


def test_plain_decoding_is_not_explored_where_drafting_plainly_pays() -> None:
    """Its interval always allows the gain; only a prediction close to the K in effect
    makes exploring it worth a canary."""
    fleet = Fleet(make_spec(), engine=StepCost(), batch=1)
    for _ in range(240):
        fleet.step(CODE)
    assert fleet.status.speculation.tokens == 8  # K climbed: the fit is sure, no K in doubt
    assert not _plain_starts(fleet)  # plain decoding predicted -72%, 5% likely to gain


def test_just_under_the_floor_plain_decoding_is_measured_before_speculation_goes_off() -> None:
    """Within acceptanceMargin of the floor the draft is not broken and only speed
    decides: a prediction that speculation no longer pays starts a canary of plain
    decoding, and its measurement switches speculation off (far under the floor, a
    stale draft goes off at once: test_floor)."""
    fleet = Fleet(make_spec(rollback={"failureLimit": 2}), engine=NO_K_PAYS)
    for _ in range(14):
        fleet.step(UNDER_FLOOR)
    started = _plain_starts(fleet)
    # Measured before anything is kept or switched off: at the first rollback, while
    # speculation is still predicted to pay (the prediction later says it does not).
    assert started and "measuring it on a canary first" in started[0].reason
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "Disable" not in flat and "StopSpeculation" in flat
    off = fleet.status.speculation.off
    assert off is not None and off.reason is OffReason.NO_K_PAYS
    assert off.message.startswith("plain decoding (K=0) vs K=3")


# Like the CPU real-vLLM tests run on: a slow target and a draft pass far dearer than
# the prior's share, with a head whose positions after the first are rarely accepted.
CPU_LIKE = StepCost(target_forward_ms=12.0, parallel_draft_ms=12.5, verify_ms_per_token=0.3)
WEAK_HEAD = [0.73, 0.07, 0.05]


def _in_place_fleet(engine: StepCost) -> Fleet:
    spec = make_spec(
        speculation={"tokens": 3, "minTokens": 1, "maxTokens": 4},
        tuning={"strategy": "InPlace"},
        rollback={"metric": "FirstPositionAcceptance", "minAcceptance": 0.5},
    )
    fleet = Fleet(spec, engine=engine, batch=4)
    fleet.status = fleet.status.model_copy(update={"startup_seconds": 67})
    return fleet


def test_in_place_plain_decoding_the_prior_hides_is_explored_and_chosen() -> None:
    """From K=3 alone the fit puts the step in the target (the prior's split) and predicts
    every K far faster than plain decoding; the draft's real cost hides in plain
    decoding's interval. In place, plain decoding is explored as any K is: a trial on the
    stable pods after a baseline at K=3. It measures faster, and speculation stops on
    that measurement."""
    fleet = _in_place_fleet(CPU_LIKE)
    for _ in range(180):
        fleet.step(WEAK_HEAD)
    trials = _plain_starts(fleet, ActionKind.START_IN_PLACE)
    assert trials and trials[0].reason.startswith(f"{TrialStart.EXPLORE}: plain decoding")
    stops = [d for d in fleet.status.history if d.action == ActionKind.STOP_SPECULATION]
    assert stops and stops[0].time > trials[0].time
    assert "plain decoding (K=0) vs K=3" in stops[0].reason
    off = fleet.status.speculation.off
    assert off is not None and off.reason is OffReason.NO_K_PAYS
    # Plain decoding and K=3 measured do not tell a draft's fixed cost from dear
    # verification: after the back-off one re-probe measures K=1 (it predicted +5%), a
    # trial measures plain decoding faster again, and the fit is sure from then on.
    reprobes = [d for d in fleet.status.history if d.action == ActionKind.REPROBE]
    assert len(reprobes) <= 1 and len(stops) == 1 + len(reprobes), fleet.status.history
    cost = fleet.status.step_cost
    assert cost is not None
    assert abs(speed.step_ms(cost.fitted, 0, 4) / CPU_LIKE.target_forward_ms - 1) < 0.05
    assert speed.step_ms(cost.fitted, 1, 4) > 1.9 * CPU_LIKE.target_forward_ms


def test_in_place_plain_decoding_explored_and_measured_slower_goes_back_to_its_k() -> None:
    """Where K=3 pays, plain decoding explored in place measures slower: the trial ends
    on that measurement, the stable pods go back to the K they ran (no re-probe, no
    other K), and plain decoding is not explored again within its budget."""
    fleet = _in_place_fleet(StepCost(target_forward_ms=14.0))
    for _ in range(240):
        fleet.step(WEAK_HEAD)
    history = fleet.status.history
    trials = _plain_starts(fleet, ActionKind.START_IN_PLACE)
    assert len(trials) == exploration.PLAIN_EXPLORATION_BUDGET, history
    aborts = [d for d in history if d.action == ActionKind.ABORT and d.time > trials[0].time]
    assert aborts and aborts[0].from_tokens == 0 and aborts[0].to_tokens == trials[0].from_tokens
    assert not [d for d in history if d.action == ActionKind.STOP_SPECULATION]
    assert fleet.status.speculation.off is None


def test_a_range_that_leaves_out_the_k_before_ends_an_in_place_plain_trial() -> None:
    """The user raises minTokens above the K an in-place trial of plain decoding would go
    back to: the trial ends unjudged (K=0 not rejected) and the pods go to the clamped K,
    not to the old one first."""
    fleet = _in_place_fleet(CPU_LIKE)
    while not fleet.status.speculation.measuring_plain:
        fleet.step(WEAK_HEAD)
        assert len(fleet.kinds) < 60
    sp = fleet.status.speculation
    assert sp.trial is not None and sp.trial.in_place is not None
    sp.tokens = sp.trial.in_place.previous_tokens = 1  # as if tuned down to K=1 before
    fleet.spec = make_spec(
        speculation={"tokens": 3, "minTokens": 2, "maxTokens": 4},
        tuning={"strategy": "InPlace"},
        rollback={"metric": "FirstPositionAcceptance", "minAcceptance": 0.5},
    )
    assert fleet.step(WEAK_HEAD) == ["Abort", "Clamp"]
    sp = fleet.status.speculation
    assert sp.trial is None and sp.stable_k == 2 and 0 not in sp.rejected_tokens
    assert fleet.status.history[-2].reason.startswith(f"{TrialOutcome.OUTSIDE_RANGE}: K=1")
