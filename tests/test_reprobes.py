"""Re-probes: speculation tried again after a back-off, or when the fitted cost predicts a gain."""

from __future__ import annotations

from datetime import timedelta

from specfleet.operator.api import (
    ConditionType,
    SpeculativeModelStatus,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.prediction import predict_ks
from specfleet.runtime.sim_model import StepCost
from tests.decisions import CODE, STALE, T0, Fleet, make_spec, scaled


def test_stale_draft_disables_speculation_then_reprobes_on_a_canary() -> None:
    spec = make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"})
    fleet = Fleet(spec)
    kinds = fleet.step(STALE)
    assert "Disable" in kinds
    off = fleet.status.speculation.off
    assert off is not None and "no longer pays" in off.message
    active = condition_status(fleet.status.conditions, ConditionType.SPECULATION_ACTIVE)
    assert active == "False"
    for _ in range(9):
        assert "Reprobe" not in fleet.step(STALE)
    assert "Reprobe" in fleet.step(STALE)
    # The stable pods keep decoding plainly; one canary pod drafts the requested K (not
    # minTokens: K=1 of a parallel drafter is barely faster than plain decoding).
    sp = fleet.status.speculation
    assert sp.off is not None and sp.trial is not None and sp.trial.in_place is None
    assert sp.trial.tokens == spec.speculation.tokens == 3
    while fleet.status.speculation.trial is not None:
        fleet.step(STALE)
    assert fleet.kinds[-1] == ["Abort"]
    off = fleet.status.speculation.off
    assert off is not None and off.failed_reprobes == 1
    assert off.reprobe_at == fleet.now + timedelta(minutes=20)  # the back-off doubled


def test_a_reprobe_canary_that_beats_plain_decoding_turns_speculation_back_on() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"}))
    fleet.step(STALE)
    while "Reprobe" not in fleet.step(CODE):
        pass
    while fleet.status.speculation.trial is not None:
        fleet.step(CODE)
    assert fleet.kinds[-1] == ["Promote"]
    sp = fleet.status.speculation
    assert sp.off is None and sp.tokens == 3
    assert "K=3 vs K=0" in fleet.status.history[-1].reason
    # Not held yet: switched off within the hour it would be a reversal (below).
    assert sp.reprobing is not None and sp.reprobing.failed_reprobes == 0
    for _ in range(60):
        fleet.step(CODE)
    assert fleet.status.speculation.reprobing is None


def test_reversals_after_promoted_reprobes_lengthen_the_wait_up_to_16x() -> None:
    """Off -> re-probe -> Promote -> off again within the hour, over and over: each
    reversal doubles the next back-off (before, a promotion reset it and the cycle
    re-probed every reprobeAfter for good), bounded at 16 x reprobeAfter."""
    fleet = Fleet(make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"}))
    fleet.step(STALE)
    waits, failed = [], []
    for _ in range(6):
        minutes = 1
        while "Reprobe" not in fleet.step(CODE):
            minutes += 1
        waits.append(minutes)
        while fleet.status.speculation.trial is not None:
            fleet.step(CODE)
        assert fleet.kinds[-1] == ["Promote"]
        for _ in range(10):  # on for a while, not an hour
            fleet.step(CODE)
        assert "Disable" in fleet.step(STALE)
        off = fleet.status.speculation.off
        assert off is not None
        failed.append(off.failed_reprobes)
    assert failed == [1, 2, 3, 4, 5, 6]
    assert waits == [10, 20, 40, 80, 160, 160]


def test_failed_reprobes_double_the_back_off_and_a_held_one_resets_it() -> None:
    spec = make_spec(
        rollback={"failureLimit": 1, "reprobeAfter": "10m"}, tuning={"strategy": "InPlace"}
    )
    fleet = Fleet(spec)
    fleet.step(STALE)
    waits = []
    for _ in range(3):
        minutes = 0
        while "Reprobe" not in fleet.step(STALE):
            minutes += 1
        waits.append(minutes + 1)
        reprobing = fleet.status.speculation.reprobing
        assert fleet.status.speculation.off is None  # in place: the stable K itself
        assert reprobing is not None and reprobing.since == fleet.now
        assert "Disable" in fleet.step(STALE)  # the re-probe fails at once
    assert waits == [10, 20, 40]
    off = fleet.status.speculation.off
    assert off is not None and off.failed_reprobes == 3
    while "Reprobe" not in fleet.step(STALE):
        pass
    reprobing = fleet.status.speculation.reprobing
    assert reprobing is not None and reprobing.failed_reprobes == 3
    for _ in range(4):  # 2 x failureLimit passing windows, but not yet for an hour
        fleet.step(CODE)
    assert fleet.status.speculation.reprobing is not None
    for _ in range(56):  # an hour of passing windows: the re-probe held
        fleet.step(CODE)
    assert fleet.status.speculation.reprobing is None
    assert fleet.status.speculation.failed_reprobes == 0


def test_after_stop_speculation_a_predicted_gain_reprobes_but_a_failed_one_waits() -> None:
    """Stopped for speed, speculation is re-probed as soon as the fit predicts a gain at
    the batch the plain pods run; after a re-probe that measured none, not before the
    doubled back-off."""
    spec = make_spec(rollback={"reprobeAfter": "10m"})

    def minutes_to_reprobe(failed: int) -> int:
        fleet = Fleet(spec, engine=StepCost())
        fleet.status = SpeculativeModelStatus.model_validate(
            {
                "speculation": {
                    "tokens": 3,
                    "requestedTokens": 3,
                    "parallelDrafting": True,
                    "off": {
                        "reason": "NoKPays",
                        "message": "plain decoding was faster",
                        "acceptance": CODE,
                        "failedReprobes": failed,
                        "reprobeAt": (T0 + timedelta(minutes=20)).isoformat(),
                    },
                    "sinceChange": {"at": T0.isoformat()},
                }
            }
        )
        for minute in range(1, 40):
            if "Reprobe" in fleet.step(CODE):
                return minute
        raise AssertionError("never re-probed")

    assert minutes_to_reprobe(failed=0) <= 5  # the cooldown, then the prediction
    assert minutes_to_reprobe(failed=1) >= 20


def test_a_reprobe_ended_by_a_scale_is_retried_not_counted_as_failed() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"}))
    fleet.step(STALE)
    while "Reprobe" not in fleet.step(STALE):
        pass
    fleet.spec = scaled(fleet.spec, 3)
    assert fleet.step(STALE) == ["Abort"]
    off = fleet.status.speculation.off
    assert off is not None and off.failed_reprobes == 0
    assert off.reprobe_at == fleet.now + timedelta(minutes=3)  # the cooldown, no back-off


def test_a_reprobe_after_a_disable_tries_the_k_predicted_best_for_the_last_good_draft() -> None:
    """The user asked for K=1 (where a parallel drafter barely beats plain decoding): a
    recovered draft is re-probed at the K the fitted cost and the acceptance last
    measured above the floor predict best, and is promoted there."""
    spec = make_spec(speculation={"tokens": 1}, rollback={"failureLimit": 1, "reprobeAfter": "10m"})
    fleet = Fleet(spec, engine=StepCost())
    for _ in range(3):
        fleet.step(CODE)
    good = fleet.status.speculation.good_acceptance
    assert good is not None and len(good) >= 1
    assert "Disable" in fleet.step(STALE)
    # Kept while off (with the deeper positions the canary ended by it measured).
    kept = fleet.status.speculation.good_acceptance
    assert kept is not None and kept[: len(good)] == good
    while "Reprobe" not in fleet.step(CODE):
        pass
    sp = fleet.status.speculation
    expected = max(
        predict_ks(spec, good, 4.0, fleet.status.step_cost.fitted).values(),  # type: ignore[union-attr]
        key=lambda p: p.goodput,
    ).tokens
    assert sp.trial is not None and sp.trial.tokens == expected >= 4
    while fleet.status.speculation.trial is not None:
        fleet.step(CODE)
    assert fleet.kinds[-1] == ["Promote"] and fleet.status.speculation.tokens == expected


def test_an_untuned_model_is_reprobed_at_the_k_it_asked_for() -> None:
    spec = make_spec(
        speculation={"tokens": 2},
        rollback={"failureLimit": 1, "reprobeAfter": "10m"},
        tuning={"enabled": False},
    )
    fleet = Fleet(spec)
    fleet.step(CODE)
    fleet.step(STALE)
    while "Reprobe" not in fleet.step(CODE):
        pass
    assert fleet.status.canary_run == (2, None)


def test_a_predicted_gain_reprobes_on_failure_limit_windows_of_low_load_not_one() -> None:
    """Stopped at 32 in flight: one window at 1 in flight (a lull in load that flips) is
    no evidence for a re-probe; failureLimit (2) of them in a row are, for one K (mode
    Off). Under mode Auto the load history decides, by the tokens at stake: 3 windows at
    1 among 16 at 32 do not repay a draft there."""
    for mode, reprobes in (("Off", True), ("Auto", False)):
        _reprobe_after_a_lull(mode, reprobes)


def _reprobe_after_a_lull(mode: str, reprobes: bool) -> None:
    spec = make_spec(
        rollback={"reprobeAfter": "10m", "failureLimit": 2},
        speculation={"schedule": {"mode": mode}},
    )
    fleet = Fleet(spec, engine=StepCost(), batch=32)
    fleet.status = SpeculativeModelStatus.model_validate(
        {
            "speculation": {
                "tokens": 3,
                "requestedTokens": 3,
                "parallelDrafting": True,
                "off": {
                    "reason": "NoKPays",
                    "message": "plain decoding was faster",
                    "acceptance": CODE,
                    "reprobeAt": (T0 + timedelta(hours=2)).isoformat(),
                },
                "sinceChange": {"at": T0.isoformat()},
            }
        }
    )
    for _ in range(10):
        assert "Reprobe" not in fleet.step(CODE)
    for _ in range(3):
        fleet.batch = 1  # a lull of one window
        assert "Reprobe" not in fleet.step(CODE)
        fleet.batch = 32
        assert "Reprobe" not in fleet.step(CODE)
    fleet.batch = 1
    assert "Reprobe" not in fleet.step(CODE)
    assert ("Reprobe" in fleet.step(CODE)) is reprobes, mode
