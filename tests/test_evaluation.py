"""Which pods an evaluation reads: ready pods running the configuration status asks for."""

from __future__ import annotations

from typing import Any

from specfleet.operator import render
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.evaluation import canary_pending_since, scrape_targets
from specfleet.operator.status import ObservedChildren


def _model(manifest: dict[str, Any], **speculation: Any) -> SpeculativeModel:
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": "ns", "uid": "u"}}
    body["status"] = {"speculation": speculation}
    return SpeculativeModel.model_validate(body)


def _pod(name: str, model: SpeculativeModel, track: render.Track, **status: Any) -> dict[str, Any]:
    template = render.deployment(model, track)["spec"]["template"]
    return {
        "metadata": {
            "name": name,
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"]["annotations"],
        },
        "status": {
            "podIP": f"127.0.0.{len(name)}",
            "conditions": [{"type": "Ready", "status": "True"}],
            **status,
        },
    }


def test_pods_of_an_older_k_are_not_read(peagle_manifest: dict[str, Any]) -> None:
    before = _model(peagle_manifest, tokens=3)
    after = _model(peagle_manifest, tokens=1)
    pods = [_pod("old", before, "stable"), _pod("new-pod", after, "stable")]
    targets = scrape_targets(after, ObservedChildren(pods=pods))
    assert [t.pod for t in targets] == ["new-pod"]
    assert targets[0].url == "http://127.0.0.7:8000/metrics"
    assert targets[0].track == "stable"


def test_unready_and_terminating_pods_are_not_read(peagle_manifest: dict[str, Any]) -> None:
    model = _model(peagle_manifest, tokens=3)
    unready = _pod("a", model, "stable", conditions=[{"type": "Ready", "status": "False"}])
    leaving = _pod("b", model, "stable")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    assert scrape_targets(model, ObservedChildren(pods=[unready, leaving])) == []


def test_canary_pods_are_read_as_canary(peagle_manifest: dict[str, Any]) -> None:
    model = _model(peagle_manifest, tokens=3, candidateTokens=5)
    targets = scrape_targets(model, ObservedChildren(pods=[_pod("c", model, "canary")]))
    assert [(t.pod, t.track) for t in targets] == [("c", "canary")]


def test_an_unschedulable_canary_reports_since_when(peagle_manifest: dict[str, Any]) -> None:
    model = _model(peagle_manifest, tokens=3, candidateTokens=5)
    pending = _pod(
        "c",
        model,
        "canary",
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    pending["metadata"]["creationTimestamp"] = "2026-11-29T12:00:00Z"
    assert canary_pending_since(ObservedChildren(pods=[pending])) == 1795953600.0
    assert canary_pending_since(ObservedChildren(pods=[_pod("s", model, "stable")])) is None
