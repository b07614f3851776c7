"""docs/reference.md: conditions and reasons, the operator's metrics and the alerts come
from the code (`specfleet crds` writes it; test_crd fails when it is stale). Here: the
reasons are found where the code sets them, and a reason without words fails."""

from __future__ import annotations

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from specfleet.operator import observability, reference
from specfleet.operator.api import ConditionType
from tests.conftest import REPO
from tests.test_chart import one, rendered


def test_the_reasons_are_read_from_where_the_code_sets_them() -> None:
    found = reference.condition_reasons()
    # Literals, a local assigned in branches, a dataclass field, a module constant.
    assert {"RuntimeFailed", "SpeculationDisabled", "RenderFailed", "ChildrenRefused"} <= found[
        ConditionType.DEGRADED
    ]
    assert "Unschedulable" in found[ConditionType.PROGRESSING]
    assert {"TooFewDraftTokens", "PrometheusUnavailable", "Collecting"} <= found[
        ConditionType.METRICS_AVAILABLE
    ]
    # A parameter: the reasons its callers pass.
    assert {"AboveFloor", "SpecChanged"} <= found[ConditionType.ACCEPTANCE_BELOW_FLOOR]


def test_a_reason_set_but_not_described_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = {kind: dict(words) for kind, words in reference.REASONS.items()}
    del reasons[ConditionType.DEGRADED]["RuntimeFailed"]
    reasons[ConditionType.READY]["Gone"] = "a reason the code never sets"
    monkeypatch.setattr(reference, "REASONS", reasons)
    with pytest.raises(ValueError) as raised:
        reference.markdown(REPO)
    assert "Degraded: reason RuntimeFailed is set but not described" in str(raised.value)
    assert "Ready: reason Gone is described but never set" in str(raised.value)


def test_every_metric_and_alert_is_listed() -> None:
    page = reference.markdown(REPO)
    for collector in vars(observability).values():
        if isinstance(collector, MetricWrapperBase):
            assert f"| `{collector._name}" in page
    alerts = yaml.safe_load((REPO / reference.ALERTS_FILE).read_text())["groups"][0]["rules"]
    for rule in alerts:
        assert f"[`{rule['alert']}`](alerts.md#{rule['alert'].lower()})" in page


def test_the_monitor_said_to_scrape_the_operator_selects_the_operator_pods() -> None:
    """The chart's monitors, rendered: the one the page says scrapes the operator selects
    the operator's pods (through its metrics Service); the PodMonitor selects the others."""
    documents = rendered(set_json=["serviceMonitor.enabled=true", "podMonitor.enabled=true"])
    operator = one(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(documents, "Service")
    service_monitor = one(documents, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert service_monitor.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= operator.items()
    pod_monitor = one(documents, "PodMonitor")["spec"]["selector"]["matchLabels"]
    assert not pod_monitor.items() <= operator.items()
    page = " ".join(reference.markdown(REPO).split())
    assert "the chart's ServiceMonitor, `serviceMonitor.enabled=true`, scrapes it" in page
    assert "PodMonitor scrapes vLLM's metrics on the inference pods" in page
