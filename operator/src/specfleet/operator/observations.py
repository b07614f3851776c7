"""What one evaluation observed: each pod's cumulative counters, and the windows cut
from two readings of the same pod (counters are cumulative, so a window is their
difference), summed per track into `TrackWindow`s. Pure: `metrics` reads the pages and
Prometheus (the I/O) into `PodSample`s; judging the windows is `stats` and `tuner`'s job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from specfleet.operator.api import LEFT_OUT_MESSAGE_LIMIT, LeftOutReason
from specfleet.operator.children import Track
from specfleet.operator.counts import Counts
from specfleet.runtime.config import MAX_SPECULATIVE_TOKENS
from specfleet.runtime.hot_schedule import BATCH_BUCKETS

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
# Speed: vLLM observes the inter-token latency once per request per engine step (however
# many tokens the step gave it), so its sum over its count is the step time a decoding
# request sees, and its count over the engine steps (one iteration-tokens observation per
# step) is the batch a step carried.
DECODE_SECONDS = "vllm:inter_token_latency_seconds_sum"
DECODE_STEPS = "vllm:inter_token_latency_seconds_count"
ENGINE_STEPS = "vllm:iteration_tokens_total_count"
# prometheus_client's process collector, which vLLM serves: the evidence of a restart.
PROCESS_START = "process_start_time_seconds"
# specfleet-runtime's hot schedules: the generation in force (hot_schedules.py) and
# when it took effect.
SCHEDULE_GENERATION = "specfleet:schedule_generation"
SCHEDULE_APPLIED = "specfleet:schedule_applied_timestamp_seconds"
# specfleet-runtime's step-stats plugin (on pods that take K hot): engine step time by
# batch-size bucket, K verified and phase; the decode-only steps at each K are read.
STEP_SECONDS = "specfleet:step_duration_seconds_sum"
STEP_COUNT = "specfleet:step_duration_seconds_count"
_STEP_SERIES = (STEP_SECONDS, STEP_COUNT)
# A hot change lands milliseconds after the decision that made it, at the start of the
# next window: a window whose pod says its new generation took effect within this share
# of the window from its start ran that generation (nearly) all along, and counts.
APPLIED_AT_START = 0.05
_SPEC_DECODE_PREFIX = "vllm:spec_decode_"
# The series each scalar field of Counts is read from (per position: ACCEPTED_PER_POS).
COUNTER_FIELDS = {
    DRAFTS: "drafts",
    DRAFT_TOKENS: "draft_tokens",
    ACCEPTED_TOKENS: "accepted_tokens",
    GENERATION_TOKENS: "generation_tokens",
    DECODE_SECONDS: "decode_seconds",
    DECODE_STEPS: "decode_steps",
    ENGINE_STEPS: "engine_steps",
}
_VLLM = (*COUNTER_FIELDS, ACCEPTED_PER_POS, REQUESTS_RUNNING, REQUESTS_WAITING)
SERIES_READ = (*_VLLM, PROCESS_START, SCHEDULE_GENERATION, SCHEDULE_APPLIED, *_STEP_SERIES)
MAX_SERIES = 4096  # samples of the series read: about 40 per engine
# The verdict and scrape-error reason of a window Prometheus gave nothing for.
PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"


def cut(message: str) -> str:
    """A message short enough for status: it may quote what a pod or a proxy served."""
    if len(message) <= LEFT_OUT_MESSAGE_LIMIT:
        return message
    return message[: LEFT_OUT_MESSAGE_LIMIT - 1] + "…"


@dataclass(frozen=True)
class PodError:
    """Why a pod's reading was left out: a reason from a small fixed set (a metric label)
    and a message in words, cut short."""

    reason: LeftOutReason
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", cut(self.message))


class BadMetrics(ValueError):
    """A reading that cannot be used, and why."""

    def __init__(self, reason: LeftOutReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def error(self) -> PodError:
        return PodError(self.reason, str(self))


class SourceUnavailable(Exception):
    """Prometheus gave no answer to read: no pod has data this window."""


@dataclass(frozen=True)
class StepTally:
    """Decode-only engine steps that verified K=k at batch sizes in one bucket, up to
    `batch` from the bucket before (the step-stats histogram's buckets), and their
    seconds: cumulative on a pod, or a window's difference."""

    batch: int
    k: int
    steps: float
    seconds: float


def _tallies(
    totals: Mapping[tuple[int, int], tuple[float, float]],
) -> tuple[StepTally, ...]:
    return tuple(
        StepTally(batch, k, steps, seconds)
        for (batch, k), (steps, seconds) in sorted(totals.items())
        if steps > 0
    )


def tallies_sum(groups: Iterable[Sequence[StepTally]]) -> tuple[StepTally, ...]:
    totals: dict[tuple[int, int], tuple[float, float]] = {}
    for tallies in groups:
        for t in tallies:
            steps, seconds = totals.get((t.batch, t.k), (0.0, 0.0))
            totals[t.batch, t.k] = (steps + t.steps, seconds + t.seconds)
    return _tallies(totals)


def tallies_since(earlier: Sequence[StepTally], now: Sequence[StepTally]) -> tuple[StepTally, ...]:
    """The steps counted since `earlier`, a previous reading of the same process."""
    before = {(t.batch, t.k): t for t in earlier}
    totals: dict[tuple[int, int], tuple[float, float]] = {}
    for t in now:
        old = before.get((t.batch, t.k))
        steps, seconds = (
            (t.steps - old.steps, t.seconds - old.seconds) if old else (t.steps, t.seconds)
        )
        if steps > 0 and seconds >= 0:
            totals[t.batch, t.k] = (steps, seconds)
    return _tallies(totals)


@dataclass(frozen=True)
class SpecDecodeCounters(Counts):
    """The cumulative counters (and two gauges) of one pod, summed over engines, and the
    start time of the process that serves them."""

    requests_running: float = 0.0
    requests_waiting: float = 0.0
    speculation_exported: bool = False
    process_start_time: float | None = None
    schedule_generation: int | None = None
    schedule_applied_at: float | None = None
    step_tallies: tuple[StepTally, ...] = ()


def _step_key(labels: Mapping[str, str]) -> tuple[int, int] | None:
    """(batch bucket, K) of a decode-only step series; None for other phases, mixed Ks,
    the open last bucket and anything that is not a K an engine drafts."""
    batch, k = labels.get("batch", ""), labels.get("k", "")
    if labels.get("phase") != "decode" or not (batch.isdigit() and k.isdigit()):
        return None
    if not 0 <= int(k) <= MAX_SPECULATIVE_TOKENS or int(batch) not in BATCH_BUCKETS:
        return None
    return int(batch), int(k)


def series_name(sample_name: str) -> str | None:
    """The metric a sample belongs to, or None for `_created` and unknown series."""
    name = sample_name.removesuffix("_total")
    return name if name in SERIES_READ else None


def _position(labels: Mapping[str, str]) -> int:
    """The `position` label, refused before anything is sized by it: one line saying
    position 30000000 once cost 6.2 GB."""
    text = labels.get("position", "0")
    try:
        position = int(text)
    except ValueError:
        raise BadMetrics(LeftOutReason.UNPARSEABLE, f"position {text!r} is not a number") from None
    if not 0 <= position < MAX_SPECULATIVE_TOKENS:
        raise BadMetrics(
            LeftOutReason.IMPOSSIBLE_COUNTERS,
            f"accepted tokens at position {position}: no engine drafts more than "
            f"{MAX_SPECULATIVE_TOKENS} tokens",
        )
    return position


def counters_from_series(
    series: Iterable[tuple[str, Mapping[str, str], float]],
) -> SpecDecodeCounters:
    """Sum (name, labels, value) series into counters: over every label set but `position`.

    Shared by the /metrics parser and the Prometheus source so both read vLLM alike.
    Raises BadMetrics on NaN or infinite values (such a pod is broken, not idle), on a
    position no engine drafts, and past MAX_SERIES samples.
    """
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    exported = False
    started: float | None = None
    generation: int | None = None
    applied: float | None = None
    steps: dict[tuple[int, int], tuple[float, float]] = {}
    read = 0
    for sample_name, labels, value in series:
        name = series_name(sample_name)
        if name is None:
            continue
        read += 1
        if read > MAX_SERIES:
            raise BadMetrics(LeftOutReason.TOO_LARGE, f"more than {MAX_SERIES} vLLM samples")
        if not math.isfinite(value):
            raise BadMetrics(LeftOutReason.IMPOSSIBLE_COUNTERS, f"{sample_name} is {value}")
        if name == PROCESS_START:
            started = value if started is None else max(started, value)
            continue
        if name == SCHEDULE_GENERATION:
            generation = int(value) if generation is None else max(generation, int(value))
            continue
        if name == SCHEDULE_APPLIED:
            applied = value if applied is None else max(applied, value)
            continue
        if name in _STEP_SERIES:
            key = _step_key(labels)
            if key is not None:
                count, seconds = steps.get(key, (0.0, 0.0))
                steps[key] = (
                    (count + value, seconds) if name == STEP_COUNT else (count, seconds + value)
                )
            continue
        exported = exported or name.startswith(_SPEC_DECODE_PREFIX)
        if name == ACCEPTED_PER_POS:
            position = _position(labels)
            per_position[position] = per_position.get(position, 0.0) + value
        else:
            totals[name] = totals.get(name, 0.0) + value
    positions = max(per_position, default=-1) + 1
    return SpecDecodeCounters(
        **{field: totals.get(name, 0.0) for name, field in COUNTER_FIELDS.items()},
        accepted_per_position=tuple(per_position.get(i, 0.0) for i in range(positions)),
        requests_running=totals.get(REQUESTS_RUNNING, 0.0),
        requests_waiting=totals.get(REQUESTS_WAITING, 0.0),
        speculation_exported=exported,
        process_start_time=started,
        schedule_generation=generation,
        schedule_applied_at=applied,
        step_tallies=_tallies(steps),
    )


def _changed_at_start(start: float, end: float, current: SpecDecodeCounters) -> bool:
    """Whether the pod's new schedule generation took effect at the window's start
    (APPLIED_AT_START of it either way: the pod's clock is not the operator's)."""
    applied = current.schedule_applied_at
    slack = (end - start) * APPLIED_AT_START
    return applied is not None and start - slack <= applied <= start + slack


@dataclass(frozen=True)
class PodSample:
    """One reading of one pod: counters, or why there are none."""

    pod: str
    track: Track
    at: float
    counters: SpecDecodeCounters | None
    error: PodError | None = None


@dataclass(frozen=True, kw_only=True)
class TrackWindow(Counts):
    """Counter deltas of one track over one window, summed over its pods.

    `seconds` is the window's wall-clock length (the longest pod interval); `pod_seconds`
    sums every pod's interval, so `generation_tokens / pod_seconds` is tokens/s per pod
    whatever the number of pods. `running_requests` is the sum of the pods' gauges at
    the end of the window.
    """

    seconds: float
    pod_seconds: float
    pods: int
    running_requests: float
    waiting_requests: float = 0.0
    # The Ks its pods drafted with when a schedule gave more than one (set by the tuner,
    # which knows what it rendered): acceptance per position depends on it.
    ks: tuple[int, ...] = ()
    # Its decode steps by batch bucket and K, where the pods export them (hot pods).
    step_tallies: tuple[StepTally, ...] = ()

    @property
    def step_seconds(self) -> float | None:
        """Mean engine step time a decoding request saw, or None without timing."""
        return self.decode_seconds / self.decode_steps if self.decode_steps > 0 else None

    @property
    def batch_per_pod(self) -> float:
        """Decoding requests per engine step over the window; without timing, the
        running requests at its end."""
        if self.decode_steps > 0 and self.engine_steps > 0:
            return self.decode_steps / self.engine_steps
        return self.running_requests / self.pods if self.pods else 0.0


@dataclass(frozen=True)
class CanaryPending:
    """A canary pod that does not run: Pending for want of a node, or never created (its
    Deployment's ReplicaFailure). `since`: the Unix time it has waited since; `reason`:
    what the scheduler or the Deployment controller said of it (None: nothing)."""

    since: float
    reason: str | None


@dataclass(frozen=True)
class Observation:
    """What one evaluation saw.

    `errors` names the pods whose readings were left out, and why. `prometheus_error` says
    why Prometheus gave nothing at all. `canary_pending` is filled in by the operator, not
    by WindowTracker, from the children (None: the canary is not kept waiting).
    `runtime_failures` too: per track, why a pod's runtime failed (a preflight refusal,
    vLLM exiting), if one did.
    """

    stable: TrackWindow | None
    canary: TrackWindow | None
    errors: dict[str, PodError] = field(default_factory=dict)
    speculation_missing: bool = False
    canary_pending: CanaryPending | None = None
    prometheus_error: str | None = None
    runtime_failures: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ScrapeTarget:
    """Where one pod of a track serves its counters (its /metrics page)."""

    pod: str
    track: Track
    url: str


@dataclass(frozen=True)
class HotTrack:
    """A track whose pods take K hot: the schedule generation they must run for a
    window to count, and the ceiling their counters are sized for (positions past the K
    in effect stay on the page, at what an earlier K left there)."""

    generation: int
    ceiling: int


@dataclass(frozen=True)
class _PodDelta:
    counters: SpecDecodeCounters
    seconds: float
    running: float
    waiting: float


@dataclass(frozen=True)
class _Read:
    """What one pod's sample gave: the reading its next window starts from (None: none
    yet), why it is left out of this window, whether its readings stopped following from
    each other, whether it serves without exporting speculation's counters, and its
    window since the last reading."""

    kept: PodSample | None
    error: PodError | None = None
    unexplained: bool = False
    speculation_missing: bool = False
    delta: _PodDelta | None = None


def _moves(old: SpecDecodeCounters, new: SpecDecodeCounters) -> tuple[list[str], list[str]]:
    """The counters that went down, and those that went up, from old to new."""
    # A restart may come back with another K: compare the positions both have (zip).
    pairs = [(name, o, n) for (name, o), (_, n) in zip(old.named(), new.named(), strict=False)]
    return [name for name, o, n in pairs if n < o], [name for name, o, n in pairs if n > o]


def _restarted(previous: PodSample, current: PodSample) -> bool:
    """Whether the pod restarted between two readings; BadMetrics when neither one process
    nor a process and its restart explain them.

    A restart needs evidence: a process started since the previous reading (by the
    process start time vLLM exports) or, without start times, every counter lower than
    before. Counters flipping between two engines behind one address (or a proxy) are
    left out instead: read as restarts, each engine's lifetime totals became one window.
    A restart within clock skew of the previous reading is left out too: one window of
    one pod, the safe side."""
    assert previous.counters is not None and current.counters is not None
    old, new = previous.counters, current.counters
    down, up = _moves(old, new)
    if old.process_start_time is not None and new.process_start_time is not None:
        if new.process_start_time == old.process_start_time:
            if down:
                raise BadMetrics(
                    LeftOutReason.INCONSISTENT_COUNTERS,
                    f"{down[0]} went down within one process: two engines behind one address?",
                )
            return False
        if (
            old.process_start_time < new.process_start_time
            and new.process_start_time >= previous.at
        ):
            return True
        raise BadMetrics(
            LeftOutReason.INCONSISTENT_COUNTERS,
            f"another process answered (started at {new.process_start_time:.0f}, the last "
            f"reading's at {old.process_start_time:.0f}) that did not start since the last "
            "reading: two engines behind one address?",
        )
    if not down:
        return False
    if not up:
        return True  # every counter reset together
    raise BadMetrics(
        LeftOutReason.INCONSISTENT_COUNTERS,
        f"{down[0]} went down while {up[0]} went up: not a restart",
    )


def _difference(previous: SpecDecodeCounters, current: SpecDecodeCounters) -> SpecDecodeCounters:
    return SpecDecodeCounters(
        speculation_exported=current.speculation_exported,
        step_tallies=tallies_since(previous.step_tallies, current.step_tallies),
    ).with_counts(current - previous)


def _window_delta(previous: PodSample, current: PodSample, k: int) -> SpecDecodeCounters:
    """One pod's counts over the window: since the previous reading, or since a restart."""
    assert previous.counters is not None and current.counters is not None
    delta = (
        current.counters
        if _restarted(previous, current)
        else _difference(previous.counters, current.counters)
    )
    positions = delta.accepted_per_position
    if not any(positions[k:]):
        # Positions a deeper K of the same process counted, and none since (hot changes).
        delta = replace(delta, accepted_per_position=positions[:k])
    why = delta.implausible(k)
    if why is not None:
        raise BadMetrics(LeftOutReason.IMPOSSIBLE_COUNTERS, f"in this window: {why}")
    return delta


def _aggregate(deltas: list[_PodDelta]) -> TrackWindow | None:
    if not deltas:
        return None
    return TrackWindow(
        seconds=max(d.seconds for d in deltas),
        pod_seconds=sum(d.seconds for d in deltas),
        pods=len(deltas),
        running_requests=sum(d.running for d in deltas),
        waiting_requests=sum(d.waiting for d in deltas),
        step_tallies=tallies_sum(d.counters.step_tallies for d in deltas),
    ).with_counts(Counts.sum(d.counters for d in deltas))


class WindowTracker:
    """Remembers the previous sample of each pod and turns new samples into windows.

    In memory only: after an operator restart the first observation is a baseline with
    no windows (inconclusive), which costs one interval and nothing else.
    """

    def __init__(self) -> None:
        self._previous: dict[str, PodSample] = {}
        # Pods whose last reading did not follow from the one before. Counters flipping
        # between two engines of one start time show it only when they go down; waiting
        # for a reading that follows keeps the flips that go up out of windows too.
        self._unexplained: set[str] = set()

    def observe(
        self,
        samples: Sequence[PodSample],
        tokens: Mapping[Track, int],
        hot: Mapping[Track, HotTrack] | None = None,
    ) -> Observation:
        """Windows from new samples; `tokens` is the K each track's pods run (0: none).
        `hot`: the tracks whose pods take K hot. A pod at another generation than its
        track's is left out, and a window is cut where a pod's generation changed (its
        two readings ran different schedules).

        A reading that cannot be used leaves out its pod, named in `errors`. Readings
        that are false (a failed scrape, impossible counters) are skipped: the pod's next
        good one spans both intervals. After a reading that is true but does not follow
        from the previous one, the pod's next window starts from the reading after it."""
        deltas: dict[Track, list[_PodDelta]] = {"stable": [], "canary": []}
        errors: dict[str, PodError] = {}
        unexplained: set[str] = set()
        missing = False
        seen: dict[str, PodSample] = {}
        for sample in samples:
            hot_track = (hot or {}).get(sample.track)
            read = self._read(sample, tokens[sample.track], hot_track)
            if read.kept is not None:
                seen[sample.pod] = read.kept
            if read.error is not None:
                errors[sample.pod] = read.error
            if read.unexplained:
                unexplained.add(sample.pod)
            missing = missing or read.speculation_missing
            if read.delta is not None:
                deltas[sample.track].append(read.delta)
        # Pods that disappeared are forgotten: a new pod of the same name starts a baseline.
        self._previous = seen
        self._unexplained = unexplained
        return Observation(
            stable=_aggregate(deltas["stable"]),
            canary=_aggregate(deltas["canary"]),
            errors=errors,
            speculation_missing=missing,
        )

    def _read(self, sample: PodSample, k: int, hot_track: HotTrack | None) -> _Read:
        """What one pod's `sample` gives, read against its previous one (`k`: the K its
        track runs; `hot_track`: set where the track's pods take K hot)."""
        previous = self._previous.get(sample.pod)
        current = sample.counters
        ceiling = k if hot_track is None else hot_track.ceiling
        why = None if current is None else current.implausible(ceiling)
        if current is None or why is not None:
            error = sample.error or PodError(
                LeftOutReason.IMPOSSIBLE_COUNTERS, why or "no counters"
            )
            # Still waiting for a reading that follows, if it was.
            return _Read(previous, error, unexplained=sample.pod in self._unexplained)
        if hot_track is not None and current.schedule_generation != hot_track.generation:
            error = PodError(
                LeftOutReason.SCHEDULE_NOT_IN_FORCE,
                f"runs schedule generation {current.schedule_generation}, not "
                f"{hot_track.generation}: its window would count another K",
            )
            return _Read(sample, error)
        serving = current.requests_running > 0 or (
            previous is not None
            and previous.counters is not None
            and current.generation_tokens != previous.counters.generation_tokens
        )
        # A pod rendered plain (K=0) has nothing to export.
        missing = serving and k > 0 and not current.speculation_exported
        if (
            previous is None
            or previous.counters is None
            or previous.track != sample.track
            or (
                previous.counters.schedule_generation != current.schedule_generation
                and not _changed_at_start(previous.at, sample.at, current)
            )
        ):
            # A baseline: nothing to compare with yet, or another schedule.
            return _Read(sample, speculation_missing=missing)
        seconds = sample.at - previous.at
        if seconds <= 0:
            return _Read(sample, speculation_missing=missing)
        if sample.pod in self._unexplained:
            error = PodError(
                LeftOutReason.INCONSISTENT_COUNTERS,
                "the last reading did not follow from the one before; the next window "
                "starts from this one",
            )
            return _Read(sample, error, speculation_missing=missing)
        try:
            delta = _window_delta(previous, sample, k)
        except BadMetrics as bad:
            return _Read(sample, bad.error(), unexplained=True, speculation_missing=missing)
        window = _PodDelta(delta, seconds, current.requests_running, current.requests_waiting)
        return _Read(sample, speculation_missing=missing, delta=window)
