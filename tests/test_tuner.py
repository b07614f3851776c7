"""decide() as a whole: its invariants, property-based, and what crosses the families of
transitions (spec changes, the fitted cost, no flapping)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specfleet.operator import proposals, speed, tuner
from specfleet.operator.api import (
    ConditionType,
    RollbackMetric,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.durations import parse_duration
from specfleet.operator.observations import CanaryPending, Observation
from specfleet.operator.outcomes import ActionKind
from specfleet.operator.rollback_metrics import ROLLBACK_METRICS
from specfleet.operator.run import Run
from specfleet.operator.tuner import decide
from specfleet.operator.windows import Judged
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import step_seconds
from tests.decisions import BROKEN, CHAT, CODE, DEAR_VERIFY, STALE, T0, Fleet, make_spec, window


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


def test_a_proposal_is_a_value_that_decide_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """propose changes nothing (issue 40: transitions return values): each candidate it
    returns is the trial decide starts in that window, at its K."""
    proposed: list[proposals.Proposal | None] = []

    def watched(run: Run, judged: Judged) -> proposals.Proposal | None:
        before, actions = run.status.model_dump(), list(run.actions)
        proposal = proposals.propose(run, judged)
        assert run.status.model_dump() == before and run.actions == actions
        proposed.append(proposal)
        return proposal

    monkeypatch.setattr(tuner, "propose", watched)
    fleet = Fleet(make_spec(), engine=DEAR_VERIFY)
    starts = (ActionKind.START_CANARY, ActionKind.START_IN_PLACE)
    started = 0
    for _ in range(60):
        proposed.clear()
        kinds = fleet.step(CODE)
        (candidate,) = proposed or (None,)
        if not isinstance(candidate, proposals.Candidate):
            assert not set(starts) & set(kinds), (kinds, candidate)
            continue
        (entry,) = [d for d in fleet.status.history if d.time == fleet.now and d.action in starts]
        assert entry.to_tokens == candidate.tokens, (entry, candidate)
        started += 1
    assert started >= 2


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
        elif profile is not None and sp.off is None:
            stable = window(profile, k)
            if (on_canary := status.canary_run) is not None:
                canary = replace(window(profile, on_canary[0], 5_000), pods=1)
        now += timedelta(minutes=1)
        waiting = None if pending_since is None else CanaryPending(pending_since, None)
        decided = decide(spec, status, Observation(stable, canary, canary_pending=waiting), now)
        kinds = [a.kind for a in decided.actions]
        new = decided.status.speculation

        # K and the candidate stay in range; at most one candidate, never equal to K.
        assert new.tokens is not None and low <= new.tokens <= high
        if (on_canary := decided.status.canary_run) is not None:
            assert low <= on_canary[0] <= high
            assert on_canary[0] != new.tokens
            assert new.trial is not None and new.trial.in_place is None
        assert kinds.count("StartCanary") + kinds.count("StartInPlace") <= 1
        assert len(decided.status.history) <= 20

        conclusive = stable is not None and stable.draft_tokens >= spec.tuning.min_draft_tokens
        canary_conclusive = (
            canary is not None and canary.draft_tokens >= spec.tuning.min_draft_tokens
        )
        if sp.off is None and profile != "small":  # a small window is collecting, not a gap
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
            assert sp.since_change.at is None or now - sp.since_change.at >= cooldown
        # Rollback after exactly failureLimit conclusive failing windows (outside trials);
        # once below the floor with the fastest K kept, every failing window is re-checked.
        rolled = bool({"Rollback", "StepDown", "Disable", "KeepFastest"} & set(kinds))
        # An in-place trial of a K the floor caps is ended by the floor, not rolled back;
        # while it still measures its baseline the pods run the stable K, which is judged.
        capped = spec.rollback.metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE
        trial = sp.trial
        in_place = trial is not None and trial.in_place is not None and trial.in_place.switched
        in_place = in_place and capped
        below = condition_status(status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR)
        if stable is not None and conclusive and sp.off is None and not in_place:
            metric = ROLLBACK_METRICS[spec.rollback.metric].of_window(
                stable, sp.since_change.baseline_acceptance
            )
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
        switched = (new.off is None) != (sp.off is None)
        if rolled or new.tokens != k or switched:
            failing_in_a_row = 0
        if switched:
            inconclusive_in_a_row = 0
        status = decided.status


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_flapping_in_a_noisy_stable_run_of_1000_windows(seed: int) -> None:
    from pathlib import Path

    from specfleet.operator.simulate import load_scenario, simulate

    scenario = load_scenario(Path(__file__).parent.parent / "scenarios" / "noisy-stable.yaml")
    result = simulate(scenario, seed)
    assert len(result.records) == 1000
    served = [r for r in result.records if not r.alternating]  # not a hot trial's slices
    changes = [r.tokens for a, r in itertools.pairwise(served) if a.tokens != r.tokens]
    assert result.rollbacks == 0
    assert len(changes) <= 3, changes  # climbs once or twice, then stays
    # never back to a K it left: no A -> B -> A
    ks = [result.records[0].tokens, *changes]
    assert len(ks) == len(set(ks)), ks
