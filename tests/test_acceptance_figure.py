"""One acceptance figure: status.acceptance.judged (kubectl's ACCEPT, the dashboard, the
plot) is the rollback metric the floor judges, and the operator exports each model's
floor and metric so the alert compares each model with its own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from specfleet.operator import observability
from specfleet.operator.api import RollbackMetric, SpeculativeModelStatus
from specfleet.operator.observations import Observation
from specfleet.operator.tuner import decide
from tests.decisions import DAR, T0, make_spec, window

CODE = [0.83, 0.66]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({}, 0.83),  # FirstPositionAcceptance (the default): position 0
        (DAR, (0.83 + 0.83 * 0.66 + 0.83 * 0.66 * 0.66) / 3),  # accepted / drafted at K=3
    ],
)
def test_judged_is_the_rollback_metric(policy: dict[str, str], expected: float) -> None:
    spec = make_spec(rollback=policy)
    decided = decide(
        spec,
        SpeculativeModelStatus(),
        Observation(stable=window(CODE, 3), canary=None),
        T0 + timedelta(1),
    )
    acceptance = decided.status.acceptance
    assert acceptance.conclusive
    assert acceptance.judged == pytest.approx(expected, abs=1e-4)
    assert acceptance.judged is not None and acceptance.lower_bound is not None
    assert acceptance.lower_bound <= acceptance.judged


def test_an_inconclusive_window_still_shows_the_judged_figure() -> None:
    spec = make_spec(tuning={"minDraftTokens": 10_000_000})
    decided = decide(
        spec,
        SpeculativeModelStatus(),
        Observation(stable=window(CODE, 3), canary=None),
        T0 + timedelta(1),
    )
    assert not decided.status.acceptance.conclusive
    assert decided.status.acceptance.judged == pytest.approx(0.83, abs=1e-4)


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_each_models_metric_is_exported_and_forgotten() -> None:
    observability.export_acceptance_metric("ml", "fig", RollbackMetric.DRAFT_ACCEPTANCE_RATE)
    labels = {"namespace": "ml", "model": "fig"}
    assert sample("specfleet_acceptance_metric", **labels, metric="DraftAcceptanceRate") == 1
    assert sample("specfleet_acceptance_metric", **labels, metric="FirstPositionAcceptance") == 0
    observability.export_acceptance_metric("ml", "fig", RollbackMetric.RELATIVE_TO_BASELINE)
    assert sample("specfleet_acceptance_metric", **labels, metric="DraftAcceptanceRate") == 0
    assert sample("specfleet_acceptance_metric", **labels, metric="RelativeToBaseline") == 1
    observability.ACCEPTANCE_JUDGED.labels("ml", "fig").set(0.8)
    observability.forget_model("ml", "fig")
    for metric in RollbackMetric:
        assert sample("specfleet_acceptance_metric", **labels, metric=metric.value) is None
    assert sample("specfleet_acceptance_judged", **labels) is None
