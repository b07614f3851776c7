"""One tuning evaluation: read the pods' metrics, decide, report the decision.

The decision itself is `tuner.decide`, a pure function; this module does the I/O
around it (scrapes or a Prometheus query, Events, operator metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from specfleet.operator import observability, render, track_plan, tuner
from specfleet.operator.api import (
    MAX_SCRAPE_TIMEOUT_SECONDS,
    ConditionType,
    HotSchedule,
    Metrics,
    MetricsSource,
    SpeculativeModel,
    SpeculativeModelStatus,
)
from specfleet.operator.children import TRACKS, Track
from specfleet.operator.conditions import condition_status
from specfleet.operator.durations import parse_duration
from specfleet.operator.keys import Key, key_of_model
from specfleet.operator.metrics import ScrapeTarget, query_prometheus, scrape
from specfleet.operator.observations import (
    PROMETHEUS_UNAVAILABLE,
    HotTrack,
    Observation,
    PodSample,
    SourceUnavailable,
    WindowTracker,
    cut,
)
from specfleet.operator.outcomes import ROLLBACK_ACTIONS, Action, ActionKind
from specfleet.operator.status import ObservedChildren, api_time, pod_ready, runtime_failure
from specfleet.operator.track_plan import TrackPlans
from specfleet.operator.workqueue import without_slot

log = logging.getLogger("specfleet.evaluation")
SCRAPE_CONCURRENCY = 64


@dataclass(frozen=True)
class Outbound:
    """What the platform team lets a model's spec make the operator's pod fetch: the
    longest wait (spec.metrics.scrapeTimeout is the tenant's, up to 5 minutes) and the
    Prometheus URLs it may query (none listed: any the CRD admits but those at a loopback,
    link-local or metadata address; a listed one may be at a loopback address)."""

    max_timeout: float = MAX_SCRAPE_TIMEOUT_SECONDS
    prometheus_urls: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        urls = frozenset(url.rstrip("/") for url in self.prometheus_urls)
        object.__setattr__(self, "prometheus_urls", urls)

    def timeout(self, metrics: Metrics) -> float:
        asked = parse_duration(metrics.scrape_timeout).total_seconds()
        return min(asked, self.max_timeout)

    def listed(self, url: str) -> bool:
        """The install names `url`: it may be the operator's own pod (a loopback address,
        e.g. a Prometheus proxy beside it), which no model may name otherwise."""
        return url.rstrip("/") in self.prometheus_urls

    def refused(self, url: str) -> str | None:
        """Why the operator will not query `url`, or None."""
        if not self.prometheus_urls or self.listed(url):
            return None
        # The allowed URLs last: a long list is what a message cut short loses.
        return (
            f"Prometheus at {url}: not allowed by the operator (the chart's "
            "evaluation.allowedPrometheusUrls); set metrics.prometheus.url to one of "
            + ", ".join(sorted(self.prometheus_urls))
        )


CurrentPods = dict[Track, list[dict[str, Any]]]


def current_pods(
    model: SpeculativeModel, children: ObservedChildren, plans: TrackPlans
) -> CurrentPods:
    """Each track's pods that run the configuration the model's status asks for (their
    config hash is the one rendered now from `plans`). During a rollout the old pods
    still serve with the old K; their acceptance says nothing about the new K."""
    expected = render.config_hashes(model, plans)
    current: CurrentPods = {track: [] for track in TRACKS}
    for pod in children.pods:
        track = pod["metadata"].get("labels", {}).get(render.TRACK_LABEL, "stable")
        annotations = pod["metadata"].get("annotations") or {}
        if track in current and annotations.get(render.CONFIG_HASH_ANNOTATION) == expected[track]:
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


def canary_pending_since(children: ObservedChildren) -> float | None:
    """Since when a canary pod has waited for a node (the scheduler found no GPU), or its
    Deployment has failed to create it (`_canary_not_created`): either way the canary
    does not run, and a trial waits for it or goes on in place."""
    pending = _pending_canary(children)
    if pending is not None:
        created = api_time(pending[0]["metadata"]["creationTimestamp"])
        return created.timestamp() if created else None
    failure = _canary_not_created(children)
    if failure is None:
        return None
    since = api_time(failure.get("lastTransitionTime") or failure.get("lastUpdateTime"))
    return since.timestamp() if since else None


def canary_pending_reason(children: ObservedChildren) -> str | None:
    """What the scheduler said of the Pending canary pod (e.g. '0/3 nodes are
    available: 3 Insufficient nvidia.com/gpu.'), or why its pod could not be created
    (e.g. 'FailedCreate: pods "m-canary-..." is forbidden: exceeded quota: ...')."""
    pending = _pending_canary(children)
    if pending is not None:
        return pending[1].get("message") or pending[1].get("reason")
    failure = _canary_not_created(children)
    if failure is None:
        return None
    reason, message = failure.get("reason") or "ReplicaFailure", failure.get("message") or ""
    return f"its pod is not created ({reason}): {message}" if message else reason


def _hot_tracks(hot: HotSchedule | None, plans: TrackPlans) -> dict[Track, HotTrack] | None:
    """Where the stable pods take K hot (`hot`, status' schedule handed to them): the
    generation they must run for their windows to count at status' K, and their ceiling."""
    if hot is None or not plans.stable.hot:
        return None
    return {"stable": HotTrack(hot.generation, plans.stable.spec.speculation.max_tokens)}


class Evaluator:
    def __init__(self, outbound: Outbound = Outbound()) -> None:
        self.trackers: dict[Key, WindowTracker] = {}
        self.outbound = outbound

    def forget(self, key: Key) -> None:
        self.trackers.pop(key, None)

    async def _samples(
        self, key: Key, metrics: Metrics, plans: TrackPlans, current: CurrentPods
    ) -> list[PodSample]:
        """The pods' counters, fetched without the reconcile's slot: the wait is the
        tenant's (`without_slot`). No pod to scrape yet (a new model's first evaluation)
        keeps the slot: there is nothing to wait on."""
        timeout = self.outbound.timeout(metrics)
        fetch: Coroutine[Any, Any, list[PodSample]]
        if metrics.source is MetricsSource.PROMETHEUS and metrics.prometheus:
            url = metrics.prometheus.url
            refused = self.outbound.refused(url)
            if refused is not None:
                raise SourceUnavailable(cut(refused))
            listed = self.outbound.listed(url)
            fetch = query_prometheus(url, *key, timeout, loopback_allowed=listed)
        else:
            targets = scrape_targets(plans, current)
            if not targets:
                return []
            fetch = scrape(key[0], targets, timeout, SCRAPE_CONCURRENCY)
        async with without_slot():
            return await fetch

    async def evaluate(
        self, model: SpeculativeModel, children: ObservedChildren, now: datetime
    ) -> tuner.Decided:
        key = key_of_model(model)
        tracker = self.trackers.setdefault(key, WindowTracker())
        plans = track_plan.plan(model.spec, model.status)  # once an evaluation
        current = current_pods(model, children, plans)
        try:
            samples = await self._samples(key, model.spec.metrics, plans, current)
        except SourceUnavailable as error:
            # No pod has data. The tracker keeps its readings: the next answer spans the gap.
            observation = Observation(stable=None, canary=None, prometheus_error=str(error))
        else:
            tokens = {track: plans[track].tokens for track in TRACKS}
            observation = tracker.observe(
                samples, tokens, _hot_tracks(model.status.speculation.hot_schedule, plans)
            )
        observation = replace(
            observation,
            canary_pending_since=canary_pending_since(children),
            runtime_failures=runtime_failures(current),
            canary_pending_reason=canary_pending_reason(children),
        )
        self._count_errors(key, observation)
        decided = tuner.decide(
            model.spec,
            model.status,
            observation,
            now,
            generation=model.metadata.generation,
            plans=plans,
        )
        self._export(key, decided.status)
        return decided

    def _count_errors(self, labels: Key, observation: Observation) -> None:
        for error in observation.errors.values():
            observability.SCRAPE_ERRORS.labels(*labels, error.reason.value).inc()
        if observation.prometheus_error is not None:
            observability.SCRAPE_ERRORS.labels(*labels, PROMETHEUS_UNAVAILABLE).inc()

    def count(self, model: SpeculativeModel, actions: list[Action]) -> list[Action]:
        """Count the decisions in the operator's metrics; return those worth an Event."""
        labels = key_of_model(model)
        eventful = []
        for action in actions:
            if action.kind == ActionKind.INCONCLUSIVE:
                observability.INCONCLUSIVE_WINDOWS.labels(*labels, action.reason).inc()
                continue  # counted, not worth an Event every interval
            observability.DECISIONS.labels(*labels, action.kind).inc()
            if action.kind in ROLLBACK_ACTIONS:
                observability.ROLLBACKS.labels(*labels, action.reason).inc()
            log.info("%s/%s: %s: %s", *labels, action.kind, action.message)
            eventful.append(action)
        return eventful

    def _export(self, labels: Key, status: SpeculativeModelStatus) -> None:
        window = status.acceptance
        for gauge, value in (
            (observability.ACCEPTANCE_RATE, window.rate),
            (observability.ACCEPTANCE_JUDGED, window.judged),
            (observability.ACCEPTANCE_LOWER_BOUND, window.lower_bound),
            (observability.MEAN_ACCEPTANCE_LENGTH, window.mean_length),
            (observability.GOODPUT, window.goodput),
        ):
            if value is not None:
                gauge.labels(*labels).set(value)
        for gauge, kind in (
            (observability.METRICS_AVAILABLE, ConditionType.METRICS_AVAILABLE),
            (observability.SPECULATION_ACTIVE, ConditionType.SPECULATION_ACTIVE),
        ):
            state = condition_status(status.conditions, kind)
            if state != "Unknown":
                gauge.labels(*labels).set(1 if state == "True" else 0)
