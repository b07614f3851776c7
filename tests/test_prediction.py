"""The tuner's predictor: acceptance and goodput at Ks not measured."""

from __future__ import annotations

import pytest

from specfleet.operator import speed
from specfleet.operator.api import (
    RollbackMetric,
)
from specfleet.operator.prediction import predict
from specfleet.operator.stats import extrapolate
from specfleet.runtime.config import Drafting
from tests.decisions import CODE


def test_extrapolation_is_conservative() -> None:
    assert extrapolate([0.9, 0.8], 4) == pytest.approx([0.9, 0.8, 0.72, 0.648])
    assert extrapolate([0.9, 0.8, 0.7], 2) == [0.9, 0.8]


def test_parallel_drafting_makes_deep_k_cheaper() -> None:

    metric = RollbackMetric.DRAFT_ACCEPTANCE_RATE
    parallel = predict(CODE, 6, 1, metric, speed.prior(drafting=Drafting.PARALLEL))
    sequential = predict(CODE, 6, 1, metric, speed.prior(drafting=Drafting.SEQUENTIAL))
    assert parallel.goodput > sequential.goodput
    assert parallel.acceptance_rate == sequential.acceptance_rate
