"""The tuner's predictor: acceptance and goodput at Ks not measured."""

from __future__ import annotations

import pytest

from specfleet.operator import speed
from specfleet.operator.api import (
    RollbackMetric,
)
from specfleet.operator.prediction import predict, remembered, with_deeper
from specfleet.operator.stats import extrapolate
from specfleet.runtime.config import Drafting
from tests.decisions import CODE


def test_extrapolation_is_conservative() -> None:
    assert extrapolate([0.9, 0.8], 4) == pytest.approx([0.9, 0.8, 0.72, 0.648])
    assert extrapolate([0.9, 0.8, 0.7], 2) == [0.9, 0.8]


def test_deeper_positions_measured_lower_than_the_decay_guesses_lower_it() -> None:
    assert with_deeper([0.73], [0.73, 0.07, 0.05]) == [0.73, 0.07, 0.05]
    # The first position fell by a tenth since: so do the deeper ones.
    assert with_deeper([0.657], [0.73, 0.07, 0.05]) == pytest.approx([0.657, 0.063, 0.045])
    # Measured higher than the decay guesses (another mix, maybe): the guess stands.
    assert with_deeper([0.9], [0.9, 0.95, 0.95]) == pytest.approx(extrapolate([0.9], 3))
    # A position that accepted nothing says nothing about how the deeper ones moved.
    assert with_deeper([0.75, 0.0], [0.75, 0.6, 0.5]) == [0.75, 0.0]
    assert with_deeper([0.75, 0.6], [0.75, 0.0, 0.5]) == [0.75, 0.6]
    # Measured as deep or deeper, or nothing known: the measurement alone.
    assert with_deeper([0.8, 0.7], [0.9]) == [0.8, 0.7]
    assert with_deeper([0.8], None) == [0.8]
    assert remembered([0.8], [0.7, 0.6, 0.5]) == [0.8, 0.6, 0.5]


def test_parallel_drafting_makes_deep_k_cheaper() -> None:

    metric = RollbackMetric.DRAFT_ACCEPTANCE_RATE
    parallel = predict(CODE, 6, 1, metric, speed.prior(drafting=Drafting.PARALLEL))
    sequential = predict(CODE, 6, 1, metric, speed.prior(drafting=Drafting.SEQUENTIAL))
    assert parallel.goodput > sequential.goodput
    assert parallel.acceptance_rate == sequential.acceptance_rate


def test_a_cap_is_predicted_at_the_count_below_it_that_pays_best() -> None:
    # vLLM's adaptive verification: the engine drafts K and verifies the best count <= K.
    cost = speed.prior(Drafting.PARALLEL)
    metric = RollbackMetric.FIRST_POSITION_ACCEPTANCE
    for batch in (1.0, 8.0, 32.0):
        capped = predict(CODE, 7, batch, metric, cost, cap=True)
        plain = predict(CODE, 7, batch, metric, cost)
        assert capped.goodput >= plain.goodput
        best = max(
            batch
            * predict(CODE, j, batch, metric, cost).mean_length
            * 1000.0
            / speed.step_ms(cost, j, batch, 7)
            for j in range(8)
        )
        assert capped.goodput == pytest.approx(best)
    # At batch 32 the best is to verify fewer than 7, paying the drafting of 7.
    assert (
        predict(CODE, 7, 32.0, metric, cost, cap=True).goodput
        > predict(CODE, 7, 32.0, metric, cost).goodput * 1.1
    )
