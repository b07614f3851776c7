"""The step-time fit: the prior until data exists, the measurements once they do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.operator import speed
from specfleet.operator.api import StepTimeSample
from specfleet.operator.metrics import TrackWindow
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import StepCost, step_seconds

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
