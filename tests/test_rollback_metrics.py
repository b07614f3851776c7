"""The table of rollback metrics: a row for every metric the API takes, and an alert
branch in the chart for each, with the row's PromQL (a metric whose branch the chart
left out would never alert)."""

from __future__ import annotations

import re

import yaml

from specfleet.operator.api import Rollback, RollbackMetric
from specfleet.operator.rollback_metrics import ROLLBACK_METRICS, WINDOW, alert_figures
from tests.conftest import REPO

RULES = REPO / "deploy" / "prometheus" / "specfleet-alerts.yaml"
VALUES = REPO / "charts" / "specfleet" / "values.yaml"


def test_every_rollback_metric_has_one_row() -> None:
    assert set(ROLLBACK_METRICS) == set(RollbackMetric)
    assert all(metric is kind.metric for metric, kind in ROLLBACK_METRICS.items())


def _lines(promql: str) -> list[str]:
    return [line.strip() for line in promql.splitlines() if line.strip()]


def test_every_rollback_metric_has_an_alert_branch() -> None:
    """The AcceptanceBelowFloor alert (as the chart renders it with its defaults: the
    rules file tests/test_alerts.py keeps current) compares each model's figure with its
    floor where the model exports its metric (specfleet_acceptance_metric{metric=...}):
    one branch a metric, with the table's PromQL over the alert's window."""
    rules = yaml.safe_load(RULES.read_text())
    (expr,) = [
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "SpecfleetAcceptanceBelowFloor"
    ]
    window = yaml.safe_load(VALUES.read_text())["alerts"]["acceptanceBelowFloor"]["window"]
    rendered = "\n".join(_lines(expr))
    for kind in ROLLBACK_METRICS.values():
        branch = [
            *_lines(kind.promql.replace(WINDOW, window)),
            "< on (namespace, model) max by (namespace, model) (specfleet_acceptance_floor)",
            "and on (namespace, model) max by (namespace, model) "
            f'(specfleet_acceptance_metric{{metric="{kind.metric.value}"}}) == 1',
        ]
        assert "\n".join(branch) in rendered, kind.metric
    branches = re.findall(r'specfleet_acceptance_metric\{metric="(\w+)"\}', rendered)
    assert sorted(branches) == sorted(metric.value for metric in RollbackMetric)


def test_the_alert_without_the_operator_judges_what_the_chart_says() -> None:
    """Where the operator exports nothing the alert judges the spec's default metric
    (`alert_figures`) against the chart's floor; the chart's values and description and
    docs/alerts.md name it first-position acceptance: a new default is said there too."""
    assert Rollback().metric is RollbackMetric.FIRST_POSITION_ACCEPTANCE
    figure = ROLLBACK_METRICS[RollbackMetric.FIRST_POSITION_ACCEPTANCE].promql
    assert alert_figures()["withoutOperator"] == figure.splitlines()


def test_only_a_metric_that_depends_on_k_caps_it() -> None:
    """The floor chooses Ks only by a metric expected to fall with K."""
    conditional = [0.8, 0.6, 0.5]
    for kind in ROLLBACK_METRICS.values():
        expected = [kind.expected(conditional, k) for k in (1, 2, 3)]
        assert kind.caps_k == (len(set(expected)) > 1), kind.metric


def _strings(value: object) -> list[str]:
    """Every string in a generated figures file's contents, however nested."""
    if isinstance(value, str):
        return [value]
    items = list(value.values()) if isinstance(value, dict) else value
    assert isinstance(items, list), value
    return [string for item in items for string in _strings(item)]


def test_the_alerts_read_vllm_only_through_the_generated_figures() -> None:
    """Each vLLM series the rendered rules read stands in a figure of `alert_figures`
    over its alert's window: a series written by hand in the chart's template (a counter
    vLLM renames, a label the PodMonitor changes) would be missed where the table is
    changed."""
    rules = yaml.safe_load(RULES.read_text())
    written = _strings(alert_figures())
    series = r"sum by \(namespace, model\) \(rate\(vllm:[^\[]*\[[^\]]*\]\)\)"
    read = 0
    for rule in (rule for group in rules["groups"] for rule in group["rules"]):
        for used in re.findall(r"[^\n]*vllm:[^\n]*", rule["expr"]):
            (figure,) = re.findall(series, used) or [used]
            window = re.search(r"\[([^\]]*)\]", figure)
            assert window is not None, (rule.get("alert"), used)
            assert figure.replace(f"[{window[1]}]", f"[{WINDOW}]") in written, (
                rule.get("alert"),
                used,
            )
            read += 1
    assert read >= 2 * len(ROLLBACK_METRICS), read
