"""The step-time fit: the prior until data exists, the measurements once they do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.operator import speed
from specfleet.operator.api import (
    K0_TAX_PRIOR,
    SpeculationState,
    SpeculativeModelStatus,
    StepTimeSample,
)
from specfleet.operator.counts import Counts
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import mean_acceptance_length
from specfleet.runtime.sim_model import StepCost, step_seconds
from tests.decisions import make_spec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def sample(cost: StepCost, k: int, batch: float, windows: int = 3) -> StepTimeSample:
    ms = 1000 * step_seconds(cost, k, round(batch), Drafting.PARALLEL)
    return StepTimeSample(
        tokens=k, batch=batch, step_ms=ms, steps=1000, windows=windows, measured_at=T0
    )


def timed(k_ms: float, batch: float, engine_steps: float = 1000) -> TrackWindow:
    return TrackWindow(
        drafts=engine_steps * batch,
        draft_tokens=0,
        accepted_tokens=0,
        accepted_per_position=(),
        generation_tokens=0,
        seconds=60,
        pod_seconds=60,
        pods=1,
        running_requests=batch,
        decode_seconds=engine_steps * batch * k_ms / 1000,
        decode_steps=engine_steps * batch,
        engine_steps=engine_steps,
    )


def test_without_measurements_the_fit_is_the_prior() -> None:
    assert speed.fit([], drafting=Drafting.PARALLEL) == speed.prior(drafting=Drafting.PARALLEL)
    assert speed.step_ms(speed.prior(Drafting.PARALLEL), 3, 4) == pytest.approx(
        1000 * step_seconds(StepCost(), 3, 4, Drafting.PARALLEL)
    )


ENGINES = {
    "cheap verify": StepCost(compute_bound_tokens=512, verify_ms_per_token=0.01),
    "dear verify": StepCost(compute_bound_tokens=8, verify_ms_per_token=0.3),
    "dear draft": StepCost(parallel_draft_ms=6.0, parallel_draft_ms_per_token=0.5),
}


@pytest.mark.parametrize("name", ENGINES)
def test_two_measured_ks_predict_the_ones_between(name: str) -> None:
    """Measured at K=3 and K=7, the fit predicts K=3..7 at that batch within 3%, whatever
    the engine. (Beyond them a knee it has not seen may lie: a trial there measures it.)"""
    engine = ENGINES[name]
    fitted = speed.fit([sample(engine, 3, 4), sample(engine, 7, 4)], drafting=Drafting.PARALLEL)
    for k in range(3, 8):
        truth = 1000 * step_seconds(engine, k, 4, Drafting.PARALLEL)
        assert speed.step_ms(fitted, k, 4) == pytest.approx(truth, rel=0.03), k


def test_an_engine_whose_target_is_beyond_the_priors_interval_is_unlike_it() -> None:
    """The prior's target forward is 2.7 ms with a spread of 100%: its 90% interval ends
    at 7.1 ms. Real vLLM's CPU build fitted 23.2 ms from K=3 alone."""
    cost = speed.prior(Drafting.PARALLEL)
    assert not speed.unlike_prior(cost, Drafting.PARALLEL)
    for ms, unlike in ((7.0, False), (7.2, True), (23.2, True)):
        slower = cost.model_copy(update={"target_forward_ms": ms})
        assert speed.unlike_prior(slower, Drafting.PARALLEL) is unlike, ms


def test_the_prior_alone_is_wrong_for_these_engines() -> None:
    """The engines above are ones the prior does not know: the test above can fail."""
    prior = speed.prior(drafting=Drafting.PARALLEL)
    misses = [
        abs(speed.step_ms(prior, 5, 4) / (1000 * step_seconds(e, 5, 4, Drafting.PARALLEL)) - 1)
        for e in ENGINES.values()
    ]
    assert max(misses) > 0.3


def test_windows_at_one_k_and_batch_average_into_one_sample_and_old_ones_fade() -> None:
    status = None
    for minute in range(20):
        ms = 30.0 if minute < 10 else 40.0
        status = speed.record(
            status, 3, timed(ms, 4.0), T0 + timedelta(minutes=minute), Drafting.PARALLEL
        )
    assert status is not None and len(status.samples) == 1
    only = status.samples[0]
    assert only.windows == 20
    # After 10 windows at 40 ms the sample is close to 40, not the 35 of a plain average.
    assert only.step_ms > 38.5


