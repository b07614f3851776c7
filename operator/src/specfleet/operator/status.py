"""Status from spec and the observed children: pure functions, no API calls."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from specfleet.operator.api import (
    ConditionType,
    Phase,
    SpeculativeModel,
    SpeculativeModelStatus,
)
from specfleet.operator.capacity import capacity
from specfleet.operator.children import LEADER_WORKER_SET, Track
from specfleet.operator.conditions import set_condition
from specfleet.operator.render import CONFIG_HASH_ANNOTATION, TRACK_LABEL, scale_selector
from specfleet.operator.runtime_container import spans_nodes
from specfleet.operator.track_plan import plan

# The characters of any one message status holds (a condition's, a decision's...): a
# config change's words hold the old and new runtime.args, up to 64 KB each, and a dozen
# decisions of those pass etcd's limit on an object. The full text is logged.
MESSAGE_LIMIT = 1000
MESSAGE_FIELDS = ("message", "reason")  # a decision's words are its reason


@dataclass(frozen=True)
class ObservedChildren:
    """What the operator read back of a model's children (API objects as dicts)."""

    stable: dict[str, Any] | None = None
    canary: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    # The workers of LeaderWorkerSet groups whose leaders are in `pods` (`owned_workers`).
    workers: list[dict[str, Any]] = field(default_factory=list)
    starts: list[PodStart] = field(default_factory=list)  # of the pods, as observe_start saw


@dataclass(frozen=True)
class ReconcileFailure:
    """Why the operator could not put the model's children in place: its config does
    not render (`RenderFailed`), or the API server refused a child (`ChildrenRefused`,
    with the server's own message)."""

    reason: str
    message: str


