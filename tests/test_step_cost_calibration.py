"""StepCost's defaults keep the shape vLLM PR 32887 published for P-EAGLE on GPT-OSS-120B.

The tuner takes the defaults as its prior, so a change that moves them away from the
published shape must fail here, not show up as a tuner that climbs to the wrong K.
"""

from __future__ import annotations

import pytest

from benchmarks.step_cost_shape import (
    CALIBRATION_PROFILE,
    CHAT_FIRST_POSITION,
    PUBLISHED_AT_K,
    PUBLISHED_LENGTH,
    batch_shape,
    published_profiles,
)
from specfleet.runtime.decoding import mean_acceptance_length
from specfleet.runtime.sim_model import StepCost

# (best K range, speedup range over plain decoding) per batch; P-EAGLE over EAGLE-3 range.
TOLERANCE = {1: ((6, 8), (1.40, 1.65)), 8: ((2, 4), (1.25, 1.45))}
OVER_SEQUENTIAL = (1.04, 1.16)


def test_profiles_reproduce_the_published_acceptance_lengths() -> None:
    profiles = published_profiles()
    assert profiles["chat"][0] == CHAT_FIRST_POSITION
    for name, length in PUBLISHED_LENGTH.items():
        assert mean_acceptance_length(profiles[name], PUBLISHED_AT_K) == pytest.approx(
            length, abs=0.005
        ), name
    # Deeper positions are accepted less often, and better workloads accept more.
    assert all(first > tail for first, tail in profiles.values())
    assert profiles["math"] > profiles["code"] > profiles["chat"]


@pytest.mark.parametrize("batch", sorted(TOLERANCE))
def test_default_step_cost_has_the_published_shape(batch: int) -> None:
    shape = batch_shape(StepCost(), published_profiles()[CALIBRATION_PROFILE], batch)
    (k_low, k_high), (low, high) = TOLERANCE[batch]
    assert k_low <= shape.best_k <= k_high
    assert low <= shape.speedup <= high
    assert OVER_SEQUENTIAL[0] <= shape.over_sequential <= OVER_SEQUENTIAL[1]


def test_parallel_drafting_pays_at_a_deeper_k_than_sequential() -> None:
    shape = batch_shape(StepCost(), published_profiles()[CALIBRATION_PROFILE], 1)
    assert shape.best_k > shape.best_sequential_k
