"""The acceptance floor: rollback, step-down, keeping the fastest K below it, disabling."""

from __future__ import annotations

import pytest

from specfleet.operator import floor
from specfleet.operator.api import ConditionType, OffReason
from specfleet.operator.conditions import condition_status
from specfleet.operator.run import Run
from specfleet.operator.windows import Judged
from tests.decisions import CHAT, CODE, DAR, NO_K_PAYS, STALE, UNDER_FLOOR, Fleet, make_spec


def test_drift_below_the_floor_rolls_back_after_failure_limit_windows() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 2, **DAR}))
    for _ in range(30):
        fleet.step(CODE)
    k_before = fleet.status.speculation.tokens
    assert fleet.step(CHAT) == [] or "Abort" in fleet.kinds[-1]
    second = fleet.step(CHAT)
    assert any(k in ("Rollback", "StepDown") for k in second), fleet.kinds[-3:]
    assert fleet.status.speculation.tokens == 1 and k_before != 1
    assert fleet.status.history[-1].reason.startswith("BelowFloor")


def test_a_rollback_is_planned_as_a_value_then_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_rollback changes nothing (issue 40: transitions return values); rollback
    applies what it planned: the K and the words in history, the Ks rejected."""
    planned: list[floor.Rollback] = []
    plan = floor.plan_rollback

    def watched(run: Run, judged: Judged) -> floor.Rollback:
        before, actions = run.status.model_dump(), list(run.actions)
        rollback = plan(run, judged)
        assert run.status.model_dump() == before and run.actions == actions
        planned.append(rollback)
        return rollback

    monkeypatch.setattr(floor, "plan_rollback", watched)
    fleet = Fleet(make_spec(rollback={"failureLimit": 2, **DAR}))
    for profile in [CODE] * 30 + [CHAT] * 2:
        fleet.step(profile)
    (rollback,) = planned
    assert rollback.to is not None
    last = fleet.status.history[-1]
    assert (last.action, last.to_tokens) == (rollback.to.kind, rollback.to.tokens)
    assert last.reason == f"BelowFloor: {rollback.to.message}"
    assert fleet.status.speculation.tokens == rollback.to.tokens
    assert set(rollback.rejected_tokens) <= set(fleet.status.speculation.rejected_tokens)


def test_plain_decoding_when_no_k_pays_is_not_a_rollback() -> None:
    fleet = Fleet(make_spec(), engine=NO_K_PAYS)
    for _ in range(15):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StopSpeculation" in flat
    assert not {"Rollback", "StepDown", "Disable"} & set(flat)
    off = fleet.status.speculation.off
    assert off is not None and off.reason is OffReason.NO_K_PAYS
    assert off.acceptance and off.acceptance[0] == 0.96
    # The prediction started a canary of plain decoding; its measured speed stopped it.
    started = [d for d in fleet.status.history if d.reason.startswith("PlainPredicted:")]
    assert started and started[0].action == "StartCanary" and started[0].to_tokens == 0
    assert off.message.startswith("plain decoding (K=0) vs K=")
    assert "measured step" in off.message


def test_below_floor_keeps_the_fastest_k_while_speculation_pays() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 2}))
    fleet.step(UNDER_FLOOR)
    kinds = fleet.step(UNDER_FLOOR)
    assert kinds == ["KeepFastest"]
    assert fleet.status.speculation.off is None
    below = next(
        c for c in fleet.status.conditions if c.type is ConditionType.ACCEPTANCE_BELOW_FLOOR
    )
    assert below.status == "True" and "over plain decoding" in below.message
    # re-checked every window, without a new Event; tuning goes on meanwhile
    assert "KeepFastest" not in fleet.step(UNDER_FLOOR)
    assert not fleet.status.speculation.rejected_tokens  # the floor refuses no K here
    while fleet.status.speculation.trial is not None:
        fleet.step(UNDER_FLOOR)
    assert fleet.step(CODE) == ["AcceptanceRecovered"]
    assert (
        condition_status(fleet.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR) == "False"
    )


def test_below_floor_then_stale_disables_within_one_window() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 2}))
    fleet.step(UNDER_FLOOR)
    assert fleet.step(UNDER_FLOOR) == ["KeepFastest"]
    assert "Disable" in fleet.step(STALE)


def test_below_floor_policy_disable_switches_speculation_off_even_when_it_pays() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 1, "belowFloor": "Disable"}))
    kinds = fleet.step(UNDER_FLOOR)
    assert "Disable" in kinds
    off = fleet.status.speculation.off
    assert off is not None and off.reason is OffReason.NO_K_CLEARS_FLOOR
    assert off.acceptance is None and "belowFloor is Disable" in off.message


def test_block_acceptance_does_not_cap_k_where_the_draft_acceptance_rate_would() -> None:
    # CHAT's draft acceptance rate is under 0.75 past K=1; its block acceptance is 0.85.
    fleet = Fleet(make_spec())
    for _ in range(40):
        fleet.step(CHAT)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert not {"Rollback", "StepDown", "Disable", "KeepFastest"} & set(flat)
    capped = Fleet(make_spec(rollback=DAR))
    for _ in range(40):
        capped.step(CHAT)
    assert capped.status.speculation.tokens == 1


def test_rollback_works_with_tuning_disabled() -> None:
    fleet = Fleet(make_spec(tuning={"enabled": False}, speculation={"tokens": 5}, rollback=DAR))
    for _ in range(5):
        fleet.step(CODE)
    assert fleet.status.speculation.tokens == 5
    fleet.step(CHAT)
    assert any(k in ("Rollback", "StepDown") for k in fleet.step(CHAT))


def test_stop_speculation_needs_failure_limit_windows_not_one() -> None:
    """One window in which plain decoding looks faster (a slow minute, an odd batch) is no
    more evidence for StopSpeculation than for a rollback: with failureLimit 3 it comes
    two windows after it does with failureLimit 1, on the same windows."""

    def stopped_at(limit: int) -> int:
        fleet = Fleet(make_spec(rollback={"failureLimit": limit}), engine=NO_K_PAYS)
        for index in range(30):
            if "StopSpeculation" in fleet.step(CODE):
                assert fleet.status.speculation.since_change.plain_faster_windows == 0
                return index
        raise AssertionError("speculation never stopped")

    assert stopped_at(3) == stopped_at(1) + 2