def pod_ready(pod: dict[str, Any]) -> bool:
    """The pod's Ready condition is True (the kubelet's readiness verdict)."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _ready(deployment: dict[str, Any] | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)


def _rolled_out(deployment: dict[str, Any] | None, replicas: int) -> bool:
    if deployment is None:
        return False
    status = deployment.get("status") or {}
    generation = deployment["metadata"].get("generation", 0)
    if deployment.get("kind") == LEADER_WORKER_SET.kind:
        # LeaderWorkerSet's status has no observedGeneration: its leaders say whether the
        # groups run the rendered template (_current_leaders).
        observed = not any(
            c.get("type") == "UpdateInProgress" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
    else:
        observed = status.get("observedGeneration", 0) >= generation
    return (
        observed
        and int(status.get("updatedReplicas") or 0) >= replicas
        and int(status.get("readyReplicas") or 0) >= replicas
        and int(status.get("replicas") or 0) == replicas
    )


def _current_leaders(
    model: SpeculativeModel, children: ObservedChildren, track: Track, replicas: int
) -> bool:
    """Where replicas span nodes: exactly `replicas` Ready leaders of the track, each of
    the rendered config (a LeaderWorkerSet's counts lag a template just applied)."""
    if not spans_nodes(model.spec):
        return True
    expected = plan(model.spec, model.status)[track].config_hash
    leaders = [
        pod
        for pod in children.pods
        if pod["metadata"].get("labels", {}).get(TRACK_LABEL) == track
        and not pod["metadata"].get("deletionTimestamp")
    ]
    return len(leaders) == replicas and all(
        pod_ready(pod)
        and (pod["metadata"].get("annotations") or {}).get(CONFIG_HASH_ANNOTATION) == expected
        for pod in leaders
    )


# Waiting reasons that mean the pod will not start without a change from someone.
STUCK_WAITING_REASONS = {
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ErrImageNeverPull",
    "ImagePullBackOff",
    "InvalidImageName",
}


def runtime_failure(pods: list[dict[str, Any]]) -> str | None:
    """The first pod whose runtime failed, with its one-line reason: the termination
    message of a container that exited with an error (e.g. a failed preflight), or
    why it cannot start. A past exit (`lastState`) of a container that now runs and is
    Ready is history, not a failure."""
    for pod in pods:
        name = pod["metadata"]["name"]
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            state = container.get("state") or {}
            states = [state]
            if not (state.get("running") is not None and container.get("ready")):
                states.append(container.get("lastState") or {})
            for seen in states:
                terminated = seen.get("terminated")
                if terminated and terminated.get("exitCode", 0) != 0:
                    message = (terminated.get("message") or "").strip().splitlines()
                    reason = message[-1] if message else terminated.get("reason", "Error")
                    return f"pod {name}: {reason} (exit code {terminated['exitCode']})"
            waiting = state.get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING_REASONS:
                return f"pod {name}: {waiting['reason']}: {waiting.get('message', '')}".strip()
    return None


def api_time(text: Any) -> datetime | None:
    """A timestamp of an API object (RFC 3339, 'Z' for UTC), or None when absent."""
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None


@dataclass(frozen=True)
class PodStart:
    """What the operator saw of a pod's latest start. `start`: when its newest container
    started (None before any did). `first_ready_seen`: the operator saw the pod before
    this start was Ready (not Ready yet, or not started), so the Ready it sees next is the
    start's first, not a readiness flap's. `seconds`: from the start to that first Ready,
    taken once; from the pod's creation for its first start (a rolled pod pays its
    scheduling and image pull too)."""

    start: str | None
    first_ready_seen: bool
    seconds: float | None = None


def observe_start(seen: PodStart | None, pod: dict[str, Any]) -> PodStart:
    """`seen` (the pod's start as last seen, None for a pod not seen before) updated from
    `pod` now. A start first seen already Ready is never measured: its Ready transition
    may be a flap's, hours after the start (as after an operator restart)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    running = [((c.get("state") or {}).get("running") or {}) for c in statuses]
    start = max((str(r["startedAt"]) for r in running if r.get("startedAt")), default=None)
    ready = pod_ready(pod)
    if seen is None or seen.start != start:
        seen = PodStart(start, first_ready_seen=seen is not None or not ready)
    if not (ready and seen.first_ready_seen and seen.seconds is None and start is not None):
        return seen
    restarted = any(c.get("restartCount") for c in statuses)
    origin = api_time(start if restarted else pod["metadata"].get("creationTimestamp"))
    ready_at = next(
        api_time(c.get("lastTransitionTime"))
        for c in pod["status"]["conditions"]
        if c.get("type") == "Ready"
    )
    if origin is None or ready_at is None:
        return seen
    return replace(seen, seconds=(ready_at - origin).total_seconds())


def startup_seconds(starts: Iterable[PodStart]) -> float | None:
    """Median seconds from start to first Ready of the pods' measured starts, or None
    when none is measured."""
    seconds = [start.seconds for start in starts if start.seconds is not None]
    return statistics.median(seconds) if seconds else None


def unschedulable(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("reason") == "Unschedulable"
            ):
                return f"pod {pod['metadata']['name']}: {condition.get('message', '')}"
    return None


def summarize(
    model: SpeculativeModel,
    children: ObservedChildren,
    now: datetime,
    reconcile_failure: ReconcileFailure | None = None,
) -> SpeculativeModelStatus:
    """Replicas, phase and the Ready / Progressing / Degraded conditions."""
    status = model.status
    generation = model.metadata.generation
    replicas = model.spec.replicas
    canary = status.canary_run
    stable_done = _rolled_out(children.stable, replicas) and _current_leaders(
        model, children, "stable", replicas
    )
    canary_done = canary is None or (
        _rolled_out(children.canary, 1) and _current_leaders(model, children, "canary", 1)
    )
    runtime_failed = runtime_failure(children.pods + children.workers)
    pending = unschedulable(children.pods + children.workers)
    conditions = list(status.conditions)

    ready = stable_done and _ready(children.stable) >= replicas
    conditions = set_condition(
        conditions,
        ConditionType.READY,
        "True" if ready else "False",
        "Available" if ready else "RollingOut",
        f"{_ready(children.stable)}/{replicas} stable pods ready",
        now,
        generation,
    )
    progressing = not (stable_done and canary_done)
    conditions = set_condition(
        conditions,
        ConditionType.PROGRESSING,
        "True" if progressing else "False",
        ("Unschedulable" if pending else "RollingOut") if progressing else "Settled",
        pending or ("rolling out the rendered pods" if progressing else "pods match the spec"),
        now,
        generation,
    )
    off = status.speculation.off
    degraded = True
    if reconcile_failure:
        degraded_reason, degraded_message = reconcile_failure.reason, reconcile_failure.message
    elif runtime_failed:
        degraded_reason, degraded_message = "RuntimeFailed", runtime_failed
    elif off is not None and not status.speculation.plain_decoding_chosen:
        degraded_reason, degraded_message = "SpeculationDisabled", off.message
    else:
        degraded, degraded_reason, degraded_message = False, "AsExpected", "no failures"
    conditions = set_condition(
        conditions,
        ConditionType.DEGRADED,
        "True" if degraded else "False",
        degraded_reason,
        degraded_message,
        now,
        generation,
    )

    if degraded:
        phase = Phase.DEGRADED
    elif canary is not None:
        phase = Phase.CANARY
    elif ready:
        phase = Phase.READY
    else:
        phase = Phase.PROGRESSING if children.stable else Phase.PENDING

    ready_pods = sum(1 for pod in children.pods if pod_ready(pod))
    # While no pod's start is measured (none started yet, scaled to 0, or all first seen
    # Ready, as after an operator restart), the last measure stays.
    startup = startup_seconds(children.starts)
    return status.model_copy(
        update={
            "observed_generation": generation,
            "phase": phase,
            "replicas": int(((children.stable or {}).get("status") or {}).get("replicas") or 0),
            "ready_replicas": ready_pods,
            "selector": scale_selector(model),
            "startup_seconds": startup if startup is not None else status.startup_seconds,
            "capacity": capacity(model.spec),
            "conditions": conditions,
        }
    )


def bounded(status: Any, cut: list[str]) -> Any:
    """`status` (as JSON) with each message longer than MESSAGE_LIMIT cut to it; the full
    text of each is appended to `cut`."""
    if isinstance(status, list):
        return [bounded(item, cut) for item in status]
    if not isinstance(status, dict):
        return status
    result = {}
    for key, value in status.items():
        if key in MESSAGE_FIELDS and isinstance(value, str) and len(value) > MESSAGE_LIMIT:
            cut.append(value)
            value = value[: MESSAGE_LIMIT - 1] + "…"
        result[key] = bounded(value, cut)
    return result
