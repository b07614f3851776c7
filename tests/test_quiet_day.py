"""Issue 47: a day with nothing changing starts no pod after the first hour. Samples at
a load the stable pods keep confirming do not age out, and an exploration's budget
comes back only when what it measured has gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specfleet.operator import speed
from specfleet.operator.api import StepCostStatus, StepTimeSample
from specfleet.operator.simulate import load_scenario, simulate
from specfleet.runtime.config import Drafting
from tests.test_speed import timed

QUIET_DAY = Path(__file__).parent.parent / "scenarios" / "day" / "quiet-day.yaml"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _samples(ms: float, at: datetime) -> StepCostStatus:
    """K=3 at batch 4 (the stable pods', 4 windows) and K=8 at batch 4 and at 32."""
    samples = [
        StepTimeSample(tokens=3, batch=4.0, step_ms=ms, steps=1000, windows=4, measured_at=at),
        StepTimeSample(tokens=8, batch=4.0, step_ms=9.0, steps=1000, windows=4, measured_at=at),
        StepTimeSample(tokens=8, batch=32.0, step_ms=20.0, steps=1000, windows=4, measured_at=at),
    ]
    fitted = speed.fit(samples, Drafting.PARALLEL)
    return StepCostStatus(fitted=fitted, samples=samples)


def test_a_window_that_confirms_the_engine_keeps_the_samples_at_its_load() -> None:
    status = _samples(5.0, T0)
    later = T0 + timedelta(hours=5, minutes=59)
    kept = speed.record(status, 3, timed(5.1, 4.0), later, Drafting.PARALLEL)
    by_key = {(s.tokens, s.batch): s.measured_at for s in kept.samples}
    assert by_key[(8, 4.0)] == later  # same load: it still holds
    assert by_key[(8, 32.0)] == T0  # another load: it ages on
    after = speed.record(kept, 3, timed(5.0, 4.0), later + timedelta(hours=1), Drafting.PARALLEL)
    assert {(s.tokens, s.batch) for s in after.samples} == {(3, 4.0), (8, 4.0)}


def test_a_window_unlike_the_sample_refreshes_nothing() -> None:
    status = _samples(5.0, T0)
    later = T0 + timedelta(hours=1)
    moved = speed.record(status, 3, timed(6.0, 4.0), later, Drafting.PARALLEL)  # 20% off
    by_key = {(s.tokens, s.batch): s.measured_at for s in moved.samples}
    assert by_key[(8, 4.0)] == T0 and by_key[(3, 4.0)] == later


@pytest.mark.parametrize(("variant", "seed"), [("c1", 2), ("c1", 3), ("c8", 0)])
def test_a_quiet_day_starts_no_pod_after_the_first_hour(variant: str, seed: int) -> None:
    """Before: 8 canaries after the first hour (c8, seed 0), 2 and 1 (c1, seeds 2 and 3),
    each re-exploring a K as its samples aged out every 6 hours."""
    result = simulate(load_scenario(QUIET_DAY, variant), seed)
    late = [at for at in result.pod_starts if at >= 3600]
    assert late == [], [d for d in result.decisions if d["window"] * result.interval >= 3600]
    assert result.steady_ratio >= 0.95
