"""The table of rollback metrics: a row for every metric the API takes, and an alert
branch in the chart for each (a metric added without one would never alert)."""

from __future__ import annotations

import re

from specfleet.operator.api import RollbackMetric
from specfleet.operator.rollback_metrics import ROLLBACK_METRICS
from tests.conftest import REPO

ALERTS = REPO / "charts" / "specfleet" / "templates" / "_alerts.tpl"


def test_every_rollback_metric_has_one_row() -> None:
    assert set(ROLLBACK_METRICS) == set(RollbackMetric)
    assert all(metric is kind.metric for metric, kind in ROLLBACK_METRICS.items())


def test_every_rollback_metric_has_an_alert_branch() -> None:
    """The AcceptanceBelowFloor alert picks each model's figure by the metric it exports
    (specfleet_acceptance_metric{metric=...}): one branch a metric."""
    branches = set(re.findall(r'specfleet_acceptance_metric\{metric="(\w+)"\}', ALERTS.read_text()))
    assert branches == {metric.value for metric in RollbackMetric}


def test_only_a_metric_that_depends_on_k_caps_it() -> None:
    """The floor chooses Ks only by a metric expected to fall with K."""
    conditional = [0.8, 0.6, 0.5]
    for kind in ROLLBACK_METRICS.values():
        expected = [kind.expected(conditional, k) for k in (1, 2, 3)]
        assert kind.caps_k == (len(set(expected)) > 1), kind.metric
