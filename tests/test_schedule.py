"""K by batch size: the estimator of acceptance per position under a schedule, the
learner, rendering, and the tuner trying, promoting and rolling back a schedule."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from specfleet.operator import render, runtime_container, schedule, speed
from specfleet.operator.api import (
    LastKnownGood,
    RollbackMetric,
    ScheduledBand,
    ScheduleMode,
    SpeculativeModel,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    Trial,
)
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.outcomes import Action, ActionKind
from specfleet.operator.prediction import predict, window_conditional
from specfleet.operator.stats import drafts_reaching, per_position
from specfleet.operator.tuner import decide
from specfleet.runtime import decoding, sim_model
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_engine import SimEngine
from specfleet.runtime.sim_model import Load, SimProfile, StepCost
from tests.decisions import CODE, DAR, T0, make_spec

PUBLISHED = StepCost()  # the simulator's published-like cost


def band(tokens: int, up_to: int | None = None) -> ScheduledBand:
    return ScheduledBand(up_to_batch=up_to, tokens=tokens)


# ------------------------------------------------------------------ the estimator


def test_two_counts_tell_how_many_drafts_reached_the_deep_positions() -> None:
    # 600 drafts at K=2 and 400 at K=5: D = 1000, T = 600*2 + 400*5 = 3200.
    assert drafts_reaching(1000, 3200, (2, 5)) == [1000, 1000, 400, 400, 400]
    assert drafts_reaching(1000, 3000, (3,)) == [1000, 1000, 1000]
    assert drafts_reaching(1000, 3000, (0, 3)) == [1000, 1000, 1000]  # K=0 steps draft nothing
    with pytest.raises(ValueError, match="three Ks"):
        drafts_reaching(1000, 3000, (1, 2, 3))


def _run_schedule(
    low_k: int, high_k: int, edge: int, seed: int, seconds: float = 30.0
) -> tuple[SimEngine, SimProfile]:
    """A simulated engine drafting high_k up to batch `edge` and low_k above, under load
    that moves between light and heavy every few seconds (both Ks run)."""
    profile = SimProfile(acceptance=[0.9, 0.8, 0.75, 0.7, 0.65, 0.6], noise=0.0)
    sim = SimEngine(
        profile,
        k_max=high_k,
        k_for_batch=lambda b: high_k if b <= edge else low_k,
        drafting=Drafting.PARALLEL,
        seed=seed,
    )
    rng = random.Random(seed)
    elapsed = 0.0
    while elapsed < seconds:
        sim.set_load(Load(requests_per_second=rng.choice([1.0, 40.0]), output_tokens=64))
        for _ in range(round(3.0 / profile.tick)):
            sim.advance(profile.tick)
        elapsed += 3.0
    return sim, profile


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    low_k=st.integers(1, 3),
    extra=st.integers(1, 3),
    edge=st.integers(2, 4),
    seed=st.integers(0, 10_000),
)
def test_per_position_acceptance_under_a_schedule_is_unbiased(
    low_k: int, extra: int, edge: int, seed: int
) -> None:
    """Against the simulator (whose truth is prod(p_0..p_i) for a draft that reached i):
    dividing by the drafts that reached each position is within 4 standard errors at
    every position; dividing by all drafts reads the shallow steps as rejections (it
    lands on truth times the share of deep drafts)."""
    high_k = low_k + extra
    sim, profile = _run_schedule(low_k, high_k, edge, seed)
    c = sim.counters
    window = TrackWindow(
        drafts=c.num_drafts,
        draft_tokens=c.num_draft_tokens,
        accepted_tokens=c.num_accepted_tokens,
        accepted_per_position=tuple(c.accepted_per_position),
        generation_tokens=c.generation_tokens,
        seconds=60,
        pod_seconds=60,
        pods=1,
        running_requests=0,
        ks=(low_k, high_k),
    )
    reaching = drafts_reaching(c.num_drafts, c.num_draft_tokens, (low_k, high_k))
    assume(200 < reaching[-1] < c.num_drafts - 200)  # both Ks ran, or nothing is tested
    truth = decoding.cumulative_acceptance(profile.acceptance, high_k)
    measured = per_position(window)
    naive = per_position(replace(window, ks=()))
    for i, expected in enumerate(truth):
        se = math.sqrt(expected * (1 - expected) / reaching[i])
        assert abs(measured[i].value - expected) < 4 * se, (i, measured[i].value, expected)
        if i >= low_k:  # positions only the deep drafts reached: all drafts dilute them
            share = reaching[i] / c.num_drafts
            assert abs(naive[i].value - expected * share) < 4 * se * share


# ------------------------------------------------------------------ the learner


def test_learns_a_deep_k_at_light_load_and_no_drafting_where_no_k_pays() -> None:
    spec = make_spec(speculation={"schedule": {"mode": "Learned"}})
    cost = speed.prior(Drafting.PARALLEL)
    load = [1.0] * 6 + [32.0] * 6
    learned = schedule.learn(spec, load, CODE, cost)
    assert learned is not None and len(learned) == 2
    light, heavy = learned
    assert light.tokens >= 4 and heavy.tokens == 0 and heavy.up_to_batch is None
    # The edge sits where the fitted cost says the deep K stops paying.
    assert light.up_to_batch is not None and 1 <= light.up_to_batch < 32
    edge = light.up_to_batch
    assert schedule.request_speed(CODE, light.tokens, edge, cost) >= schedule.request_speed(
        CODE, 0, edge, cost
    )
    assert schedule.request_speed(CODE, light.tokens, edge + 1, cost) < schedule.request_speed(
        CODE, 0, edge + 1, cost
    )
    flat = schedule.tokens_over([band(light.tokens)], load, CODE, cost)
    assert schedule.tokens_over(learned, load, CODE, cost) > flat


def test_a_k0_band_pays_its_tax_and_plain_pods_do_not() -> None:
    """A schedule's K=0 band runs on an engine started to speculate: slower than plain
    decoding by the measured tax, so over load where no K pays plain pods serve more."""
    cost = speed.prior(Drafting.PARALLEL).model_copy(update={"k0_tax": 0.25})
    banded = schedule.request_speed(CODE, 0, 32.0, cost)
    plain = schedule.request_speed(CODE, 0, 32.0, cost, configured=False)
    assert banded == pytest.approx(plain / 1.25)
    heavy = [32.0] * 8
    assert schedule.tokens_over(None, heavy, CODE, cost) > schedule.tokens_over(
        [band(0)], heavy, CODE, cost
    )


def test_tokens_at_stake_weigh_a_window_by_its_requests() -> None:
    """Load flipping between 1 and 32 in flight: a deep K at 1 gains a request's tokens,
    K=0's tax at 32 loses 32 requests' worth. Per request the schedule looks better; by
    the tokens at stake plain pods serve more, and that is what the tuner weighs."""
    cost = speed.prior(Drafting.PARALLEL).model_copy(update={"k0_tax": 0.1})
    load = [1.0] * 6 + [32.0] * 6
    split = [ScheduledBand(up_to_batch=4, tokens=8), band(0)]
    per_request = sum(
        schedule.request_speed(CODE, schedule.k_at(split, b), b, cost) for b in load
    ) / sum(schedule.request_speed(CODE, 0, b, cost, configured=False) for b in load)
    assert per_request > 1.0
    assert schedule.tokens_over(None, load, CODE, cost) > schedule.tokens_over(
        split, load, CODE, cost
    )


def test_auto_decides_for_the_load_history_only_where_its_extremes_disagree() -> None:
    auto = make_spec()
    assert auto.speculation.schedule.mode is ScheduleMode.AUTO
    cost = speed.prior(Drafting.PARALLEL)
    spans = [1.0] * 3 + [32.0] * 3
    assert schedule.learning(auto, spans, CODE, cost, scheduled=False)
    assert not schedule.learning(auto, [8.0] * 6, CODE, cost, scheduled=False)  # one K
    # ...unless a schedule runs: what replaces it is learned too (one K, or plain pods).
    assert schedule.learning(auto, [8.0] * 6, CODE, cost, scheduled=True)
    assert not schedule.learning(auto, [1.0, 32.0], CODE, cost, scheduled=False)  # too few
    off = make_spec(speculation={"schedule": {"mode": "Off"}})
    assert not schedule.learning(off, spans, CODE, cost, scheduled=False)
    learned = make_spec(speculation={"schedule": {"mode": "Learned"}})
    assert schedule.learning(learned, [8.0] * 6, CODE, cost, scheduled=False)


def test_one_load_learns_one_k() -> None:
    spec = make_spec(speculation={"schedule": {"mode": "Learned"}})
    learned = schedule.learn(spec, [2.0] * 8, CODE, speed.prior(Drafting.PARALLEL))
    assert learned is not None and len(learned) == 1 and learned[0].up_to_batch is None


def test_spec_bands_fix_the_edges_and_bound_each_band() -> None:
    spec = make_spec(
        speculation={
            "schedule": {
                "mode": "Learned",
                "bands": [{"upToBatch": 4, "maxTokens": 3}, {"minTokens": 1, "maxTokens": 2}],
            }
        }
    )
    learned = schedule.learn(spec, [1.0] * 6 + [32.0] * 6, CODE, speed.prior(Drafting.PARALLEL))
    assert learned is not None
    assert learned[0].up_to_batch == 4 and learned[0].tokens <= 3
    assert 1 <= learned[-1].tokens <= 2  # minTokens 1: this band may not stop drafting


# ------------------------------------------------------------------ rendering


@pytest.mark.parametrize(
    "bands",
    [[band(5, 4), band(0)], [band(7, 1), band(3, 16), band(7)], [band(2)]],
)
def test_rendered_entries_give_vllm_the_same_k_at_every_batch(
    bands: list[ScheduledBand], peagle_manifest: dict[str, Any]
) -> None:
    spec = SpeculativeModel.model_validate(peagle_manifest).spec
    largest = schedule.largest(bands)
    config = runtime_container.runtime_config(spec, spec.draft.method, largest, bands)
    for batch in range(1, 200):
        assert config.k_for_batch(batch) == schedule.k_at(bands, batch), batch


def test_the_canary_renders_its_schedule_and_the_stable_its_own(
    peagle_manifest: dict[str, Any],
) -> None:
    model = SpeculativeModel.model_validate(peagle_manifest)
    sp = model.status.speculation
    sp.tokens = 3
    sp.trial = Trial(tokens=6, schedule=[band(6, 4), band(0)], started_at=T0, stable_replicas=1)
    stable, canary = (render.deployment(model, t) for t in ("stable", "canary"))
    stable_args = stable["spec"]["template"]["spec"]["containers"][0]["args"]
    canary_args = canary["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--batch-schedule" not in stable_args
    assert canary_args[canary_args.index("--num-speculative-tokens") + 1] == "6"
    entries = [canary_args[i + 1] for i, a in enumerate(canary_args) if a == "--batch-schedule"]
    assert entries == ["1:4:6", "5:65536:0"]


def test_a_fixed_schedule_runs_as_written() -> None:
    spec = make_spec(
        speculation={
            "schedule": {"mode": "Fixed", "bands": [{"upToBatch": 8, "tokens": 6}, {"tokens": 2}]}
        }
    )
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    assert status.speculation.schedule == [band(6, 8), band(2)]
    assert status.speculation.tokens == 6


# ------------------------------------------------------------------ the tuner


def _window(k_at_batch: int, batch: int, drafts: float = 20_000) -> TrackWindow:
    """A track's window at one load: K=k_at_batch (0: no drafts), step times from the
    published-like cost, acceptance CODE."""
    per_pos = tuple(drafts * r for r in decoding.cumulative_acceptance(CODE, k_at_batch))
    step = sim_model.step_seconds(PUBLISHED, k_at_batch, batch, Drafting.PARALLEL)
    return TrackWindow(
        drafts=drafts if k_at_batch else 0,
        draft_tokens=drafts * k_at_batch,
        accepted_tokens=sum(per_pos),
        accepted_per_position=per_pos if k_at_batch else (),
        generation_tokens=drafts + sum(per_pos),
        seconds=60,
        pod_seconds=120,
        pods=2,
        running_requests=2 * batch,
        decode_seconds=drafts * step,
        decode_steps=drafts,
        engine_steps=drafts / batch,
    )


def _k_of(sp_tokens: int, bands: list[ScheduledBand] | None, batch: int) -> int:
    return schedule.k_at(bands, batch) if bands else sp_tokens


def _cycle(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    minutes: range,
    batch_of: Callable[[int], int],
    until: Callable[[SpeculativeModelStatus, list[str]], bool] = lambda status, kinds: False,
) -> tuple[SpeculativeModelStatus, list[str], int | None]:
    """Feed windows at the batch `batch_of(minute)`: the stable pods (and a canary) at
    the K their schedule runs there; stop early when `until`. Also the stable K before
    the last window."""
    kinds: list[str] = []
    before = None
    for minute in minutes:
        batch = batch_of(minute)
        sp = status.speculation
        stable = _window(_k_of(sp.tokens or 3, sp.schedule, batch), batch)
        canary = None
        if (run := status.canary_run) is not None:
            k = _k_of(run[0], run[1], batch)
            canary = replace(_window(k, batch, 10_000), pods=1, pod_seconds=60)
        before = sp.tokens
        decided = decide(spec, status, Observation(stable, canary), T0 + timedelta(minutes=minute))
        status = decided.status
        kinds += [a.kind for a in decided.actions]
        if until(status, kinds):
            break
    return status, kinds, before


def _light_then_heavy(minute: int) -> int:
    return 1 if (minute // 5) % 2 == 0 else 32


def test_learns_tries_and_promotes_a_schedule_on_cycling_load() -> None:
    spec = make_spec(speculation={"tokens": 3, "schedule": {"mode": "Learned"}})
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    status, kinds, before = _cycle(
        spec,
        status,
        range(1, 61),
        _light_then_heavy,
        until=lambda status, kinds: (
            ActionKind.PROMOTE in kinds and status.speculation.schedule is not None
        ),
    )
    sp = status.speculation
    assert ActionKind.START_CANARY in kinds and ActionKind.PROMOTE in kinds, kinds
    assert sp.schedule is not None and len(sp.schedule) == 2
    assert sp.schedule[0].tokens > 3 and sp.schedule[-1].tokens == 0
    assert sp.tokens == schedule.largest(sp.schedule)
    # What ran before it (one K, maybe tuned on the way) is the last known good.
    assert sp.last_known_good == LastKnownGood(tokens=before)


def test_where_the_schedule_drafts_nothing_no_metrics_gap_is_called() -> None:
    spec = make_spec(speculation={"tokens": 3, "schedule": {"mode": "Learned"}})
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    status.speculation.schedule = [band(6, 8), band(0)]
    status.speculation.tokens = 6
    status, kinds, _ = _cycle(spec, status, range(1, 13), lambda minute: 32)
    assert ActionKind.METRICS_UNAVAILABLE not in kinds
    assert status.acceptance.reason == "NotDrafting"
    available = [c for c in status.conditions if c.type == "MetricsAvailable"]
    assert all(c.status != "False" for c in available)


def test_an_in_place_schedule_trial_is_promoted_or_restores_what_ran() -> None:
    spec = make_spec(
        speculation={"tokens": 3, "schedule": {"mode": "Learned"}},
        tuning={"strategy": "InPlace"},
    )
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    # In-place trials start at most once an hour: K first, the schedule after.
    status, kinds, _ = _cycle(spec, status, range(1, 121), _light_then_heavy)
    assert ActionKind.START_IN_PLACE in kinds
    sp = status.speculation
    assert status.canary_run is None  # in place: no canary
    assert sp.schedule is not None and len(sp.schedule) == 2  # learned and kept


@pytest.mark.parametrize(
    ("good", "to_schedule", "to_tokens"),
    [
        # A last known good schedule first ...
        ([band(2, 4), band(1)], [band(2, 4), band(1)], 2),
        # ... else one K, the last known good.
        (None, None, 3),
    ],
)
def test_a_failing_schedule_rolls_back_as_a_whole(
    good: list[ScheduledBand] | None, to_schedule: list[ScheduledBand] | None, to_tokens: int
) -> None:
    spec = make_spec(
        speculation={"tokens": 3, "schedule": {"mode": "Learned"}},
        rollback={**DAR, "failureLimit": 2},
    )
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    sp = status.speculation
    failed = [band(6, 4), band(2)]
    sp.schedule, sp.tokens = failed, 6
    sp.last_known_good = LastKnownGood(tokens=3, schedule=good)
    # Failing at K=6, K=3 predicted to clear the floor (0.91).
    bad = [0.97, 0.95, 0.9, 0.2, 0.2, 0.2]
    per_pos = tuple(20_000 * r for r in decoding.cumulative_acceptance(bad, 6))
    failing = replace(_window(6, 1), accepted_per_position=per_pos, accepted_tokens=sum(per_pos))
    kinds: list[str] = []
    for minute in (1, 2):
        now = T0 + timedelta(minutes=minute)
        decided = decide(spec, status, Observation(failing, None), now)
        status = decided.status
        kinds += [a.kind for a in decided.actions]
    assert kinds.count(ActionKind.ROLLBACK) == 1
    assert status.speculation.schedule == to_schedule
    assert status.speculation.tokens == to_tokens
    assert status.speculation.rejected_schedule == failed


def test_positions_no_draft_reached_are_unknown_not_zero() -> None:
    """A two-K schedule that ran its small K all window (K=2 of 2 and 6): positions 3-6
    were drafted by no one. Read as 0% they would predict every deeper K useless; they are
    left out, and the prediction extrapolates from what was measured."""
    window = replace(_window(2, 1), ks=(2, 6))
    window = replace(window, accepted_per_position=(*window.accepted_per_position, 0, 0, 0, 0))
    assert len(per_position(window)) == 2
    conditional = window_conditional(window)
    assert len(conditional) == 2 and min(conditional) > 0.6
    deep = predict(
        conditional,
        6,
        1.0,
        RollbackMetric.FIRST_POSITION_ACCEPTANCE,
        speed.prior(Drafting.PARALLEL),
    )
    assert deep.mean_length > 3.0


def _k7_then_k2_schedule() -> SpeculativeModelSpec:
    """A Fixed schedule, K=7 up to 2 requests and K=2 above, failing after 2 windows."""
    return make_spec(
        speculation={
            "tokens": 7,
            "schedule": {"mode": "Fixed", "bands": [{"upToBatch": 2, "tokens": 7}, {"tokens": 2}]},
        },
        rollback={**DAR, "failureLimit": 2},
    )


def _failing_k7_then_k2(conditional: list[float]) -> TrackWindow:
    """A window of that schedule at K=7 whose drafts are accepted with `conditional`."""
    per_pos = tuple(20_000 * r for r in decoding.cumulative_acceptance(conditional, 7))
    return replace(
        _window(7, 1), accepted_per_position=per_pos, accepted_tokens=sum(per_pos), ks=(2, 7)
    )


def test_a_failing_fixed_schedule_rolls_back_to_its_smallest_k() -> None:
    """Not to its largest K at every load (where acceptance is lowest) before stepping down."""
    spec = _k7_then_k2_schedule()
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    assert status.speculation.tokens == 7
    good = status.speculation.last_known_good
    assert good is not None and good.tokens == 2 and good.schedule == status.speculation.schedule
    # Failing at K=7, K=2 predicted to clear the floor (0.95).
    bad = [0.97, 0.95, 0.9, 0.2, 0.2, 0.2]
    failing = _failing_k7_then_k2(bad)
    for minute in (1, 2):
        status = decide(
            spec, status, Observation(failing, None), T0 + timedelta(minutes=minute)
        ).status
    assert status.speculation.schedule is None and status.speculation.tokens == 2


def test_a_failing_fixed_schedule_never_rolls_back_to_a_k_predicted_to_fail() -> None:
    """Issue 41, item 8: the schedule's smallest K, K=2, predicted 0.675 under the 0.75
    floor, is not where it goes (as rollback() would not go there for one K): the largest
    smaller K predicted to clear the floor with the margin, K=1 (0.9), is."""
    spec = _k7_then_k2_schedule()
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    bad = [0.9, 0.5, 0.4, 0.3, 0.2, 0.2, 0.2]
    failing = _failing_k7_then_k2(bad)
    actions: list[Action] = []
    for minute in (1, 2):
        decided = decide(spec, status, Observation(failing, None), T0 + timedelta(minutes=minute))
        status, actions = decided.status, actions + decided.actions
    sp = status.speculation
    rollbacks = [a for a in actions if a.kind == ActionKind.ROLLBACK]
    assert len(rollbacks) == 1 and "K=2 is predicted 0.675" in rollbacks[0].message
    assert sp.schedule is None and sp.tokens == 1
    assert sp.last_known_good == LastKnownGood(tokens=1)


def test_a_failing_fixed_schedule_with_no_k_predicted_to_clear_goes_below_the_floor() -> None:
    """No K of the spec's range is predicted to clear the floor: what below_floor does
    for one K (keep the fastest, flagged, here), never a roll back to a failing K."""
    spec = _k7_then_k2_schedule()
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    bad = [0.5, 0.4, 0.3, 0.2, 0.2, 0.2]
    failing = _failing_k7_then_k2(bad)
    kinds: list[str] = []
    for minute in (1, 2):
        decided = decide(spec, status, Observation(failing, None), T0 + timedelta(minutes=minute))
        status, kinds = decided.status, kinds + [a.kind for a in decided.actions]
    assert ActionKind.ROLLBACK not in kinds and status.speculation.tokens != 2


def test_a_parallel_drafters_schedule_pays_its_ceiling_in_every_band() -> None:
    """P-EAGLE drafts every slot of its engine's ceiling, the schedule's largest K, in
    every band (vLLM sizes the slots by num_speculative_tokens). Load flipping between 2
    and 8 in flight: the schedule learned as if each band drafted its own K serves less
    than predicted, and the one learned weighing the ceiling serves more."""
    spec = make_spec()
    cost = speed.prior(Drafting.PARALLEL)
    load = [2.0, 8.0] * 12
    blind = schedule.learn(spec, load, CODE, cost)
    weighed = schedule.learn(spec, load, CODE, cost, parallel=True)
    assert blind is not None and weighed is not None
    assert len(schedule.drafting_ks(blind)) == 2  # a deep K at 2, a shallow one at 8

    def served(bands: list[ScheduledBand], parallel: bool) -> float:
        return schedule.tokens_over(bands, load, CODE, cost, parallel=parallel)

    assert served(blind, parallel=True) < served(blind, parallel=False)
    # Here: K=8 up to batch 5, K=4 above; weighed: K=5 above (its ceiling is paid anyway).
    assert weighed != blind
    assert served(weighed, parallel=True) > served(blind, parallel=True)
    # One K everywhere drafts its own K: the ceiling costs nothing there.
    one = [ScheduledBand(tokens=3)]
    assert served(one, parallel=True) == served(one, parallel=False)
