"""Acceptance metrics: parse vLLM's /metrics, scrape pods or query Prometheus, cut windows.

Counters are cumulative, so a window is the difference between two samples of the same pod.
Everything here is about getting honest numbers into a `TrackWindow`; judging them is
`stats` and `tuner`'s job.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

Track = Literal["stable", "canary"]
TRACKS: tuple[Track, ...] = ("stable", "canary")

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
_SPEC_DECODE_PREFIX = "vllm:spec_decode_"
_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS, ACCEPTED_PER_POS, GENERATION_TOKENS)
_GAUGES = (REQUESTS_RUNNING, REQUESTS_WAITING)

# Pod labels the operator puts on every pod; a Prometheus scraping them relabels these
# to `model` and `track` (plus the usual `namespace` and `pod`).
MODEL_LABEL = "specfleet.io/model"
TRACK_LABEL = "specfleet.io/track"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """The cumulative counters (and two gauges) of one pod, summed over engines."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float = 0.0
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    speculation_exported: bool = False


def _base_name(sample_name: str) -> str | None:
    """The metric a sample belongs to, or None for `_created` and unknown series."""
    name = sample_name.removesuffix("_total")
    return name if name in _COUNTERS or name in _GAUGES else None


def counters_from_series(
    series: Iterable[tuple[str, Mapping[str, str], float]],
) -> SpecDecodeCounters:
    """Sum (name, labels, value) series into counters: over every label set but `position`.

    Shared by the /metrics parser and the Prometheus source so both read vLLM alike.
    Raises ValueError on NaN or infinite values: such a pod is broken, not idle.
    """
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    exported = False
    for sample_name, labels, value in series:
        name = _base_name(sample_name)
        if name is None:
            continue
        if not math.isfinite(value):
            raise ValueError(f"{sample_name} is {value}")
        exported = exported or name.startswith(_SPEC_DECODE_PREFIX)
        if name == ACCEPTED_PER_POS:
            position = int(labels.get("position", "0"))
            if position < 0:
                raise ValueError(f"{sample_name} has a negative position {position}")
            per_position[position] = per_position.get(position, 0.0) + value
        else:
            totals[name] = totals.get(name, 0.0) + value
    positions = max(per_position, default=-1) + 1
    return SpecDecodeCounters(
        drafts=totals.get(DRAFTS, 0.0),
        draft_tokens=totals.get(DRAFT_TOKENS, 0.0),
        accepted_tokens=totals.get(ACCEPTED_TOKENS, 0.0),
        accepted_per_position=tuple(per_position.get(i, 0.0) for i in range(positions)),
        generation_tokens=totals.get(GENERATION_TOKENS, 0.0),
        requests_running=totals.get(REQUESTS_RUNNING, 0.0),
        requests_waiting=totals.get(REQUESTS_WAITING, 0.0),
        speculation_exported=exported,
    )


# The metric name a line is about: a sample's name, or the name in `# TYPE` / `# HELP`.
_LINE_NAME = re.compile(r"[ \t]*(?:#[ \t]+(?:TYPE|HELP)[ \t]+)?([a-zA-Z_:][a-zA-Z0-9_:]*)")


def _relevant_lines(text: str) -> str:
    """The page's lines about the series we read. A vLLM page is mostly histograms we
    never use; parsing all of it cost about 8 ms of CPU per pod, most of a scrape cycle."""
    kept = []
    for line in text.splitlines():
        match = _LINE_NAME.match(line)
        if match is not None and _base_name(match.group(1)) is not None:
            kept.append(line)
    return "\n".join(kept) + "\n"


def parse_vllm_metrics(text: str) -> SpecDecodeCounters:
    """Counters from a vLLM /metrics page; ValueError on garbage, NaN, or no vLLM series.

    Lines of other series are skipped unparsed: a malformed one cannot hide the rest."""
    series = [
        (sample.name, sample.labels, float(sample.value))
        for family in text_string_to_metric_families(_relevant_lines(text))
        for sample in family.samples
    ]
    if not any(_base_name(name) for name, _, _ in series):
        raise ValueError("no vLLM metrics on the page")
    return counters_from_series(series)