def test_a_window_with_few_engine_steps_teaches_nothing() -> None:
    status = speed.record(None, 3, timed(30.0, 4.0, engine_steps=10), T0, Drafting.PARALLEL)
    assert status.samples == [] and status.fitted == speed.prior(Drafting.PARALLEL)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 16), st.floats(1, 64), st.floats(1, 500)),
        min_size=1,
        max_size=12,
    )
)
def test_the_fit_is_never_negative_and_never_nan(points: list[tuple[int, float, float]]) -> None:
    samples = [
        StepTimeSample(tokens=k, batch=b, step_ms=ms, steps=100, windows=1, measured_at=T0)
        for k, b, ms in points
    ]
    fitted = speed.fit(samples, drafting=Drafting.PARALLEL)
    values = fitted.model_dump().values()
    assert all(v >= 0 for v in values)
    assert fitted.target_forward_ms > 0
    for k, b, _ in points:
        assert speed.step_ms(fitted, k, b) > 0


@pytest.mark.parametrize(
    ("target_ms", "batch", "best"), [(10.0, 32, 2), (20.0, 32, 3), (40.0, 8, 7)]
)
def test_a_slow_target_is_fitted_at_its_own_scale(target_ms: float, batch: int, best: int) -> None:
    """One exact sample at K=3 of a target far slower than the prior: the unexplained
    time is the target's, so the best predicted K is the engine's (the spreads follow the
    measured scale, not the prior's 2.7 ms)."""
    engine = StepCost(target_forward_ms=target_ms)
    fitted = speed.fit([sample(engine, 3, batch)], drafting=Drafting.PARALLEL)
    assert fitted.target_forward_ms == pytest.approx(target_ms, rel=0.05)
    code = [0.831, 0.664]

    def goodput(cost: StepCost | None, k: int) -> float:
        length = mean_acceptance_length(code, k) if k else 1.0
        if cost is None:
            return length / speed.step_ms(fitted, k, batch)
        return length / step_seconds(cost, k, batch, Drafting.PARALLEL)

    assert max(range(17), key=lambda k: goodput(engine, k)) == best
    predicted = max(range(17), key=lambda k: goodput(None, k))
    assert goodput(engine, predicted) >= 0.97 * goodput(engine, best)


def test_samples_age_at_every_k_and_go_after_max_age() -> None:
    """A sample at a K no longer run weighs less with every hour and is gone after
    MAX_AGE, though only another K is measured."""
    engine = StepCost()
    slow = sample(StepCost(target_forward_ms=30.0), 7, 4)  # a bad stretch at K=7
    status = speed.record(
        None,
        3,
        timed(1000 * step_seconds(engine, 3, 4, Drafting.PARALLEL), 4),
        T0,
        Drafting.PARALLEL,
    )
    status = status.model_copy(update={"samples": [*status.samples, slow]})
    ms = 1000 * step_seconds(engine, 3, 4, Drafting.PARALLEL)
    errors = []
    for hours in (1, 3, 5):
        now = T0 + timedelta(hours=hours)
        status = speed.record(status, 3, timed(ms, 4), now, Drafting.PARALLEL)
        errors.append(abs(speed.step_ms(status.fitted, 3, 4) / ms - 1))
    assert errors == sorted(errors, reverse=True) and errors[-1] < 0.02
    later = speed.record(
        status, 3, timed(ms, 4), T0 + speed.MAX_AGE + timedelta(minutes=1), Drafting.PARALLEL
    )
    assert [s.tokens for s in later.samples] == [3]


def test_one_far_sample_pulls_the_fit_less_than_squares_would() -> None:
    """Huber's loss: a sample far off the others moves the prediction at the others' Ks
    by little."""
    engine = StepCost()
    good = [sample(engine, k, 4) for k in (2, 3, 4, 5)]
    bad = sample(StepCost(target_forward_ms=27.0), 6, 4)
    fitted = speed.fit([*good, bad], drafting=Drafting.PARALLEL)
    for s in good:
        assert speed.step_ms(fitted, s.tokens, 4) == pytest.approx(s.step_ms, rel=0.1)


