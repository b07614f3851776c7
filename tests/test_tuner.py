"""The decision core: unit cases and its invariants, property-based."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specfleet.operator import speed
from specfleet.operator.api import (
    ConditionType,
    LeftOutReason,
    RollbackMetric,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    TuningStrategy,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.durations import parse_duration
from specfleet.operator.metrics import Observation, PodError, TrackWindow
from specfleet.operator.stats import extrapolate, rollback_metric
from specfleet.operator.tuner import decide, predict
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import StepCost, cumulative_acceptance, goodput, step_seconds

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CODE = [0.96, 0.94, 0.92, 0.90, 0.88, 0.86, 0.84, 0.82]
CHAT = [0.85, 0.55, 0.45, 0.40, 0.38, 0.35]
BROKEN = [0.4, 0.3, 0.2]
# Block acceptance under the floor, but deep enough that speculation still pays.
UNDER_FLOOR = [0.70, 0.65, 0.6, 0.55]
# A draft that no longer matches the target: speculation costs more than it gives.
STALE = [0.04, 0.02]
DAR = {"metric": "DraftAcceptanceRate"}


def make_spec(**policy: Any) -> SpeculativeModelSpec:
    manifest: dict[str, Any] = {
        "model": {"name": "t"},
        "draft": {"method": "peagle", "model": "d"},
        "speculation": {"tokens": 3, "minTokens": 1, "maxTokens": 8},
        "tuning": {"minDraftTokens": 1000, "cooldown": "3m", "interval": "60s"},
    }
    for key, value in policy.items():
        manifest[key] = {**manifest.get(key, {}), **value}
    return SpeculativeModelSpec.model_validate(manifest)


def window(
    conditional: list[float],
    k: int,
    drafts: float = 20_000,
    batch: int = 4,
    engine: StepCost | None = None,
) -> TrackWindow:
    """A window of engines following `conditional` exactly; with `engine`, they report
    step times as vLLM does (one inter-token latency per request per step)."""
    per_pos = tuple(drafts * r for r in cumulative_acceptance(conditional, k))
    steps = drafts if engine is not None else 0.0
    seconds = (
        drafts * step_seconds(engine, k, batch, Drafting.PARALLEL) if engine is not None else 0.0
    )
    return TrackWindow(
        drafts=drafts,
        draft_tokens=drafts * k,
        accepted_tokens=sum(per_pos),
        accepted_per_position=per_pos,
        generation_tokens=drafts + sum(per_pos),
        seconds=60,
        pod_seconds=120,
        pods=2,
        running_requests=2 * batch,
        decode_steps=steps,
        engine_steps=steps / batch,
        decode_seconds=seconds,
    )


class Fleet:
    """Runs decide window after window with engines following `profile` exactly."""

    def __init__(self, spec: SpeculativeModelSpec, engine: StepCost | None = None) -> None:
        self.spec = spec
        self.engine = engine
        self.status = SpeculativeModelStatus()
        self.now = T0
        self.kinds: list[list[str]] = []

    def step(self, profile: list[float] | None, **observation: Any) -> list[str]:
        sp = self.status.speculation
        stable = canary = None
        if profile is not None:
            if sp.disabled:  # plain decoding: tokens and step times, no drafts
                stable = replace(window(profile, 0, engine=self.engine), drafts=0)
            else:
                k = sp.tokens or self.spec.speculation.tokens
                stable = window(profile, k, engine=self.engine)
            if sp.candidate_tokens is not None:
                canary = replace(
                    window(profile, sp.candidate_tokens, 10_000, engine=self.engine), pods=1
                )
        self.now += timedelta(minutes=1)
        decided = decide(
            self.spec,
            self.status,
            Observation(stable=stable, canary=canary, **observation),
            self.now,
        )
        self.status = decided.status
        kinds = [a.kind for a in decided.actions if a.kind != "Inconclusive"]
        self.kinds.append(kinds)
        return kinds


def test_extrapolation_is_conservative() -> None:
    assert extrapolate([0.9, 0.8], 4) == pytest.approx([0.9, 0.8, 0.72, 0.648])
    assert extrapolate([0.9, 0.8, 0.7], 2) == [0.9, 0.8]


def test_parallel_drafting_makes_deep_k_cheaper() -> None:
    from specfleet.operator.api import RollbackMetric

    metric = RollbackMetric.DRAFT_ACCEPTANCE_RATE
    parallel = predict(CODE, 6, 1, metric, speed.prior(drafting=Drafting.PARALLEL))
    sequential = predict(CODE, 6, 1, metric, speed.prior(drafting=Drafting.SEQUENTIAL))
    assert parallel.goodput > sequential.goodput
    assert parallel.acceptance_rate == sequential.acceptance_rate


def test_high_acceptance_climbs_through_a_canary() -> None:
    fleet = Fleet(make_spec())
    for _ in range(40):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StartCanary" in flat and "Promote" in flat
    assert (fleet.status.speculation.tokens or 0) > 3
    assert fleet.status.speculation.last_known_good_tokens is not None
    assert [d.action for d in fleet.status.history][:2] == ["StartCanary", "Promote"]


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


def test_stale_draft_disables_speculation_then_reprobes_on_a_canary() -> None:
    spec = make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"})
    fleet = Fleet(spec)
    kinds = fleet.step(STALE)
    assert "Disable" in kinds
    sp = fleet.status.speculation
    assert sp.disabled and sp.disabled_reason and "no longer pays" in sp.disabled_reason
    active = condition_status(fleet.status.conditions, ConditionType.SPECULATION_ACTIVE)
    assert active == "False"
    for _ in range(9):
        assert "Reprobe" not in fleet.step(STALE)
    assert "Reprobe" in fleet.step(STALE)
    # The stable pods keep decoding plainly; one canary pod drafts K=minTokens.
    sp = fleet.status.speculation
    assert sp.disabled and sp.candidate_tokens == 1
    while fleet.status.canary is not None:
        fleet.step(STALE)
    assert fleet.kinds[-1] == ["Abort"]
    sp = fleet.status.speculation
    assert sp.disabled and sp.failed_reprobes == 1
    assert sp.reprobe_at == fleet.now + timedelta(minutes=20)  # the back-off doubled


def test_a_reprobe_canary_that_beats_plain_decoding_turns_speculation_back_on() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"}))
    fleet.step(STALE)
    while "Reprobe" not in fleet.step(CODE):
        pass
    while fleet.status.canary is not None:
        fleet.step(CODE)
    assert fleet.kinds[-1] == ["Promote"]
    sp = fleet.status.speculation
    assert not sp.disabled and sp.tokens == 1 and sp.failed_reprobes == 0
    assert "K=1 vs K=0" in fleet.status.history[-1].reason


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
        assert not fleet.status.speculation.disabled  # in place: the stable K itself
        assert "Disable" in fleet.step(STALE)  # the re-probe fails at once
    assert waits == [10, 20, 40]
    assert fleet.status.speculation.failed_reprobes == 3
    while "Reprobe" not in fleet.step(STALE):
        pass
    for _ in range(4):  # 2 x failureLimit passing windows: the re-probe held
        fleet.step(CODE)
    assert fleet.status.speculation.failed_reprobes == 0
    assert fleet.status.speculation.reprobed_at is None


# Verification compute-bound from 4 tokens on, and dear: at a batch of 4 no K pays.
NO_K_PAYS = StepCost(compute_bound_tokens=4, verify_ms_per_token=1.0)


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
                    "disabled": True,
                    "disabledReason": "plain decoding was faster",
                    "disabledAcceptance": CODE,
                    "failedReprobes": failed,
                    "reprobeAt": (T0 + timedelta(minutes=20)).isoformat(),
                    "changedAt": T0.isoformat(),
                }
            }
        )
        for minute in range(1, 40):
            if "Reprobe" in fleet.step(CODE):
                return minute
        raise AssertionError("never re-probed")

    assert minutes_to_reprobe(failed=0) <= 5  # the cooldown, then the prediction
    assert minutes_to_reprobe(failed=1) >= 20


def test_plain_decoding_when_no_k_pays_is_not_a_rollback() -> None:
    fleet = Fleet(make_spec(), engine=NO_K_PAYS)
    for _ in range(10):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StopSpeculation" in flat
    assert not {"Rollback", "StepDown", "Disable"} & set(flat)
    sp = fleet.status.speculation
    assert sp.disabled and sp.disabled_acceptance and sp.disabled_acceptance[0] == 0.96
    assert "plain decoding is predicted" in (sp.disabled_reason or "")


def test_below_floor_keeps_the_fastest_k_while_speculation_pays() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 2}))
    fleet.step(UNDER_FLOOR)
    kinds = fleet.step(UNDER_FLOOR)
    assert kinds == ["KeepFastest"]
    assert not fleet.status.speculation.disabled
    below = next(
        c for c in fleet.status.conditions if c.type is ConditionType.ACCEPTANCE_BELOW_FLOOR
    )
    assert below.status == "True" and "over plain decoding" in below.message
    # re-checked every window, without a new Event; tuning goes on meanwhile
    assert "KeepFastest" not in fleet.step(UNDER_FLOOR)
    assert not fleet.status.speculation.rejected_tokens  # the floor refuses no K here
    while fleet.status.canary is not None:
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
    reason = fleet.status.speculation.disabled_reason or ""
    assert "belowFloor is Disable" in reason


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


# Verification compute-bound from 8 tokens on: the prior thinks deep K cheap, it is not.
DEAR_VERIFY = StepCost(compute_bound_tokens=8, verify_ms_per_token=0.5)


def test_the_step_cost_is_fitted_from_measured_step_times() -> None:
    fleet = Fleet(make_spec(), engine=DEAR_VERIFY)
    for _ in range(40):
        fleet.step(CODE)
    fitted = fleet.status.step_cost
    assert fitted is not None and len({s.tokens for s in fitted.samples}) >= 2
    for sample in fitted.samples:
        truth = 1000 * step_seconds(DEAR_VERIFY, sample.tokens, 4, Drafting.PARALLEL)
        assert sample.step_ms == pytest.approx(truth, rel=1e-3)
        assert speed.step_ms(fitted.fitted, sample.tokens, 4) == pytest.approx(truth, rel=0.02)


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
    assert fleet.status.speculation.failing_windows == 1


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


def test_pending_canary_falls_back_to_in_place() -> None:
    fleet = Fleet(make_spec())
    while fleet.status.speculation.candidate_tokens is None:
        fleet.step(CODE)
    pending_since = fleet.now.timestamp()
    fleet.now += timedelta(minutes=10)
    kinds = fleet.step(CODE, canary_pending_since=pending_since)
    assert "InPlaceFallback" in kinds
    assert fleet.status.speculation.strategy is TuningStrategy.IN_PLACE
    assert fleet.status.speculation.candidate_tokens is None
    for _ in range(20):
        fleet.step(CODE)
    flat = [k for kinds in fleet.kinds for k in kinds]
    assert "StartInPlace" in flat
    assert fleet.status.speculation.candidate_tokens is None  # never a canary again


def test_rollback_works_with_tuning_disabled() -> None:
    fleet = Fleet(make_spec(tuning={"enabled": False}, speculation={"tokens": 5}, rollback=DAR))
    for _ in range(5):
        fleet.step(CODE)
    assert fleet.status.speculation.tokens == 5
    fleet.step(CHAT)
    assert any(k in ("Rollback", "StepDown") for k in fleet.step(CHAT))


def test_new_k_in_spec_resets_the_tuned_k() -> None:
    fleet = Fleet(make_spec())
    fleet.step(CODE)
    fleet.spec = make_spec(speculation={"tokens": 2})
    assert "SpecChanged" in fleet.step(CODE)
    assert fleet.status.speculation.tokens == 2


def test_decide_does_not_mutate_its_input() -> None:
    status = SpeculativeModelStatus()
    before = status.model_dump()
    decide(make_spec(), status, Observation(window(CODE, 3), None), T0)
    assert status.model_dump() == before


# ----------------------------------------------------------------------------- properties

levels = st.sampled_from([None, "small", CODE, CHAT, BROKEN, STALE, [0.9, 0.8, 0.7, 0.6]])


@st.composite
def runs(draw: st.DrawFn) -> tuple[SpeculativeModelSpec, list[Any], list[float | None]]:
    spec = make_spec(
        speculation={
            "tokens": draw(st.integers(2, 4)),
            "minTokens": draw(st.integers(1, 2)),
            "maxTokens": draw(st.integers(4, 8)),
        },
        tuning={
            "cooldown": draw(st.sampled_from(["1m", "3m", "10m"])),
            "canaryWindows": draw(st.integers(1, 3)),
            "strategy": draw(st.sampled_from(["Canary", "InPlace"])),
            "maxInconclusiveWindows": draw(st.integers(1, 5)),
        },
        rollback={
            "failureLimit": draw(st.integers(1, 3)),
            "metric": draw(st.sampled_from(["FirstPositionAcceptance", "DraftAcceptanceRate"])),
            "belowFloor": draw(st.sampled_from(["KeepFastest", "Disable"])),
        },
    )
    profiles = draw(st.lists(levels, min_size=5, max_size=60))
    pending = draw(
        st.lists(st.none() | st.just(0.0), min_size=len(profiles), max_size=len(profiles))
    )
    return spec, profiles, pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_invariants(run: tuple[SpeculativeModelSpec, list[Any], list[float | None]]) -> None:
    spec, profiles, pending = run
    low, high = spec.speculation.min_tokens, spec.speculation.max_tokens
    cooldown = parse_duration(spec.tuning.cooldown)
    status = SpeculativeModelStatus()
    now = T0
    failing_in_a_row = inconclusive_in_a_row = 0
    for profile, pending_since in zip(profiles, pending, strict=True):
        sp = status.speculation
        k = sp.tokens or spec.speculation.tokens
        stable = canary = None
        if profile == "small":
            stable = window(CODE, k, drafts=10)  # too few draft tokens: inconclusive
        elif profile is not None and not sp.disabled:
            stable = window(profile, k)
            if sp.candidate_tokens is not None:
                canary = replace(window(profile, sp.candidate_tokens, 5_000), pods=1)
        now += timedelta(minutes=1)
        decided = decide(
            spec,
            status,
            Observation(stable, canary, canary_pending_since=pending_since),
            now,
        )
        kinds = [a.kind for a in decided.actions]
        new = decided.status.speculation

        # K and the candidate stay in range; at most one candidate, never equal to K.
        assert new.tokens is not None and low <= new.tokens <= high
        if new.candidate_tokens is not None:
            assert low <= new.candidate_tokens <= high
            assert new.candidate_tokens != new.tokens
            assert decided.status.canary is not None and not decided.status.canary.in_place
        assert kinds.count("StartCanary") + kinds.count("StartInPlace") <= 1
        assert len(decided.status.history) <= 20

        conclusive = stable is not None and stable.draft_tokens >= spec.tuning.min_draft_tokens
        canary_conclusive = (
            canary is not None and canary.draft_tokens >= spec.tuning.min_draft_tokens
        )
        if not sp.disabled and profile != "small":  # a small window is collecting, not a gap
            inconclusive_in_a_row = 0 if conclusive else inconclusive_in_a_row + 1
            if inconclusive_in_a_row >= spec.tuning.max_inconclusive_windows:
                failing_in_a_row = 0  # a gap that long ends the row of failing windows
        # Inconclusive windows are never a pass or a fail.
        if not conclusive:
            assert not {"Rollback", "StepDown", "Disable"} & set(kinds)
        if not conclusive and not canary_conclusive:
            assert "Promote" not in kinds
        # No tuning decision before the cooldown since the last change.
        if {"StartCanary", "StartInPlace"} & set(kinds):
            assert sp.changed_at is None or now - sp.changed_at >= cooldown
        # Rollback after exactly failureLimit conclusive failing windows (outside trials);
        # once below the floor with the fastest K kept, every failing window is re-checked.
        rolled = bool({"Rollback", "StepDown", "Disable", "KeepFastest"} & set(kinds))
        # An in-place trial of a K the floor caps is ended by the floor, not rolled back.
        capped = spec.rollback.metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE
        in_place = status.canary is not None and status.canary.in_place and capped
        below = condition_status(status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR)
        if stable is not None and conclusive and not sp.disabled and not in_place:
            metric = rollback_metric(stable, spec.rollback.metric, sp.baseline_acceptance)
            floor = spec.rollback.min_acceptance
            failing = metric is not None and metric.low < floor
            failing_in_a_row = failing_in_a_row + 1 if failing else 0
            if below == "True":
                assert not {"Rollback", "StepDown"} & set(kinds)
                recovered = metric is not None and metric.low >= floor + 0.05
                assert ("AcceptanceRecovered" in kinds) == (not failing and recovered)
            else:
                assert rolled == (failing_in_a_row >= spec.rollback.failure_limit)
        else:
            assert not rolled
        if rolled or new.tokens != k or new.disabled != sp.disabled:
            failing_in_a_row = 0
        if new.disabled != sp.disabled:
            inconclusive_in_a_row = 0
        status = decided.status


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_flapping_in_a_noisy_stable_run_of_1000_windows(seed: int) -> None:
    from pathlib import Path

    from specfleet.operator.simulate import load_scenario, simulate

    scenario = load_scenario(Path(__file__).parent.parent / "scenarios" / "noisy-stable.yaml")
    result = simulate(scenario, seed)
    assert len(result.records) == 1000
    changes = [
        r.tokens
        for a, r in zip(result.records, result.records[1:], strict=False)
        if a.tokens != r.tokens
    ]
    assert result.rollbacks == 0
    assert len(changes) <= 3, changes  # climbs once or twice, then stays
    # never back to a K it left: no A -> B -> A
    ks = [result.records[0].tokens, *changes]
    assert len(ks) == len(set(ks)), ks


def scaled(spec: SpeculativeModelSpec, replicas: int) -> SpeculativeModelSpec:
    """The spec after a scaler wrote spec.replicas through the scale subresource."""
    return spec.model_copy(update={"replicas": replicas})


@pytest.mark.parametrize("strategy", ["Canary", "InPlace"])
def test_a_trial_running_when_the_fleet_scales_restarts_at_the_new_size(strategy: str) -> None:
    fleet = Fleet(make_spec(tuning={"strategy": strategy}))
    while fleet.status.canary is None:
        fleet.step(CODE)
    trial = fleet.status.canary
    assert trial.stable_replicas == 1
    k_before_trial = trial.previous_tokens if trial.in_place else fleet.status.speculation.tokens
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
    assert sp.candidate_tokens is None and sp.changed_at == fleet.now
    # The next trial starts after the cooldown and remembers the new size.
    while fleet.status.canary is None:
        fleet.step(CODE)
    assert fleet.now - sp.changed_at >= timedelta(minutes=3)
    assert fleet.status.canary.stable_replicas == 4


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


def test_a_reprobe_ended_by_a_scale_is_retried_not_counted_as_failed() -> None:
    fleet = Fleet(make_spec(rollback={"failureLimit": 1, "reprobeAfter": "10m"}))
    fleet.step(STALE)
    while "Reprobe" not in fleet.step(STALE):
        pass
    fleet.spec = scaled(fleet.spec, 3)
    assert fleet.step(STALE) == ["Abort"]
    sp = fleet.status.speculation
    assert sp.disabled and sp.failed_reprobes == 0
    assert sp.reprobe_at == fleet.now + timedelta(minutes=3)  # the cooldown, no back-off


def test_a_trial_from_before_replicas_were_recorded_adopts_the_current_size() -> None:
    fleet = Fleet(make_spec())
    while fleet.status.canary is None:
        fleet.step(CODE)
    fleet.status.canary.stable_replicas = None  # as a status written by an older operator
    assert "Abort" not in fleet.step(CODE)
    assert fleet.status.canary is not None and fleet.status.canary.stable_replicas == 1
