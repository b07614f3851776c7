"""What an evaluation reads of a model's children before it scrapes them: the pods that
run the configuration status asks for, where their counters are served, and what the
pods' own state tells the tuner (a runtime that failed, a canary waiting for a node).
Pure, no I/O: the scrape is `metrics`', the evaluation that joins them `evaluation`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specfleet.operator import render, track_plan
from specfleet.operator.api import HotSchedule, SpeculativeModel
from specfleet.operator.children import TRACKS, Track
from specfleet.operator.observations import CanaryPending, HotTrack, ScrapeTarget
from specfleet.operator.status import ObservedChildren, api_time, pod_ready, runtime_failure
from specfleet.operator.track_plan import TrackPlans

CurrentPods = dict[Track, list[dict[str, Any]]]


def current_pods(children: ObservedChildren, plans: TrackPlans) -> CurrentPods:
    """Each track's pods that run the configuration the model's status asks for (their
    config hash is the one `plans` has). During a rollout the old pods still serve with
    the old K; their acceptance says nothing about the new K."""
    current: CurrentPods = {track: [] for track in TRACKS}
    for pod in children.pods:
        track = pod["metadata"].get("labels", {}).get(render.TRACK_LABEL, "stable")
        annotations = pod["metadata"].get("annotations") or {}
        config = annotations.get(render.CONFIG_HASH_ANNOTATION)
        if track in current and config == plans[track].config_hash:
            current[track].append(pod)
    return current


def url_host(ip: str) -> str:
    """A pod IP as a URL's host: an IPv6 address in brackets (RFC 3986), where its colons
    would otherwise read as a port."""
    return f"[{ip}]" if ":" in ip else ip


def scrape_targets(plans: TrackPlans, current: CurrentPods) -> list[ScrapeTarget]:
    """Every ready pod of the current config (`current_pods`): old pods are left out
    rather than blamed on the new K."""
    targets = []
    for track, pods in current.items():
        # The port of the config the track's pods run (the running one on trial).
        port = plans[track].spec.runtime.port
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or not pod_ready(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            url = f"http://{url_host(ip)}:{port}/metrics"
            targets.append(ScrapeTarget(pod["metadata"]["name"], track, url))
    return targets


def runtime_failures(current: CurrentPods) -> dict[str, str]:
    """Per track, why the runtime of a pod running the track's rendered config failed (a
    config on trial that cannot start is rejected, not waited for)."""
    failures: dict[str, str] = {}
    for track, pods in current.items():
        failure = runtime_failure(pods)
        if failure is not None:
            failures[track] = failure
    return failures


def _pending_canary(children: ObservedChildren) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A canary pod waiting for a node, and its PodScheduled condition (the scheduler's
    reason in its message): a pod of a Deployment's, or any pod of a canary group, whose
    leader runs only once its workers have nodes too."""
    for pod in children.pods + children.workers:
        labels = pod["metadata"].get("labels", {})
        status = pod.get("status") or {}
        if labels.get(render.TRACK_LABEL) != "canary" or status.get("phase") != "Pending":
            continue
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return pod, condition
    return None


def _canary_not_created(children: ObservedChildren) -> dict[str, Any] | None:
    """The canary Deployment's ReplicaFailure condition (which the Deployment controller
    copies from its ReplicaSet: FailedCreate for a namespace's quota used up, an admission
    webhook's refusal, a missing ServiceAccount) while no canary pod exists: its pod is
    never created, so no pod is Pending either. Read only from a status that has seen the
    Deployment's current spec (observedGeneration)."""
    canary = children.canary
    if canary is None:
        return None
    if any(
        pod["metadata"].get("labels", {}).get(render.TRACK_LABEL) == "canary"
        for pod in children.pods
    ):
        return None
    status = canary.get("status") or {}
    generation = canary["metadata"].get("generation")
    if generation is not None and status.get("observedGeneration") != generation:
        return None
    for condition in status.get("conditions") or []:
        failing = condition.get("type") == "ReplicaFailure" and condition.get("status") == "True"
        if failing and (condition.get("lastTransitionTime") or condition.get("lastUpdateTime")):
            return dict(condition)
    return None


def canary_pending(children: ObservedChildren) -> CanaryPending | None:
    """A canary pod waiting for a node (the scheduler found no GPU), or one its Deployment
    has failed to create (`_canary_not_created`): either way the canary does not run, and
    a trial waits for it or goes on in place. Its reason: what the scheduler said of the
    Pending pod (e.g. '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.'), or why
    its pod could not be created (e.g. 'FailedCreate: pods "m-canary-..." is forbidden:
    exceeded quota: ...')."""
    pending = _pending_canary(children)
    if pending is not None:
        pod, scheduled = pending
        created = api_time(pod["metadata"].get("creationTimestamp"))
        reason = scheduled.get("message") or scheduled.get("reason")
        return CanaryPending(created.timestamp(), reason) if created else None
    failure = _canary_not_created(children)
    if failure is None:
        return None
    since = api_time(failure.get("lastTransitionTime") or failure.get("lastUpdateTime"))
    cause, message = failure.get("reason") or "ReplicaFailure", failure.get("message") or ""
    reason = f"its pod is not created ({cause}): {message}" if message else cause
    return CanaryPending(since.timestamp(), reason) if since else None


def _hot_tracks(hot: HotSchedule | None, plans: TrackPlans) -> dict[Track, HotTrack] | None:
    """Where the stable pods take K hot (`hot`, status' schedule handed to them): the
    generation they must run for their windows to count at status' K, and their ceiling."""
    if hot is None or not plans.stable.hot:
        return None
    return {"stable": HotTrack(hot.generation, plans.stable.template_tokens)}


@dataclass(frozen=True)
class PodReading:
    """One evaluation's reading of a model's children, worked out once: what each track
    runs (`plans`), the scrape targets of its pods of the current config, the K each
    track's windows count for and where the stable pods take it hot, and what the pods'
    state says (`observations.Observation` carries the last two)."""

    plans: TrackPlans
    targets: list[ScrapeTarget]
    tokens: dict[Track, int]
    hot_tracks: dict[Track, HotTrack] | None
    canary_pending: CanaryPending | None
    runtime_failures: dict[str, str]


def read(model: SpeculativeModel, children: ObservedChildren) -> PodReading:
    """What an evaluation of `model` reads of its observed `children`."""
    plans = track_plan.plan(model.spec, model.status)  # once an evaluation
    current = current_pods(children, plans)
    return PodReading(
        plans=plans,
        tokens={track: plans[track].tokens for track in TRACKS},
        hot_tracks=_hot_tracks(model.status.speculation.hot_schedule, plans),
        canary_pending=canary_pending(children),
        runtime_failures=runtime_failures(current),
        targets=scrape_targets(plans, current),
    )