# ----------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class ScrapeTarget:
    pod: str
    track: Track
    url: str


@dataclass(frozen=True)
class PodSample:
    """One reading of one pod: counters, or why there are none."""

    pod: str
    track: Track
    at: float
    counters: SpecDecodeCounters | None
    error: str | None = None


async def _scrape_one(
    session: aiohttp.ClientSession,
    target: ScrapeTarget,
    timeout: float,
    semaphore: asyncio.Semaphore,
) -> PodSample:
    async with semaphore:
        try:
            async with session.get(
                target.url, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                response.raise_for_status()
                text = await response.text()
            at = time.time()
            return PodSample(target.pod, target.track, at, parse_vllm_metrics(text))
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as error:
            message = str(error) or type(error).__name__
            return PodSample(target.pod, target.track, time.time(), None, message)


async def scrape(
    targets: Sequence[ScrapeTarget], timeout: float, concurrency: int
) -> list[PodSample]:
    """Scrape every target at most `concurrency` at a time; a failure stays with its pod."""
    semaphore = asyncio.Semaphore(max(1, concurrency))
    async with aiohttp.ClientSession() as session:
        return list(
            await asyncio.gather(*(_scrape_one(session, t, timeout, semaphore) for t in targets))
        )


def _promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def prometheus_query(namespace: str, model: str) -> str:
    """PromQL selecting every series the windows need for one model's pods."""
    names = "|".join((*_COUNTERS, *_GAUGES))
    return (
        f'{{__name__=~"({names})(_total)?",'
        f"namespace={_promql_string(namespace)},model={_promql_string(model)}}}"
    )


def samples_from_prometheus(payload: Mapping[str, Any], at: float) -> list[PodSample]:
    """PodSamples from an instant-query response (one per pod with a stable/canary track)."""
    if payload.get("status") != "success":
        raise ValueError(f"Prometheus query failed: {payload.get('error', payload)}")
    data = payload.get("data") or {}
    if data.get("resultType") != "vector":
        raise ValueError(f"expected a vector result, got {data.get('resultType')}")
    by_pod: dict[tuple[str, str], list[tuple[str, Mapping[str, str], float]]] = {}
    for item in data.get("result", []):
        labels: dict[str, str] = item["metric"]
        key = (labels.get("pod", ""), labels.get("track", ""))
        by_pod.setdefault(key, []).append((labels["__name__"], labels, float(item["value"][1])))
    samples = []
    for (pod, track), series in sorted(by_pod.items()):
        if not pod or track not in TRACKS:
            continue  # not one of ours: no pod label or an unknown track
        track_: Track = "stable" if track == "stable" else "canary"
        try:
            samples.append(PodSample(pod, track_, at, counters_from_series(series)))
        except ValueError as error:
            samples.append(PodSample(pod, track_, at, None, str(error)))
    return samples


async def query_prometheus(url: str, namespace: str, model: str, timeout: float) -> list[PodSample]:
    """Current counters of a model's pods from Prometheus' HTTP API (instant query).

    Raises ValueError (or aiohttp.ClientError / TimeoutError) when the server cannot answer:
    then no pod has data, and the window is inconclusive.
    """
    endpoint = url.rstrip("/") + "/api/v1/query"
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            endpoint,
            params={"query": prometheus_query(namespace, model)},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response,
    ):
        payload = await response.json(content_type=None)
    return samples_from_prometheus(payload, time.time())


