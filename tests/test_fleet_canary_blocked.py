"""Issue 41, item 5: a config trial whose canary pod is never created (the namespace's
GPU quota used up, an admission webhook's refusal, a missing ServiceAccount). No pod
exists, so none is Pending: the operator reads the canary Deployment's ReplicaFailure
condition (FailedCreate), as cached from its watch, and the trial goes on in place or
waits saying why; it is never rejected for Timeout as if it had run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from specfleet.operator import render, tuner
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.fleet import Fleet
from specfleet.operator.status import ObservedChildren
from tests.fake_cluster import FakeCluster
from tests.test_fleet import KEY, settle

QUOTA = (
    'pods "llama-canary-5d8f9c7b6-x2k4q" is forbidden: exceeded quota: gpu, requested: '
    "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: "
    "requests.nvidia.com/gpu=8"
)


class ClockedEvaluator(Evaluator):
    """The operator's own evaluation (the children read, tuner.decide) at the test's time;
    no pod exists to scrape."""

    def __init__(self) -> None:
        super().__init__()
        self.now = datetime.now(UTC)

    async def evaluate(
        self, model: SpeculativeModel, children: ObservedChildren, now: datetime
    ) -> tuner.Decided:
        return await super().evaluate(model, children, self.now)


def _evaluate_at(cluster: FakeCluster, fleet: Fleet, at: datetime) -> None:
    evaluator = fleet.evaluator
    assert isinstance(evaluator, ClockedEvaluator)
    evaluator.now = at
    fleet.cache.models[KEY].next_evaluation = 0.0  # an evaluation is due
    settle(cluster, fleet)


def _quota_blocked_trial(cluster: FakeCluster, manifest: dict[str, Any]) -> tuple[Fleet, datetime]:
    """A model running, then a commit with a new draft head: its config trial's canary
    Deployment (1 replica) cannot create its pod, as the Deployment controller reports."""
    fleet = Fleet(cluster, ClockedEvaluator())  # type: ignore[arg-type]
    manifest["metadata"]["name"] = "llama"
    cluster.create_model(manifest)
    settle(cluster, fleet)
    cluster.edit_spec("llama", lambda spec: spec["draft"].update(model="team/retrained-head"))
    settle(cluster, fleet)
    assert [e["reason"] for e in cluster.events] == ["StartConfigTrial"]
    canary = cluster.objects[("Deployment", "team", "llama-canary")]
    assert canary["spec"]["replicas"] == 1
    blocked = datetime.now(UTC)
    stamp = blocked.isoformat().replace("+00:00", "Z")
    cluster.set_child_status(
        "Deployment",
        "llama-canary",
        {
            "observedGeneration": canary["metadata"]["generation"],
            "replicas": 0,
            "conditions": [
                {
                    "type": "Available",
                    "status": "False",
                    "reason": "MinimumReplicasUnavailable",
                    "message": "Deployment does not have minimum availability.",
                    "lastTransitionTime": stamp,
                    "lastUpdateTime": stamp,
                },
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": QUOTA,
                    "lastTransitionTime": stamp,
                    "lastUpdateTime": stamp,
                },
            ],
        },
    )
    return fleet, blocked


def _condition(cluster: FakeCluster, kind: str) -> dict[str, Any]:
    conditions = cluster.model("llama")["status"]["conditions"]
    return next(c for c in conditions if c["type"] == kind)


def test_a_canary_whose_pod_is_never_created_falls_back_in_place(
    cluster: FakeCluster, peagle_manifest: dict[str, Any]
) -> None:
    fleet, blocked = _quota_blocked_trial(cluster, peagle_manifest)
    # Before canaryPendingTimeout (5m): the trial waits, saying why, and has not started.
    _evaluate_at(cluster, fleet, blocked + timedelta(minutes=2))
    waiting = _condition(cluster, "ConfigRejected")
    assert waiting["reason"] == "CanaryNotRunning" and QUOTA in waiting["message"]
    # Past it: the trial goes on in place, as for a canary pod Pending with no node.
    _evaluate_at(cluster, fleet, blocked + timedelta(minutes=6))
    reasons = [e["reason"] for e in cluster.events]
    assert reasons == ["StartConfigTrial", "InPlaceFallback"], reasons
    config = cluster.model("llama")["status"]["config"]
    assert config["trial"]["inPlace"]["switched"] is False and "rejected" not in config
    assert cluster.objects[("Deployment", "team", "llama-canary")]["spec"]["replicas"] == 0
    # The trial in place starts at the fall-back: not rejected for Timeout 2h after commit.
    _evaluate_at(cluster, fleet, blocked + timedelta(hours=2, minutes=3))
    assert "rejected" not in cluster.model("llama")["status"]["config"]


def test_a_canary_whose_pod_is_never_created_is_never_rejected_for_timeout(
    cluster: FakeCluster, peagle_manifest: dict[str, Any]
) -> None:
    """canaryPendingTimeout past rollout.timeout (2h): no fall-back before the timeout,
    and a trial whose canary never ran is not rejected by it; it waits, saying why."""
    peagle_manifest["spec"].setdefault("tuning", {})["canaryPendingTimeout"] = "24h"
    fleet, blocked = _quota_blocked_trial(cluster, peagle_manifest)
    for hours in (1, 2, 3):
        _evaluate_at(cluster, fleet, blocked + timedelta(hours=hours, minutes=1))
    config = cluster.model("llama")["status"]["config"]
    assert "rejected" not in config and "inPlace" not in config["trial"]
    assert [e["reason"] for e in cluster.events] == ["StartConfigTrial"]
    waiting = _condition(cluster, "ConfigRejected")
    assert waiting["status"] == "False" and waiting["reason"] == "CanaryNotRunning"
    assert QUOTA in waiting["message"]
    # The quota frees: the pod is created. The trial is on, its clock from now.
    cluster.set_child_status("Deployment", "llama-canary", {"replicas": 1})
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "llama-canary-5d8f9c7b6-x2k4q",
                "namespace": "team",
                "labels": {
                    "app.kubernetes.io/managed-by": "specfleet",
                    render.MODEL_LABEL: "llama",
                    render.TRACK_LABEL: "canary",
                },
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "status": {"phase": "Running"},
        }
    )
    _evaluate_at(cluster, fleet, blocked + timedelta(hours=3, minutes=10))
    assert "rejected" not in cluster.model("llama")["status"]["config"]
    assert _condition(cluster, "ConfigRejected")["reason"] == "Trying"