def test_a_window_far_from_its_k_and_batch_is_perturbed() -> None:
    ms = 1000 * step_seconds(StepCost(), 3, 4, Drafting.PARALLEL)
    status = None
    for minute in range(3):
        status = speed.record(
            status, 3, timed(ms, 4), T0 + timedelta(minutes=minute), Drafting.PARALLEL
        )
    assert speed.perturbation(status, 3, timed(ms * 1.1, 4)) is None  # jitter
    assert speed.perturbation(status, 3, timed(ms * 3, 4)) is not None  # a slow minute
    assert speed.perturbation(status, 3, timed(ms / 3, 4)) is not None
    assert speed.perturbation(status, 5, timed(ms * 3, 4)) is None  # never measured there
    assert speed.perturbation(status, 3, timed(ms * 3, 32)) is None  # another batch


def test_a_slow_stretch_is_held_until_it_lasts_then_the_fit_starts_over_from_it() -> None:
    """speed.learn: a window at the engine's step time adds to its sample; one 3x slower
    is held out (counted, no sample moves) up to PERTURBED_LIMIT windows in a row, and
    then the engine has changed: the old samples go, the fit starts from that window."""
    spec, drafting = make_spec(), Drafting.PARALLEL
    ms = 1000 * step_seconds(StepCost(), 3, 4, drafting)
    cost = None
    for minute in range(3):
        cost = speed.record(cost, 3, timed(ms, 4), T0 + timedelta(minutes=minute), drafting)
    assert cost is not None
    status = SpeculativeModelStatus(step_cost=cost, speculation=SpeculationState(tokens=3))
    now = T0 + timedelta(minutes=10)

    usual = speed.learn(spec, status, Observation(stable=timed(ms, 4), canary=None), now, drafting)
    assert usual.perturbed is None and usual.cost is not None
    assert [(s.tokens, s.windows) for s in usual.cost.samples] == [(3, 4)]

    slow = Observation(stable=timed(ms * 3, 4), canary=None)
    for held in range(1, speed.PERTURBED_LIMIT):
        learnt = speed.learn(spec, status, slow, now, drafting)
        assert learnt.perturbed is not None and learnt.cost is not None
        assert learnt.cost.samples == cost.samples and learnt.cost.perturbed_windows == held
        status = status.model_copy(update={"step_cost": learnt.cost})
    changed = speed.learn(spec, status, slow, now, drafting)
    assert changed.perturbed is None and changed.cost is not None
    assert [(s.tokens, s.windows) for s in changed.cost.samples] == [(3, 1)]
    assert changed.cost.samples[0].step_ms == pytest.approx(ms * 3, rel=1e-3)


def test_a_k0_bands_windows_replace_the_prior_tax_with_what_they_measure() -> None:
    """A window of a schedule's K=0 band (no step drafted) at 1.5x the fit's plain step
    time: the tax moves from the published prior to the 0.5 measured, and the next
    window averages in; the step-time samples (the fit of K>=1) are left alone."""
    drafting = Drafting.PARALLEL
    base = speed.prior(drafting)
    assert base.k0_tax == K0_TAX_PRIOR
    plain_ms = speed.step_ms(base, 0, 32.0)

    def band_window(ms: float) -> TrackWindow:
        steps = 2000
        return TrackWindow(
            seconds=60.0, pod_seconds=60.0, pods=1, running_requests=32.0
        ).with_counts(
            Counts(
                decode_steps=steps * 32,
                engine_steps=steps,
                decode_seconds=steps * 32 * ms / 1000.0,
                generation_tokens=steps * 32,
            )
        )

    first = speed.record_k0_band(None, band_window(plain_ms * 1.5), drafting)
    assert first is not None and first.k0_tax_windows == 1 and not first.samples
    assert first.fitted.k0_tax == pytest.approx(0.5, abs=0.01)
    second = speed.record_k0_band(first, band_window(plain_ms * 1.3), drafting)
    assert second is not None and second.fitted.k0_tax == pytest.approx(0.4, abs=0.01)
    assert speed.step_ms(second.fitted, 0, 32.0, configured=True) == pytest.approx(
        plain_ms * (1 + second.fitted.k0_tax)
    )
