"""Plain decoding when it measures faster: a prediction starts a canary of plain
decoding, and only its measurement stops speculation (plain.py)."""

from __future__ import annotations

from specfleet.operator import exploration
from specfleet.operator.api import Decision, OffReason, SpeculativeModelStatus
from specfleet.operator.outcomes import ActionKind, TrialStart
from specfleet.operator.prediction import plain, predictions
from specfleet.operator.tuner import Run
from specfleet.runtime.sim_model import StepCost
from tests.decisions import CODE, NO_K_PAYS, UNDER_FLOOR, Fleet, make_spec, window
from tests.test_exploration import BATCH, WIDE_KNEE, _run, sample

# Memory-bound to 128 verified tokens at 32 in flight: K=3 pays, but from K=3 alone the
# fit (the prior's knee, 32) predicts verification compute-bound, and plain faster.
IN_FLIGHT = 32


def _plain_starts(fleet: Fleet) -> list[Decision]:
    return [
        d for d in fleet.status.history if d.action == ActionKind.START_CANARY and d.to_tokens == 0
    ]


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


def test_in_place_speculation_stops_on_the_prediction() -> None:
    """In place there is no canary to measure plain decoding on: after failureLimit
    windows of prediction speculation stops (at most an hour after the last in-place
    change, as any in-place change), and a re-probe measures it back on."""
    fleet = Fleet(make_spec(tuning={"strategy": "InPlace"}), engine=NO_K_PAYS)
    for _ in range(90):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StopSpeculation" in flat
    assert not _plain_starts(fleet)
    off = fleet.status.speculation.off
    assert off is not None and "plain decoding is predicted" in off.message


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
    predicted = predictions(fresh.spec, window(CODE, 3, batch=BATCH), fresh.cost)
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
    assert started and "speculation no longer pays" in started[0].reason
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "Disable" not in flat and "StopSpeculation" in flat
    off = fleet.status.speculation.off
    assert off is not None and off.reason is OffReason.NO_K_PAYS
    assert off.message.startswith("plain decoding (K=0) vs K=3")