# ----------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class TrackWindow:
    """Counter deltas of one track over one window, summed over its pods.

    `seconds` is the window's wall-clock length (the longest pod interval); `pod_seconds`
    sums every pod's interval, so `generation_tokens / pod_seconds` is tokens/s per pod
    whatever the number of pods. `running_requests` is the sum of the pods' gauges at
    the end of the window.
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...]
    generation_tokens: float
    seconds: float
    pod_seconds: float
    pods: int
    running_requests: float
    waiting_requests: float = 0.0

    @property
    def batch_per_pod(self) -> float:
        return self.running_requests / self.pods if self.pods else 0.0


@dataclass(frozen=True)
class Observation:
    """What one evaluation saw.

    `canary_pending_since` is filled in by the operator, not by WindowTracker: the Unix
    time since when the canary pod has been Pending (None when it is not Pending).
    """

    stable: TrackWindow | None
    canary: TrackWindow | None
    errors: list[str] = field(default_factory=list)
    speculation_missing: bool = False
    canary_pending_since: float | None = None


@dataclass(frozen=True)
class _PodDelta:
    counters: SpecDecodeCounters
    seconds: float
    running: float
    waiting: float


def _delta(previous: SpecDecodeCounters, current: SpecDecodeCounters) -> SpecDecodeCounters:
    """current - previous; when any counter went down the pod restarted, and its counters
    since the restart are the whole delta (never negative traffic)."""
    scalar = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens")
    restarted = any(getattr(current, f) < getattr(previous, f) for f in scalar) or any(
        # A restart may come back with fewer positions: compare the ones both have.
        c < p
        for c, p in zip(current.accepted_per_position, previous.accepted_per_position, strict=False)
    )
    if restarted:
        return current
    old = previous.accepted_per_position
    return SpecDecodeCounters(
        drafts=current.drafts - previous.drafts,
        draft_tokens=current.draft_tokens - previous.draft_tokens,
        accepted_tokens=current.accepted_tokens - previous.accepted_tokens,
        accepted_per_position=tuple(
            value - (old[i] if i < len(old) else 0.0)
            for i, value in enumerate(current.accepted_per_position)
        ),
        generation_tokens=current.generation_tokens - previous.generation_tokens,
        speculation_exported=current.speculation_exported,
    )


def _aggregate(deltas: list[_PodDelta]) -> TrackWindow | None:
    if not deltas:
        return None
    positions = max(len(d.counters.accepted_per_position) for d in deltas)
    per_position = [0.0] * positions
    for d in deltas:
        for i, value in enumerate(d.counters.accepted_per_position):
            per_position[i] += value
    return TrackWindow(
        drafts=sum(d.counters.drafts for d in deltas),
        draft_tokens=sum(d.counters.draft_tokens for d in deltas),
        accepted_tokens=sum(d.counters.accepted_tokens for d in deltas),
        accepted_per_position=tuple(per_position),
        generation_tokens=sum(d.counters.generation_tokens for d in deltas),
        seconds=max(d.seconds for d in deltas),
        pod_seconds=sum(d.seconds for d in deltas),
        pods=len(deltas),
        running_requests=sum(d.running for d in deltas),
        waiting_requests=sum(d.waiting for d in deltas),
    )


class WindowTracker:
    """Remembers the previous sample of each pod and turns new samples into windows.

    In memory only: after an operator restart the first observation is a baseline with
    no windows (inconclusive), which costs one interval and nothing else.
    """

    def __init__(self) -> None:
        self._previous: dict[str, PodSample] = {}

    def observe(self, samples: Sequence[PodSample]) -> Observation:
        deltas: dict[Track, list[_PodDelta]] = {"stable": [], "canary": []}
        errors: list[str] = []
        missing = False
        seen: dict[str, PodSample] = {}
        for sample in samples:
            previous = self._previous.get(sample.pod)
            if sample.counters is None:
                errors.append(f"{sample.pod}: {sample.error or 'no data'}")
                if previous is not None:
                    seen[sample.pod] = previous  # the next good scrape spans both intervals
                continue
            seen[sample.pod] = sample
            current = sample.counters
            serving = current.requests_running > 0 or (
                previous is not None
                and previous.counters is not None
                and current.generation_tokens != previous.counters.generation_tokens
            )
            missing = missing or (serving and not current.speculation_exported)
            if previous is None or previous.counters is None or previous.track != sample.track:
                continue  # a baseline: nothing to compare with yet
            seconds = sample.at - previous.at
            if seconds <= 0:
                continue
            deltas[sample.track].append(
                _PodDelta(
                    _delta(previous.counters, current),
                    seconds,
                    current.requests_running,
                    current.requests_waiting,
                )
            )
        # Pods that disappeared are forgotten: a new pod of the same name starts a baseline.
        self._previous = seen
        return Observation(
            stable=_aggregate(deltas["stable"]),
            canary=_aggregate(deltas["canary"]),
            errors=errors,
            speculation_missing=missing,
        )
