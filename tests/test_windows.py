"""Judging windows: growing short ones, dropping old ones, what inconclusive windows
say in status, and an observation taken in."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from specfleet.operator.api import (
    ConditionType,
    LeftOutReason,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.observations import Observation, PodError
from specfleet.operator.tuner import decide
from specfleet.operator.windows import take_in
from specfleet.runtime.config import Drafting
from tests.decisions import CHAT, CODE, DAR, DEAR_VERIFY, T0, Fleet, make_spec, window


def test_a_window_short_of_draft_tokens_grows_until_it_is_conclusive() -> None:
    fleet = Fleet(make_spec(tuning={"minDraftTokens": 1000, "maxInconclusiveWindows": 2}))
    small = replace(window(CODE, 3, drafts=100), running_requests=2)
    for _ in range(3):  # 300 draft tokens a window
        decided = decide(fleet.spec, fleet.status, Observation(small, None), fleet.now)
        fleet.status, fleet.now = decided.status, fleet.now + timedelta(minutes=1)
        assert fleet.status.acceptance.reason == "Collecting"
        assert fleet.status.open_windows is not None
    available = condition_status(fleet.status.conditions, ConditionType.METRICS_AVAILABLE)
    assert available == "Unknown"  # collecting is not a gap in the metrics
    decided = decide(fleet.spec, fleet.status, Observation(small, None), fleet.now)
    assert decided.status.acceptance.conclusive
    assert decided.status.acceptance.draft_tokens == 1200
    assert decided.status.open_windows is None


def test_a_window_that_reaches_max_window_age_is_dropped_as_inconclusive() -> None:
    spec = make_spec(tuning={"minDraftTokens": 100_000, "maxWindowAge": "3m"})
    fleet = Fleet(spec)
    small = window(CODE, 3, drafts=100)
    reasons = []
    for _ in range(5):
        decided = decide(spec, fleet.status, Observation(small, None), fleet.now)
        fleet.status, fleet.now = decided.status, fleet.now + timedelta(minutes=1)
        reasons.append(fleet.status.acceptance.reason)
    assert reasons == ["Collecting", "Collecting", "TooFewDraftTokens", "Collecting", "Collecting"]


def test_inconclusive_windows_set_metrics_unavailable() -> None:
    spec = make_spec(tuning={"maxInconclusiveWindows": 3})
    fleet = Fleet(spec)
    for _ in range(2):
        fleet.step(None)
    assert condition_status(fleet.status.conditions, ConditionType.METRICS_AVAILABLE) == "Unknown"
    assert "MetricsUnavailable" in fleet.step(None)
    assert condition_status(fleet.status.conditions, ConditionType.METRICS_AVAILABLE) == "False"
    fleet.step(CODE)
    assert condition_status(fleet.status.conditions, ConditionType.METRICS_AVAILABLE) == "True"


def test_failing_windows_do_not_carry_across_a_long_run_of_inconclusive_windows() -> None:
    spec = make_spec(
        rollback={"failureLimit": 2, **DAR},
        tuning={"enabled": False, "maxInconclusiveWindows": 5},
    )
    fleet = Fleet(spec)
    fleet.step(CHAT)
    for _ in range(4):  # a short gap neither passes nor fails: the next failure rolls back
        fleet.step(None)
    assert {"Rollback", "StepDown", "Disable"} & set(fleet.step(CHAT))

    fleet = Fleet(spec)
    fleet.step(CHAT)
    for _ in range(17):  # a run long enough to call the metrics unavailable
        fleet.step(None)
    assert not {"Rollback", "StepDown", "Disable"} & set(fleet.step(CHAT))
    assert fleet.status.speculation.since_change.failing_windows == 1


def test_pods_left_out_are_named_in_status_bounded() -> None:
    fleet = Fleet(make_spec())
    errors = {
        f"pod-{i}": PodError(LeftOutReason.UNPARSEABLE, f"line {i}: " + "x" * 500) for i in range(9)
    }
    fleet.step(CODE, errors=dict(reversed(errors.items())))
    window = fleet.status.acceptance
    listed = window.pods_left_out or []
    assert [p.pod for p in listed] == [f"pod-{i}" for i in range(5)]
    assert all(p.reason == "Unparseable" and len(p.message) <= 200 for p in listed)
    assert window.more_pods_left_out == 4
    assert window.conclusive  # the pods that answered still make the window
    fleet.step(CODE)
    assert fleet.status.acceptance.pods_left_out is None
    assert fleet.status.acceptance.more_pods_left_out is None


def test_prometheus_unavailable_is_an_inconclusive_window_with_its_reason() -> None:
    fleet = Fleet(make_spec(tuning={"maxInconclusiveWindows": 2}))
    fleet.step(CODE)
    error = "Prometheus at http://prometheus:9090: Cannot connect to host prometheus:9090"
    fleet.step(None, prometheus_error=error)
    assert fleet.status.acceptance.reason == "PrometheusUnavailable"
    assert not fleet.status.acceptance.conclusive
    assert "MetricsUnavailable" in fleet.step(None, prometheus_error=error)
    available = next(
        c for c in fleet.status.conditions if c.type is ConditionType.METRICS_AVAILABLE
    )
    assert (available.status, available.reason) == ("False", "PrometheusUnavailable")
    assert "Cannot connect to host prometheus:9090" in available.message


def test_missing_spec_decode_series_sets_speculation_inactive() -> None:
    fleet = Fleet(make_spec())
    assert "SpeculationMissing" in fleet.step(None, speculation_missing=True)
    assert condition_status(fleet.status.conditions, ConditionType.SPECULATION_ACTIVE) == "False"


def test_an_observation_is_taken_in_as_a_value_that_changes_nothing() -> None:
    """take_in returns what a window teaches (issue 40: transitions return values);
    status changes only where decide writes it."""
    fleet = Fleet(make_spec(), engine=DEAR_VERIFY)
    for _ in range(3):
        fleet.step(CODE)
    status, spec = fleet.status, fleet.spec
    before = status.model_dump()
    k = status.speculation.stable_k
    observation = Observation(window(CODE, k, engine=DEAR_VERIFY), None)
    now = T0 + timedelta(hours=1)
    intake = take_in(spec, status, observation, now, Drafting.PARALLEL)
    assert status.model_dump() == before
    assert intake.stable is not None and intake.stable.conclusive
    assert intake.acceptance.measured_at == now and intake.acceptance.conclusive
    assert intake.step_cost is not None and intake.step_cost != status.step_cost
    assert len(intake.load) == len(status.speculation.load) + 1
