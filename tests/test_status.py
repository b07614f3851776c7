"""Status from spec and children: conditions, phase, failures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from specfleet.operator.api import ConditionType, Phase, SpeculativeModel, SpeculativeModelStatus
from specfleet.operator.status import (
    ObservedChildren,
    ReconcileFailure,
    runtime_failure,
    summarize,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def model(manifest: dict[str, Any], **status: Any) -> SpeculativeModel:
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": "ns", "generation": 4}}
    body["status"] = status
    return SpeculativeModel.model_validate(body)


def deployment(replicas: int, ready: int, generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
        },
    }


def pod(name: str, ready: bool = True, **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "runtime", **container}],
        },
    }


def test_ready_when_the_stable_track_is_rolled_out(peagle_manifest: dict[str, Any]) -> None:
    m = model(peagle_manifest, speculation={"tokens": 3})
    children = ObservedChildren(
        stable=deployment(2, 2), canary=deployment(0, 0), pods=[pod("a"), pod("b")]
    )
    status = summarize(m, children, T0)
    conditions = {c.type: c for c in status.conditions}
    assert conditions[ConditionType.READY].status == "True"
    assert conditions[ConditionType.PROGRESSING].status == "False"
    assert conditions[ConditionType.DEGRADED].status == "False"
    assert status.phase is Phase.READY
    assert status.observed_generation == 4
    assert status.ready_replicas == 2


def test_transition_time_moves_only_on_a_change(peagle_manifest: dict[str, Any]) -> None:
    m = model(peagle_manifest, speculation={"tokens": 3})
    rolling = summarize(m, ObservedChildren(stable=deployment(2, 1)), T0)
    still_rolling = summarize(
        m.model_copy(update={"status": rolling}),
        ObservedChildren(stable=deployment(2, 1)),
        T0 + timedelta(minutes=1),
    )
    ready = summarize(
        m.model_copy(update={"status": still_rolling}),
        ObservedChildren(stable=deployment(2, 2)),
        T0 + timedelta(minutes=2),
    )

    def ready_since(status: SpeculativeModelStatus) -> datetime:
        return next(
            c for c in status.conditions if c.type is ConditionType.READY
        ).last_transition_time

    assert ready_since(rolling) == ready_since(still_rolling) == T0
    assert ready_since(ready) == T0 + timedelta(minutes=2)


def test_preflight_failure_degrades_with_the_runtimes_reason(
    peagle_manifest: dict[str, Any],
) -> None:
    crashed = pod(
        "llama-8b-1",
        ready=False,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={
            "terminated": {
                "exitCode": 2,
                "message": "preflight: draft vocab_size 32000 does not match target 128256",
            }
        },
    )
    m = model(peagle_manifest, speculation={"tokens": 3})
    status = summarize(m, ObservedChildren(stable=deployment(2, 0), pods=[crashed]), T0)
    degraded = next(c for c in status.conditions if c.type is ConditionType.DEGRADED)
    assert degraded.status == "True" and degraded.reason == "RuntimeFailed"
    assert "draft vocab_size 32000 does not match target 128256" in degraded.message
    assert status.phase is Phase.DEGRADED


def test_missing_secret_is_a_failure_too() -> None:
    stuck = pod(
        "p",
        ready=False,
        state={
            "waiting": {
                "reason": "CreateContainerConfigError",
                "message": 'secret "hf-token" not found',
            }
        },
    )
    assert (
        runtime_failure([stuck]) == 'pod p: CreateContainerConfigError: secret "hf-token" not found'
    )


def test_canary_phase_while_a_candidate_runs(peagle_manifest: dict[str, Any]) -> None:
    trial = {"tokens": 5, "startedAt": "2026-01-01T00:00:00Z", "stableReplicas": 2}
    m = model(peagle_manifest, speculation={"tokens": 3, "trial": trial})
    status = summarize(m, ObservedChildren(stable=deployment(2, 2), canary=deployment(1, 1)), T0)
    assert status.phase is Phase.CANARY
    # The scale subresource counts what spec.replicas counts: the stable pods only.
    assert status.replicas == 2
    assert status.selector == "specfleet.io/model=llama-8b,specfleet.io/track=stable"


def test_scale_status_reports_the_stable_pods_that_exist(peagle_manifest: dict[str, Any]) -> None:
    m = model(peagle_manifest)
    assert summarize(m, ObservedChildren(), T0).replicas == 0  # no Deployment yet
    surging = deployment(3, 2)  # a rollout's surge pod exists too
    assert summarize(m, ObservedChildren(stable=surging), T0).replicas == 3


def test_a_reconcile_failure_degrades_the_model_with_its_message(
    peagle_manifest: dict[str, Any],
) -> None:
    failure = ReconcileFailure("ChildrenRefused", 'env[0].name: Invalid value: "A=B"')
    m = model(peagle_manifest)
    status = summarize(m, ObservedChildren(stable=deployment(1, 1)), T0, failure)
    degraded = next(c for c in status.conditions if c.type is ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == ("True", "ChildrenRefused")
    assert "A=B" in degraded.message and status.phase is Phase.DEGRADED
    healthy = summarize(m, ObservedChildren(stable=deployment(1, 1)), T0)
    assert healthy.phase is not Phase.DEGRADED


def test_speculation_off_degrades_after_a_rollback_but_not_when_plain_is_faster(
    peagle_manifest: dict[str, Any],
) -> None:
    children = ObservedChildren(stable=deployment(2, 2), canary=deployment(0, 0))
    at = "2026-01-01T00:00:00Z"
    off = {"reason": "NoKClearsFloor", "message": "stale", "reprobeAt": at}
    rolled_back = model(peagle_manifest, speculation={"tokens": 3, "off": off})
    assert summarize(rolled_back, children, T0).phase is Phase.DEGRADED
    faster = model(
        peagle_manifest,
        speculation={
            "tokens": 3,
            "off": {
                "reason": "NoKPays",
                "message": "plain decoding is predicted +20% over the fastest K=1",
                "acceptance": [0.8, 0.6],
                "reprobeAt": at,
            },
        },
    )
    status = summarize(faster, children, T0)
    assert status.phase is Phase.READY
    degraded = next(c for c in status.conditions if c.type is ConditionType.DEGRADED)
    assert degraded.status == "False"


def test_a_past_crash_of_a_container_that_now_runs_ready_is_no_failure() -> None:
    """One OOM kill last week must not keep a healthy model Degraded forever; a container
    that crashed and is not Ready again still counts."""
    last_crash = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}

    def runtime(ready: bool) -> dict[str, Any]:
        body = pod("p", ready=ready, state={"running": {}}, lastState=last_crash)
        body["status"]["containerStatuses"][0]["ready"] = ready
        return body

    assert runtime_failure([runtime(ready=True)]) is None
    assert runtime_failure([runtime(ready=False)]) == "pod p: OOMKilled (exit code 137)"
