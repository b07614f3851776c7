"""The decision core: (spec, status, observation, now) -> (new status, actions).

Pure: no I/O, no clock, never writes spec. Everything it remembers lives in status, so
an operator restart resumes where it stopped, and recorded windows replay exactly.

States, all in status.speculation / status.canary:
  stable          K in effect, no trial; after `cooldown` and one conclusive window at this K
                  it may propose a candidate (best predicted goodput, clearing the floor
                  plus `acceptanceMargin`, at least `minImprovement` better than K).
  canary trial    candidate_tokens set: one canary pod runs it; after `canaryWindows`
                  conclusive canary windows it is promoted if the lower bound of its
                  goodput gain is >= minImprovement and its acceptance clears the floor,
                  otherwise aborted (and not proposed again for `reprobeAfter`).
  in-place trial  strategy InPlace (or a canary Pending past `canaryPendingTimeout`):
                  the stable K itself changes; windows after are compared with before.
  disabled        plain decoding after the floor ruled out every K; re-probed at minTokens
                  after `reprobeAfter`.
Rollback (works with tuning disabled too): `failureLimit` conclusive stable windows in a
row whose lower bound of `rollback.metric` is below the floor -> last known good K if it
is predicted to clear the floor -> else the largest smaller K predicted to clear the floor
with the margin -> else disable. Inconclusive windows neither pass nor fail.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from specfleet.operator import schedule, speed
from specfleet.operator.api import (
    HISTORY_LIMIT,
    LEFT_OUT_LIMIT,
    AcceptanceWindow,
    BelowFloorPolicy,
    CanaryComparison,
    ConditionType,
    Decision,
    DraftMethod,
    FittedStepCost,
    OpenWindow,
    OpenWindows,
    PodLeftOut,
    RollbackMetric,
    Schedule,
    ScheduledBand,
    ScheduleMode,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    TrackTotals,
    TuningStrategy,
    parse_duration,
)
from specfleet.operator.children import Track
from specfleet.operator.conditions import ConditionStatus, condition_status, set_condition
from specfleet.operator.metrics import PROMETHEUS_UNAVAILABLE, Observation, TrackWindow
from specfleet.operator.stats import (
    Z_ONE_SIDED_95,
    Estimate,
    conditional_acceptance,
    draft_acceptance_rate,
    expected_rollback_metric,
    extrapolate,
    per_position,
    rollback_metric,
    wilson,
)
from specfleet.runtime.sim_model import expected_accepted, expected_draft_acceptance_rate

# Each re-probe that ends disabled again doubles the next back-off, this many times at most.
MAX_REPROBE_DOUBLINGS = 4
# A trial whose measured gain clears minImprovement while its lower bound does not yet
# runs on, up to this many times canaryWindows: a sequential test, not a fixed length.
TRIAL_EXTENSION = 3
# A window that has not collected minDraftTokens yet: neither conclusive nor a gap.
COLLECTING = "Collecting"
# Traffic, no drafts, and a schedule that drafts nothing at this load: not a gap either.
NOT_DRAFTING = "NotDrafting"
# The load profile a learned schedule is fitted to: the latest intervals' batch per pod.
LOAD_SAMPLES = 24
# Fewer samples than this and a learned schedule waits (one K is tuned meanwhile).
MIN_LOAD_SAMPLES = 4


class ActionKind(StrEnum):
    """What a decision did: the Event reason, the history entry's action, a metric label."""

    START_CANARY = "StartCanary"
    START_IN_PLACE = "StartInPlace"
    IN_PLACE_FALLBACK = "InPlaceFallback"
    PROMOTE = "Promote"
    ABORT = "Abort"
    ROLLBACK = "Rollback"
    STEP_DOWN = "StepDown"
    DISABLE = "Disable"
    REPROBE = "Reprobe"
    KEEP_FASTEST = "KeepFastest"
    STOP_SPECULATION = "StopSpeculation"
    ACCEPTANCE_RECOVERED = "AcceptanceRecovered"
    SPEC_CHANGED = "SpecChanged"
    CLAMP = "Clamp"
    INCONCLUSIVE = "Inconclusive"
    METRICS_UNAVAILABLE = "MetricsUnavailable"
    SPECULATION_MISSING = "SpeculationMissing"


# The decisions that move K down or switch speculation off because of the floor.
ROLLBACK_ACTIONS = frozenset({ActionKind.ROLLBACK, ActionKind.STEP_DOWN, ActionKind.DISABLE})
# Every decision the floor causes: a rollback, or keeping the fastest K under it.
FLOOR_ACTIONS = ROLLBACK_ACTIONS | {ActionKind.KEEP_FASTEST}


@dataclass(frozen=True)
class Action:
    """One thing worth an Event and a metric."""

    kind: str
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Decided:
    status: SpeculativeModelStatus
    actions: list[Action] = field(default_factory=list)


# ----------------------------------------------------------------------------- predictor


@dataclass(frozen=True)
class Prediction:
    tokens: int
    acceptance_rate: float
    mean_length: float
    metric: float
    goodput: float


def goodput_at(mean_length: float, k: int, batch: float, cost: FittedStepCost) -> float:
    """Generated tokens per second of one pod at `batch` decoding requests (k=0: plain)."""
    running = max(1.0, batch)
    return running * mean_length * 1000.0 / speed.step_ms(cost, k, running)


def predict(
    conditional: Sequence[float],
    k: int,
    batch: float,
    metric: RollbackMetric,
    cost: FittedStepCost,
) -> Prediction:
    """Expected acceptance, acceptance length, rollback metric and goodput at K=k."""
    rates = extrapolate(conditional, k)
    mean_length = 1.0 + expected_accepted(rates, k)
    return Prediction(
        k,
        expected_draft_acceptance_rate(rates, k),
        mean_length,
        expected_rollback_metric(metric, rates, k),
        goodput_at(mean_length, k, batch, cost),
    )


def window_conditional(window: TrackWindow) -> list[float]:
    """Measured conditional acceptance per position of a window.

    Without the per-position series, a constant conditional equal to the draft acceptance
    rate is assumed: it under-predicts every K (acceptance falls with depth), which is the
    safe direction.
    """
    positions = [e.value for e in per_position(window)]
    if positions and any(positions):
        return conditional_acceptance(positions)
    return [draft_acceptance_rate(window).value]


def _predict_ks(
    spec: SpeculativeModelSpec, conditional: Sequence[float], batch: float, cost: FittedStepCost
) -> dict[int, Prediction]:
    return {
        k: predict(conditional, k, batch, spec.rollback.metric, cost)
        for k in range(spec.speculation.min_tokens, spec.speculation.max_tokens + 1)
    }


def predictions(
    spec: SpeculativeModelSpec, window: TrackWindow, cost: FittedStepCost
) -> dict[int, Prediction]:
    """Predictions for every K the spec allows, from one window's per-position rates."""
    return _predict_ks(spec, window_conditional(window), window.batch_per_pod, cost)


def _fastest_and_plain(
    spec: SpeculativeModelSpec, conditional: Sequence[float], batch: float, cost: FittedStepCost
) -> tuple[Prediction, float]:
    """The K the spec allows with the best predicted goodput, and plain decoding's."""
    fastest = max(_predict_ks(spec, conditional, batch, cost).values(), key=lambda p: p.goodput)
    return fastest, goodput_at(1.0, 0, batch, cost)


# ----------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class Judged:
    """A stable or canary window, judged."""

    window: TrackWindow | None
    conclusive: bool
    reason: str
    rate: Estimate | None = None
    metric: Estimate | None = None
    detail: str | None = None  # words beside the reason, for the condition's message

    @property
    def goodput(self) -> float | None:
        if self.window is None or self.window.seconds <= 0:
            return None
        return self.window.generation_tokens / self.window.seconds


def judge(spec: SpeculativeModelSpec, window: TrackWindow | None, baseline: float | None) -> Judged:
    """Whether a window is conclusive, and its rate and rollback metric if so."""
    if window is None:
        return Judged(None, False, "NoData")
    values = (
        window.drafts,
        window.draft_tokens,
        window.accepted_tokens,
        window.generation_tokens,
        window.seconds,
        *window.accepted_per_position,
    )
    if not all(math.isfinite(v) for v in values):
        return Judged(window, False, "NotANumber")
    if window.generation_tokens <= 0 and window.draft_tokens <= 0:
        return Judged(window, False, "NoTraffic")
    if window.draft_tokens <= 0:
        return Judged(window, False, "NoDrafts")
    if window.draft_tokens < spec.tuning.min_draft_tokens:
        return Judged(window, False, "TooFewDraftTokens")
    rate = draft_acceptance_rate(window)
    metric = rollback_metric(window, spec.rollback.metric, baseline)
    if metric is None and spec.rollback.metric is RollbackMetric.FIRST_POSITION_ACCEPTANCE:
        return Judged(window, False, "NoPerPositionData", rate)
    return Judged(window, True, "Conclusive", rate, metric)


def _window_of(collected: OpenWindow) -> TrackWindow:
    counts = collected.model_dump(exclude={"since", "tokens", "accepted_per_position"})
    return TrackWindow(**counts, accepted_per_position=tuple(collected.accepted_per_position))


def _collect(
    collected: OpenWindow | None, window: TrackWindow, tokens: int, now: datetime
) -> OpenWindow:
    """`window` added to the counts collected so far (pods and gauges: the latest)."""
    base = collected or OpenWindow(since=now - timedelta(seconds=window.seconds), tokens=tokens)
    positions = max(len(base.accepted_per_position), len(window.accepted_per_position))

    def at(values: Sequence[float], i: int) -> float:
        return values[i] if i < len(values) else 0.0

    return OpenWindow(
        since=base.since,
        tokens=tokens,
        drafts=base.drafts + window.drafts,
        draft_tokens=base.draft_tokens + window.draft_tokens,
        accepted_tokens=base.accepted_tokens + window.accepted_tokens,
        accepted_per_position=[
            at(base.accepted_per_position, i) + at(window.accepted_per_position, i)
            for i in range(positions)
        ],
        generation_tokens=base.generation_tokens + window.generation_tokens,
        seconds=base.seconds + window.seconds,
        pod_seconds=base.pod_seconds + window.pod_seconds,
        pods=window.pods,
        running_requests=window.running_requests,
        waiting_requests=window.waiting_requests,
        decode_seconds=base.decode_seconds + window.decode_seconds,
        decode_steps=base.decode_steps + window.decode_steps,
        engine_steps=base.engine_steps + window.engine_steps,
    )


def _totals_add(totals: TrackTotals, window: TrackWindow) -> TrackTotals:
    point = speed.measured(window)
    step = point[0] / 1000.0 if point else None
    return TrackTotals(
        drafts=totals.drafts + window.drafts,
        draft_tokens=totals.draft_tokens + window.draft_tokens,
        accepted_tokens=totals.accepted_tokens + window.accepted_tokens,
        accepted_first=totals.accepted_first + sum(window.accepted_per_position[:1]),
        generated_tokens=totals.generated_tokens + window.generation_tokens,
        seconds=totals.seconds + window.pod_seconds,
        windows=totals.windows + 1,
        decode_seconds=totals.decode_seconds + (window.decode_seconds if step else 0.0),
        decode_steps=totals.decode_steps + (window.decode_steps if step else 0.0),
        engine_steps=totals.engine_steps + (window.engine_steps if step else 0.0),
        timed_windows=totals.timed_windows + (1 if step else 0),
        step_seconds_sum=totals.step_seconds_sum + (step or 0.0),
        step_seconds_squares=totals.step_seconds_squares + (step or 0.0) ** 2,
    )


def _totals_rate(totals: TrackTotals) -> Estimate:
    if totals.draft_tokens <= 0:
        return Estimate(0.0, 0.0, 1.0)
    return wilson(totals.accepted_tokens / totals.draft_tokens, totals.drafts)


def _totals_metric(totals: TrackTotals, metric: RollbackMetric) -> Estimate | None:
    """A trial track's rollback metric over its windows (None: RelativeToBaseline, which a
    trial does not judge)."""
    if metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE:
        return _totals_rate(totals)
    if metric is RollbackMetric.FIRST_POSITION_ACCEPTANCE and totals.drafts > 0:
        return wilson(totals.accepted_first / totals.drafts, totals.drafts)
    return None


def _step_spread(totals: TrackTotals) -> float:
    """Relative standard error of a track's mean step time, from its windows' spread."""
    n = totals.timed_windows
    if n < 2 or totals.step_seconds_sum <= 0:
        return 0.0
    mean = totals.step_seconds_sum / n
    variance = max(0.0, (totals.step_seconds_squares - n * mean * mean) / (n - 1))
    return math.sqrt(variance / n) / mean


def goodput_gain(
    before: TrackTotals,
    before_k: int,
    after: TrackTotals,
    after_k: int,
    batch: float,
    cost: FittedStepCost,
) -> tuple[Estimate, str]:
    """Relative goodput gain of `after` over `before` at the same load, with bounds, and
    what it rests on.

    Goodput at a load is acceptance length over step time. With step times measured on
    both tracks, each track's own is used, the candidate's moved to the stable track's
    batch by the fitted cost (a faster K serves the same arrivals with fewer requests in
    flight: comparing raw step times would credit it with that). Without them both step
    times come from the fitted cost. Measured tokens per second would not do: below
    saturation both tracks serve exactly the offered load whatever their K. The low bound
    sets after's acceptance at its lower confidence bound and before's at its upper one,
    and the step times apart by their windows' spread.
    """
    a, b = _totals_rate(after), _totals_rate(before)
    measured = before.timed_windows > 0 and after.timed_windows > 0
    if measured:
        matched = before.decode_steps / before.engine_steps
        after_batch = after.decode_steps / after.engine_steps
        before_ms = 1000.0 * before.decode_seconds / before.decode_steps
        after_ms = (
            1000.0
            * after.decode_seconds
            / after.decode_steps
            * speed.step_ms(cost, after_k, matched)
            / speed.step_ms(cost, after_k, after_batch)
        )
        spread = Z_ONE_SIDED_95 * math.hypot(_step_spread(before), _step_spread(after))
        basis = f"measured step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {matched:.1f}"
    else:
        matched = batch
        before_ms = speed.step_ms(cost, before_k, batch)
        after_ms = speed.step_ms(cost, after_k, batch)
        spread = 0.0
        basis = f"modelled step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {batch:.1f}"

    def gain(rate_after: float, rate_before: float, widen: float) -> float:
        length_after = (1 + rate_after * after_k) / (after_ms * (1 + widen))
        length_before = (1 + rate_before * before_k) / (before_ms * (1 - widen))
        return length_after / length_before - 1

    estimate = Estimate(
        gain(a.value, b.value, 0.0), gain(a.low, b.high, spread), gain(a.high, b.low, -spread)
    )
    return estimate, basis


def schedule_gain(
    before: TrackTotals,
    after: TrackTotals,
    after_bands: Sequence[ScheduledBand],
    cost: FittedStepCost,
) -> tuple[Estimate, str]:
    """Relative per-request speed of `after` over `before` when either runs a schedule.

    Each track's own decode: tokens (one a request-step, plus those accepted) over the
    step time its requests saw, with the candidate moved to the stable track's batch by
    the fitted cost at the K its bands (one band: one K) run there. With a K that varies by step
    `1 + rate * K` has no single K; this count does not need one. Bounds as in
    `goodput_gain`: acceptance at its bounds, step times apart by their spread.
    """
    a, b = _totals_rate(after), _totals_rate(before)
    matched = before.decode_steps / before.engine_steps
    after_batch = after.decode_steps / after.engine_steps

    k_after = schedule.k_at(after_bands, matched)
    moved = speed.step_ms(cost, k_after, matched) / speed.step_ms(cost, k_after, after_batch)
    spread = Z_ONE_SIDED_95 * math.hypot(_step_spread(before), _step_spread(after))

    def per_request(totals: TrackTotals, rate: float, scale: float) -> float:
        tokens = totals.decode_steps + rate * totals.draft_tokens
        return tokens / (totals.decode_seconds * scale)

    def gain(rate_after: float, rate_before: float, widen: float) -> float:
        faster = per_request(after, rate_after, moved * (1 + widen))
        return faster / per_request(before, rate_before, 1 - widen) - 1

    after_ms = 1000.0 * after.decode_seconds / after.decode_steps * moved
    before_ms = 1000.0 * before.decode_seconds / before.decode_steps
    basis = f"measured step {after_ms:.1f} ms vs {before_ms:.1f} ms at batch {matched:.1f}"
    estimate = Estimate(
        gain(a.value, b.value, 0.0), gain(a.low, b.high, spread), gain(a.high, b.low, -spread)
    )
    return estimate, basis


# ----------------------------------------------------------------------------- decide


class _Run:
    """The mutable working state of one `decide` call (a deep copy of status)."""

    def __init__(
        self,
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        now: datetime,
        generation: int | None,
    ) -> None:
        self.spec = spec
        self.status = status
        self.sp = status.speculation
        self.now = now
        self.generation = generation
        self.actions: list[Action] = []
        self.drafting = spec.draft.method.runtime.drafting
        self.cost = speed.cost_in(status.step_cost, self.drafting)
        self.floor = spec.rollback.min_acceptance
        self.margin = spec.tuning.acceptance_margin

    def act(
        self,
        kind: ActionKind,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        from_tokens: int | None = None,
        to_tokens: int | None = None,
        acceptance: float | None = None,
        goodput: float | None = None,
        record: bool = True,
    ) -> None:
        self.actions.append(Action(kind, reason, message, warning))
        if record:
            entry = Decision(
                time=self.now,
                action=kind,
                from_tokens=from_tokens,
                to_tokens=to_tokens,
                reason=f"{reason}: {message}",
                acceptance=acceptance,
                goodput=goodput,
            )
            self.status.history = [*self.status.history, entry][-HISTORY_LIMIT:]

    def condition(
        self, type: ConditionType, status: ConditionStatus, reason: str, message: str
    ) -> None:
        self.status.conditions = set_condition(
            self.status.conditions,
            type,
            status,
            reason,
            message,
            self.now,
            self.generation,
        )

    def changed(self, tokens: int) -> None:
        """K in effect changed: restart cooldown and every per-K memory."""
        self.sp.tokens = tokens
        self.sp.changed_at = self.now
        self.sp.failing_windows = 0
        self.sp.windows = 0
        self.sp.baseline_acceptance = None
        self.status.open_windows = None

    def learn_speed(self, tokens: int, window: TrackWindow | None) -> None:
        """Add a window's step time at K=tokens to the fitted cost."""
        if window is None:
            return
        self.status.step_cost = speed.record(
            self.status.step_cost, tokens, window, self.now, self.drafting
        )
        self.cost = self.status.step_cost.fitted

    def collected(self, track: Track) -> OpenWindow | None:
        windows = self.status.open_windows
        return None if windows is None else getattr(windows, track)

    def keep_collecting(self, track: Track, collected: OpenWindow | None) -> None:
        windows = (self.status.open_windows or OpenWindows()).model_copy(update={track: collected})
        self.status.open_windows = (
            None if windows.stable is None and windows.canary is None else windows
        )

    def seconds(self, duration: str) -> timedelta:
        return parse_duration(duration)


def decide(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
    *,
    generation: int | None = None,
) -> Decided:
    """Judge one observation and decide what K the stable and canary pods should run.

    `generation` is the object's metadata.generation, written into the conditions.
    """
    run = _Run(spec, status.model_copy(deep=True), now, generation)
    sp = run.sp
    if spec.draft.method is DraftMethod.NONE:
        run.condition(
            ConditionType.SPECULATION_ACTIVE, "False", "PlainDecoding", "draft.method is none"
        )
        return Decided(run.status, run.actions)
    _sync_with_spec(run)
    _learn_speed(run, observation)

    if observation.prometheus_error is not None:
        stable = Judged(None, False, PROMETHEUS_UNAVAILABLE, detail=observation.prometheus_error)
    else:
        k = 0 if sp.disabled or sp.tokens is None else sp.tokens
        running = None if sp.disabled else sp.schedule
        stable = _judge_collected(
            run, "stable", observation.stable, k, sp.baseline_acceptance, running
        )
    _record_acceptance(run, stable, observation)
    _record_load(run, observation)
    _speculation_condition(run, observation)
    if sp.disabled:
        if run.status.canary is not None:  # a re-probe on a canary
            _feed_trial(run, stable, observation)
        else:
            _maybe_reprobe(run, stable)
        return Decided(run.status, run.actions)
    _metrics_condition(run, stable)

    trial = run.status.canary
    in_place = trial is not None and trial.in_place
    if stable.conclusive:
        _count_stable_window(run, stable)
        below = condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR)
        if in_place and _floor_caps_k(spec):
            if _stable_failing(run, stable):  # the candidate K fails a floor that caps K
                _end_trial(
                    run, promote=False, reason="BelowFloor", message=_floor_message(run, stable)
                )
                return Decided(run.status, run.actions)
        elif below == "True":
            if _stable_failing(run, stable):
                # Re-checked each window; while speculation pays, tuning goes on below.
                _below_floor(run, stable, _floor_message(run, stable))
                if sp.disabled:
                    return Decided(run.status, run.actions)
            elif stable.metric is not None and stable.metric.low >= run.floor + run.margin:
                _recovered(run, stable)  # the margin keeps noise at the floor from flapping
        elif sp.failing_windows >= spec.rollback.failure_limit:
            if trial is not None:
                _end_trial(
                    run,
                    promote=False,
                    reason="StableRollingBack",
                    message="the stable K is failing the floor",
                )
            _rollback(run, stable)
            return Decided(run.status, run.actions)

    if run.status.canary is not None:
        _feed_trial(run, stable, observation)
    elif (
        spec.tuning.enabled
        and stable.conclusive
        and sp.failing_windows == 0
        and sp.windows >= 1
        and (sp.changed_at is None or now - sp.changed_at >= run.seconds(spec.tuning.cooldown))
        # A schedule decides per load where drafting stops; no switch for the whole model.
        and (
            spec.speculation.schedule.mode is not ScheduleMode.OFF
            or not _stop_if_plain_is_faster(run, stable)
        )
    ):
        _propose(run, stable)
    return Decided(run.status, run.actions)


def _learn_speed(run: _Run, observation: Observation) -> None:
    """Feed this interval's step times to the fitted cost: the stable track's at the K it
    ran for the whole window (not one that straddles a change of K), the canary's at its
    candidate."""
    sp, window = run.sp, observation.stable
    # A track under a schedule ran several Ks in one window: no single K to learn it at.
    flat = sp.disabled or sp.schedule is None
    if (
        window is not None
        and flat
        and (sp.changed_at is None or run.now - timedelta(seconds=window.seconds) >= sp.changed_at)
    ):
        run.learn_speed(0 if sp.disabled or sp.tokens is None else sp.tokens, window)
    trial = run.status.canary
    if trial is not None and not trial.in_place and sp.candidate_schedule is None:
        # The canary pod is created for its candidate: its windows are all at that K.
        run.learn_speed(trial.candidate_tokens, observation.canary)


def _judge_collected(
    run: _Run,
    track: Track,
    window: TrackWindow | None,
    tokens: int,
    baseline: float | None,
    running: Sequence[ScheduledBand] | None = None,
) -> Judged:
    """Judge the track's window added to what it collected before, so that a window with
    too few draft tokens grows over the next intervals instead of being thrown away: at
    one request in flight a decision takes a few intervals, not forever. A window that
    reaches tuning.maxWindowAge unjudged is dropped as inconclusive."""
    collected = run.collected(track)
    max_age = run.seconds(run.spec.tuning.max_window_age)
    if collected is not None and (
        # Left over from another K, or from before a gap with no data at all.
        collected.tokens != tokens
        or run.now - collected.since > max_age + run.seconds(run.spec.tuning.interval)
    ):
        collected = None
    alone = judge(run.spec, window, baseline)
    if window is None or alone.reason in ("NoData", "NotANumber", "NoTraffic"):
        run.keep_collecting(track, collected)
        return alone
    if alone.reason == "NoDrafts" and running and 0 in (band.tokens for band in running):
        run.keep_collecting(track, collected)
        detail = "the schedule drafts nothing at this load (K=0)"
        return Judged(window, False, NOT_DRAFTING, detail=detail)
    grown = _collect(collected, window, tokens, run.now)
    # Its acceptance per position depends on the Ks the schedule drafted with.
    ks = schedule.drafting_ks(running) if running else ()
    judged = judge(run.spec, dataclasses.replace(_window_of(grown), ks=ks), baseline)
    age = run.now - grown.since
    if judged.reason == "TooFewDraftTokens" and age < max_age:
        run.keep_collecting(track, grown)
        detail = (
            f"{grown.draft_tokens:.0f} of {run.spec.tuning.min_draft_tokens} draft tokens "
            f"in {age.total_seconds():.0f}s"
        )
        return Judged(judged.window, False, COLLECTING, judged.rate, detail=detail)
    run.keep_collecting(track, None)
    return judged


def sync_with_spec(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    now: datetime,
    *,
    generation: int | None = None,
) -> Decided:
    """Status after a spec edit, on every reconcile (not only when a window is judged):
    a new `speculation.tokens` resets K, clears a trial and re-enables speculation, and
    K or a trial outside new bounds is clamped or ended; each change is in history."""
    run = _Run(spec, status.model_copy(deep=True), now, generation)
    _sync_with_spec(run)
    return Decided(run.status, run.actions)


def _sync_with_spec(run: _Run) -> None:
    """Fill unset status, take a new K from the spec, keep K within [min, max]."""
    spec, sp = run.spec, run.sp
    low, high = spec.speculation.min_tokens, spec.speculation.max_tokens
    requested = spec.speculation.tokens
    if sp.drafting != run.drafting:
        run.status.step_cost = None  # measured for another drafting style
        run.cost = speed.prior(run.drafting)
    sp.drafting = run.drafting
    written = spec.speculation.schedule
    # A status from before schedules existed saw the default: no change, nothing reset.
    schedule_changed = (sp.requested_schedule or Schedule()) != written
    if (
        sp.tokens is None
        or sp.requested_tokens is None
        or sp.requested_tokens != requested
        or schedule_changed
    ):
        if sp.tokens is not None and sp.requested_tokens is not None:
            if schedule_changed:
                what = f"spec.speculation.schedule is now {written.mode.value}"
            else:
                what = f"spec.speculation.tokens is now {requested}"
            run.act(
                ActionKind.SPEC_CHANGED,
                "ScheduleChanged" if schedule_changed else "RequestedTokensChanged",
                f"{what}; tuning restarts from it",
                from_tokens=sp.tokens,
                to_tokens=requested,
            )
        run.status.canary = None
        sp.candidate_tokens = None
        sp.candidate_schedule = None
        sp.rejected_schedule = None
        sp.requested_schedule = written
        sp.schedule = sp.last_known_good_schedule = schedule.fixed(spec)
        start = schedule.largest(sp.schedule) if sp.schedule else requested
        sp.canary_started_at = None
        sp.disabled = False
        sp.disabled_reason = None
        sp.reprobe_at = None
        sp.rejected_tokens = []
        sp.rejected_until = None
        sp.failed_reprobes = 0
        sp.reprobed_at = None
        _clear_below_floor(run, "SpecChanged", f"spec.speculation.tokens is now {requested}")
        sp.requested_tokens = requested
        sp.last_known_good_tokens = start
        run.changed(start)
        sp.changed_at = None  # the spec's K needs no cooldown before tuning starts
    assert sp.tokens is not None
    if sp.schedule is None and not low <= sp.tokens <= high:
        clamped = min(high, max(low, sp.tokens))
        run.act(
            ActionKind.CLAMP,
            "OutsideRange",
            f"K={sp.tokens} is outside speculation [{low}, {high}]; using {clamped}",
            from_tokens=sp.tokens,
            to_tokens=clamped,
        )
        run.changed(clamped)
    if sp.last_known_good_tokens is not None and not low <= sp.last_known_good_tokens <= high:
        sp.last_known_good_tokens = min(high, max(low, sp.last_known_good_tokens))
    trial = run.status.canary
    if trial is not None and not low <= trial.candidate_tokens <= high:
        _end_trial(run, promote=False, reason="OutsideRange", message="candidate outside the range")
    _restart_trial_if_scaled(run)
    if sp.rejected_until is not None and run.now >= sp.rejected_until:
        sp.rejected_tokens = []
        sp.rejected_schedule = None
        sp.rejected_until = None


def _restart_trial_if_scaled(run: _Run) -> None:
    """A scaler changed spec.replicas during a trial: the load per pod changed with it, and
    so may the best K. The windows collected so far compare the two Ks at another load
    than the ones to come, so the trial ends unjudged (not rejected); the next candidate
    is proposed after the cooldown, from windows at the new size."""
    trial, replicas = run.status.canary, run.spec.replicas
    if trial is None:
        return
    if trial.stable_replicas is None:  # a trial started before replicas were recorded
        trial.stable_replicas = replicas
    if trial.stable_replicas == replicas:
        return
    _end_trial(
        run,
        promote=False,
        reason="FleetScaled",
        message=f"spec.replicas went from {trial.stable_replicas} to {replicas} during the "
        "trial; its windows are no longer at matched load, so it restarts at the new size",
        reject=False,
        judged=False,
    )


def _record_acceptance(run: _Run, judged: Judged, observation: Observation) -> None:
    window = judged.window
    positions = [round(e.value, 4) for e in per_position(window)] if window else []
    rate = judged.rate or (
        draft_acceptance_rate(window) if window and window.draft_tokens else None
    )
    mean_length = 1 + window.accepted_tokens / window.drafts if window and window.drafts else None
    run.status.acceptance = AcceptanceWindow(
        rate=round(rate.value, 4) if rate else None,
        judged=_judged_figure(run, judged),
        lower_bound=round(judged.metric.low, 4) if judged.metric else None,
        mean_length=round(mean_length, 4) if mean_length is not None else None,
        per_position=positions,
        draft_tokens=int(window.draft_tokens) if window else 0,
        goodput=round(judged.goodput, 2) if judged.goodput is not None else None,
        window_seconds=window.seconds if window else None,
        conclusive=judged.conclusive,
        reason=None
        if judged.conclusive
        else ("SpeculationDisabled" if run.sp.disabled else judged.reason),
        measured_at=run.now,
        pods_left_out=[
            PodLeftOut(pod=pod, reason=error.reason, message=error.message)
            for pod, error in sorted(observation.errors.items())[:LEFT_OUT_LIMIT]
        ]
        or None,
        more_pods_left_out=len(observation.errors) - LEFT_OUT_LIMIT
        if len(observation.errors) > LEFT_OUT_LIMIT
        else None,
    )


def _judged_figure(run: _Run, judged: Judged) -> float | None:
    """The rollback metric's value in the stable window, inconclusive ones included (as
    `rate` is), so ACCEPT shows what the floor judges."""
    window = judged.window
    metric = judged.metric or (
        rollback_metric(window, run.spec.rollback.metric, run.sp.baseline_acceptance)
        if window and window.draft_tokens > 0
        else None
    )
    return round(metric.value, 4) if metric else None


def _record_load(run: _Run, observation: Observation) -> None:
    """The stable pods' batch this interval, for the load profile a schedule is fitted to."""
    window = observation.stable
    if window is None or window.generation_tokens <= 0 or window.batch_per_pod <= 0:
        return
    run.sp.load = [*run.sp.load, round(window.batch_per_pod, 2)][-LOAD_SAMPLES:]


def _speculation_condition(run: _Run, observation: Observation) -> None:
    sp = run.sp
    if sp.disabled:
        run.condition(
            ConditionType.SPECULATION_ACTIVE,
            "False",
            "NoKPays" if sp.plain_decoding_chosen else "Disabled",
            sp.disabled_reason or "speculation disabled by rollback",
        )
    elif observation.speculation_missing:
        was = condition_status(run.status.conditions, ConditionType.SPECULATION_ACTIVE)
        message = (
            "pods serve requests but export no vllm:spec_decode_* counters: "
            "the draft is not running"
        )
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", "NotExported", message)
        if was != "False":
            run.act(
                ActionKind.SPECULATION_MISSING, "NotExported", message, warning=True, record=False
            )
    elif observation.stable is not None and observation.stable.drafts > 0:
        run.condition(
            ConditionType.SPECULATION_ACTIVE, "True", "Drafting", f"drafting K={sp.tokens}"
        )


def _metrics_condition(run: _Run, judged: Judged) -> None:
    sp, limit = run.sp, run.spec.tuning.max_inconclusive_windows
    if judged.conclusive:
        sp.inconclusive_windows = 0
        run.condition(
            ConditionType.METRICS_AVAILABLE, "True", "Conclusive", "the last window was conclusive"
        )
        return
    why = f"{judged.reason}: {judged.detail}" if judged.detail else judged.reason
    if judged.reason in (COLLECTING, NOT_DRAFTING):
        # Not a gap in the metrics: the window is still growing towards a decision, or
        # the schedule does not draft at this load.
        if not any(c.type is ConditionType.METRICS_AVAILABLE for c in run.status.conditions):
            run.condition(ConditionType.METRICS_AVAILABLE, "Unknown", judged.reason, why)
        return
    sp.inconclusive_windows += 1
    message = f"window inconclusive ({why}); {sp.inconclusive_windows} in a row"
    run.act(ActionKind.INCONCLUSIVE, judged.reason, message, record=False)
    was = condition_status(run.status.conditions, ConditionType.METRICS_AVAILABLE)
    if sp.inconclusive_windows >= limit:
        # failureLimit counts failing windows in a row. A gap long enough to call the
        # metrics unavailable ends the row: windows before it (another hour, another
        # load, another set of pods) do not add up with the ones after it to a rollback.
        sp.failing_windows = 0
        run.condition(ConditionType.METRICS_AVAILABLE, "False", judged.reason, message)
        if was != "False":
            run.act(
                ActionKind.METRICS_UNAVAILABLE, judged.reason, message, warning=True, record=False
            )
    elif not any(c.type is ConditionType.METRICS_AVAILABLE for c in run.status.conditions):
        run.condition(ConditionType.METRICS_AVAILABLE, "Unknown", judged.reason, message)


def _stable_failing(run: _Run, judged: Judged) -> bool:
    return judged.metric is not None and judged.metric.low < run.floor


def _floor_caps_k(spec: SpeculativeModelSpec) -> bool:
    """Whether the rollback metric depends on K (vLLM's draft acceptance rate falls as K
    grows). Block acceptance does not: the floor then judges the draft, not a K, so no K
    is chosen or refused for it, and rolling back to another K cannot help."""
    return spec.rollback.metric is RollbackMetric.DRAFT_ACCEPTANCE_RATE


def _floor_message(run: _Run, judged: Judged) -> str:
    low = judged.metric.low if judged.metric else float("nan")
    return (
        f"{run.spec.rollback.metric.value} lower bound {low:.3f} < "
        f"floor {run.floor:.3f} at K={run.sp.tokens}"
    )


def _count_stable_window(run: _Run, judged: Judged) -> None:
    sp = run.sp
    sp.windows += 1
    if (
        run.spec.rollback.metric is RollbackMetric.RELATIVE_TO_BASELINE
        and sp.baseline_acceptance is None
    ):
        # The first conclusive window at a K is its baseline: measured, not judged.
        sp.baseline_acceptance = round(judged.rate.value, 6) if judged.rate else None
        sp.failing_windows = 0
        return
    sp.failing_windows = sp.failing_windows + 1 if _stable_failing(run, judged) else 0
    held = sp.failing_windows == 0 and sp.windows >= 2 * run.spec.rollback.failure_limit
    if sp.reprobed_at is not None and held:
        sp.reprobed_at = None  # the re-probe held: the back-off starts over
        sp.failed_reprobes = 0


def _rollback(run: _Run, judged: Judged) -> None:
    """failureLimit failing windows: last known good K, else step down, else the fastest
    K if speculation still pays (or plain decoding)."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    current = sp.tokens
    predicted = predictions(spec, judged.window, run.cost)
    why = _floor_message(run, judged) + f" for {sp.failing_windows} windows"
    metric = judged.metric.value if judged.metric else None
    lkg = sp.last_known_good_tokens
    if not _floor_caps_k(spec):
        _below_floor(run, judged, why)
        return
    if sp.schedule is not None:
        _roll_back_schedule(run, judged, why)
        return
    # A K that failed the floor is not proposed again, nor any larger one, for a while.
    sp.rejected_tokens = sorted(
        {*sp.rejected_tokens, *range(current, spec.speculation.max_tokens + 1)}
    )
    sp.rejected_until = run.now + run.seconds(spec.rollback.reprobe_after)
    if (
        lkg is not None
        and lkg != current
        and lkg in predicted
        and predicted[lkg].metric >= run.floor
    ):
        run.act(
            ActionKind.ROLLBACK,
            "BelowFloor",
            f"{why}; back to last known good K={lkg}",
            warning=True,
            from_tokens=current,
            to_tokens=lkg,
            acceptance=metric,
            goodput=judged.goodput,
        )
        run.changed(lkg)
        return
    lower = [k for k, p in predicted.items() if k < current and p.metric >= run.floor + run.margin]
    if lower:
        k = max(lower)
        run.act(
            ActionKind.STEP_DOWN,
            "BelowFloor",
            f"{why}; K={k} is the largest predicted to clear it ({predicted[k].metric:.3f})",
            warning=True,
            from_tokens=current,
            to_tokens=k,
            acceptance=metric,
            goodput=judged.goodput,
        )
        sp.last_known_good_tokens = k
        run.changed(k)
        return
    _below_floor(run, judged, why)


def _roll_back_schedule(run: _Run, judged: Judged, why: str) -> None:
    """A schedule fails as a whole: back to the last known good schedule if there is
    one, else to one K (the last known good, else the schedule's smallest drafting K);
    a failure after that goes down the chain for one K."""
    sp = run.sp
    assert sp.schedule is not None and sp.tokens is not None
    failed = sp.schedule
    sp.rejected_schedule = failed
    sp.rejected_until = run.now + run.seconds(run.spec.rollback.reprobe_after)
    lkg = sp.last_known_good_schedule
    if lkg is not None and lkg != failed:
        sp.schedule, k = lkg, schedule.largest(lkg)
        target = f"the last known good schedule, {schedule.describe(lkg)}"
    else:
        k = sp.last_known_good_tokens or min(schedule.drafting_ks(failed))
        sp.schedule, sp.last_known_good_schedule = None, None
        target = f"K={k} at every load"
    run.act(
        ActionKind.ROLLBACK,
        "BelowFloor",
        f"{why}; schedule {schedule.describe(failed)} back to {target}",
        warning=True,
        from_tokens=sp.tokens,
        to_tokens=k,
        acceptance=judged.metric.value if judged.metric else None,
        goodput=judged.goodput,
    )
    run.changed(k)


def _below_floor(run: _Run, judged: Judged, why: str) -> None:
    """No K clears the floor. Plain decoding only if speculation no longer pays (or the
    policy asks for it); otherwise the fastest K stays, flagged AcceptanceBelowFloor."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    current = sp.tokens
    fastest, plain = _fastest_and_plain(
        spec, window_conditional(judged.window), judged.window.batch_per_pod, run.cost
    )
    gain = fastest.goodput / plain - 1
    metric = judged.metric.value if judged.metric else None
    pays = f"K={fastest.tokens} is predicted {gain:+.1%} over plain decoding"
    if spec.rollback.below_floor is BelowFloorPolicy.KEEP_FASTEST and gain > 0:
        # The K in effect is the fastest measured so far; trials may still find a faster
        # one. A K changed on a prediction alone would be untested.
        message = f"{why}; no K clears it, but {pays}: keeping K={current}"
        if condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR) != (
            "True"
        ):
            run.act(
                ActionKind.KEEP_FASTEST,
                "NoKClearsFloor",
                message,
                warning=True,
                from_tokens=current,
                to_tokens=current,
                acceptance=metric,
                goodput=judged.goodput,
            )
        sp.failing_windows = 0
        run.condition(ConditionType.ACCEPTANCE_BELOW_FLOOR, "True", "NoKClearsFloor", message)
        return
    if spec.rollback.below_floor is BelowFloorPolicy.DISABLE:
        reason = f"{why}; no K clears it and rollback.belowFloor is Disable ({pays})"
    else:
        reason = f"{why}; speculation no longer pays: {pays}"
    _disable(run, reason, metric, judged.goodput)


def _disable(
    run: _Run,
    reason: str,
    metric: float | None,
    goodput: float | None,
    kind: ActionKind = ActionKind.DISABLE,
    why: str = "NoKClearsFloor",
) -> None:
    sp = run.sp
    run.act(
        kind,
        why,
        reason + "; serving without speculation",
        warning=True,
        from_tokens=sp.tokens,
        to_tokens=None,
        acceptance=metric,
        goodput=goodput,
    )
    if sp.reprobed_at is not None:
        sp.failed_reprobes += 1
    sp.reprobed_at = None
    sp.disabled = True
    sp.disabled_reason = reason
    sp.disabled_acceptance = None
    sp.reprobe_at = _next_reprobe(run)
    sp.changed_at = run.now
    sp.failing_windows = 0
    sp.windows = 0
    sp.baseline_acceptance = None
    run.status.open_windows = None
    run.condition(ConditionType.SPECULATION_ACTIVE, "False", "Disabled", reason)
    _clear_below_floor(run, "Disabled", "speculation is off")


def _next_reprobe(run: _Run) -> datetime:
    """reprobeAfter from now, doubled for each re-probe that failed in a row."""
    doublings = min(run.sp.failed_reprobes, MAX_REPROBE_DOUBLINGS)
    return run.now + run.seconds(run.spec.rollback.reprobe_after) * (1 << doublings)


def _stop_if_plain_is_faster(run: _Run, judged: Judged) -> bool:
    """Plain decoding when the fitted cost says no K pays at this load (a large batch
    makes verification compute-bound): not a rollback, the draft is fine."""
    spec = run.spec
    assert judged.window is not None
    conditional = window_conditional(judged.window)
    batch = judged.window.batch_per_pod
    fastest, plain = _fastest_and_plain(spec, conditional, batch, run.cost)
    if plain < fastest.goodput * (1 + spec.tuning.min_improvement):
        return False
    reason = (
        f"plain decoding is predicted {plain / fastest.goodput - 1:+.1%} over the fastest "
        f"K={fastest.tokens} at batch {batch:.1f}"
    )
    _disable(
        run,
        reason,
        judged.metric.value if judged.metric else None,
        judged.goodput,
        kind=ActionKind.STOP_SPECULATION,
        why="NoKPays",
    )
    run.sp.disabled_acceptance = [round(c, 4) for c in conditional]
    return True


def _recovered(run: _Run, judged: Judged) -> None:
    low = judged.metric.low if judged.metric else float("nan")
    message = (
        f"{run.spec.rollback.metric.value} lower bound {low:.3f} clears the floor "
        f"{run.floor:.3f} again at K={run.sp.tokens}"
    )
    run.act(ActionKind.ACCEPTANCE_RECOVERED, "AboveFloor", message, to_tokens=run.sp.tokens)
    _clear_below_floor(run, "AboveFloor", message)


def _clear_below_floor(run: _Run, reason: str, message: str) -> None:
    if condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR) == "True":
        run.condition(ConditionType.ACCEPTANCE_BELOW_FLOOR, "False", reason, message)


def _maybe_reprobe(run: _Run, stable: Judged) -> None:
    """Try speculation again: after the back-off, or as soon as the fitted cost says the
    acceptance measured before a StopSpeculation would pay at the batch plain decoding
    runs now. On a canary when the strategy has one (the stable pods keep decoding plainly
    until the trial is promoted); in place otherwise."""
    sp, spec = run.sp, run.spec
    k, why = spec.speculation.min_tokens, "BackoffElapsed"
    window = stable.window
    cooled = sp.changed_at is None or run.now - sp.changed_at >= run.seconds(spec.tuning.cooldown)
    # After a re-probe that measured no gain, the prediction waits out the back-off too.
    backed_off = sp.failed_reprobes == 0 or sp.reprobe_at is None or run.now >= sp.reprobe_at
    if (
        sp.disabled_acceptance
        and window is not None
        and speed.measured(window)
        and cooled
        and backed_off
    ):
        best, plain = _fastest_and_plain(
            spec, sp.disabled_acceptance, window.batch_per_pod, run.cost
        )
        if best.goodput >= plain * (1 + spec.tuning.min_improvement):
            k, why = best.tokens, "PredictedGain"
    if why == "BackoffElapsed" and sp.reprobe_at is not None and run.now < sp.reprobe_at:
        return
    if why == "BackoffElapsed" and sp.disabled_acceptance and speed.measured(window):
        return  # stopped for speed: the prediction above decides, not the clock
    waited = f" (back-off doubled {sp.failed_reprobes} times)" if sp.failed_reprobes else ""
    cause = "the back-off" + waited if why == "BackoffElapsed" else "a predicted gain"
    strategy = sp.strategy or spec.tuning.strategy
    if strategy is TuningStrategy.CANARY:
        run.status.canary = CanaryComparison(candidate_tokens=k, stable_replicas=spec.replicas)
        sp.candidate_tokens = k
        sp.canary_started_at = run.now
        run.act(
            ActionKind.REPROBE,
            why,
            f"re-probing K={k} on a canary after {cause}",
            to_tokens=k,
        )
        return
    run.act(
        ActionKind.REPROBE,
        why,
        f"speculation re-enabled at K={k} after {cause}",
        to_tokens=k,
    )
    _enable(run, k)
    sp.reprobed_at = run.now
    run.condition(ConditionType.SPECULATION_ACTIVE, "Unknown", "Reprobing", f"re-probing K={k}")


def _enable(run: _Run, k: int) -> None:
    sp = run.sp
    sp.disabled = False
    sp.disabled_reason = None
    sp.disabled_acceptance = None
    sp.reprobe_at = None
    sp.last_known_good_tokens = k
    sp.inconclusive_windows = 0
    run.changed(k)


def _propose(run: _Run, judged: Judged) -> None:
    """Pick the best candidate K (or schedule) and start a canary (or an in-place trial)."""
    mode = run.spec.speculation.schedule.mode
    if mode is ScheduleMode.FIXED:
        return  # the spec's schedule runs as written
    if mode is ScheduleMode.LEARNED and len(run.sp.load) >= MIN_LOAD_SAMPLES:
        _propose_schedule(run, judged)
        return
    _propose_k(run, judged)


def _propose_schedule(run: _Run, judged: Judged) -> None:
    """The schedule that fits the load the stable pods saw, tried if it is predicted to
    be at least minImprovement faster per request than what runs."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    conditional = window_conditional(judged.window)
    running = sp.schedule or [ScheduledBand(tokens=sp.tokens)]
    best = schedule.learn(spec, sp.load, conditional, run.cost)
    if best is None or best == running:
        return
    if best == sp.rejected_schedule:
        return
    if _floor_caps_k(spec) and any(
        predict(conditional, k, 1.0, spec.rollback.metric, run.cost).metric < run.floor + run.margin
        for k in schedule.drafting_ks(best)
    ):
        return
    now_speed = schedule.speed_over(running, sp.load, conditional, run.cost)
    best_speed = schedule.speed_over(best, sp.load, conditional, run.cost)
    gain = best_speed / now_speed - 1 if now_speed > 0 else math.inf
    if gain < spec.tuning.min_improvement:
        return
    candidate = None if schedule.is_flat(best) else best
    k = schedule.largest(best)
    message = (
        f"{schedule.describe(best)} predicted {gain:+.1%} per-request speed over "
        f"{schedule.describe(running)} across the last {len(sp.load)} intervals' load "
        f"(batch {min(sp.load):.1f} to {max(sp.load):.1f})"
    )
    _start_trial(run, judged, k, candidate, message)


def _start_trial(
    run: _Run, judged: Judged, k: int, candidate: list[ScheduledBand] | None, message: str
) -> None:
    """A canary (or in place, the stable pods) running K=k, or the schedule `candidate`."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    strategy = sp.strategy or spec.tuning.strategy
    acceptance = judged.metric.value if judged.metric else None
    if strategy is TuningStrategy.IN_PLACE:
        before = _totals_add(TrackTotals(), judged.window)
        run.status.canary = CanaryComparison(
            candidate_tokens=k,
            in_place=True,
            previous_tokens=sp.tokens,
            previous_schedule=sp.schedule,
            stable_replicas=spec.replicas,
            stable=before,
        )
        run.act(
            ActionKind.START_IN_PLACE,
            "PredictedGain",
            message,
            from_tokens=sp.tokens,
            to_tokens=k,
            acceptance=acceptance,
            goodput=judged.goodput,
        )
        sp.canary_started_at = run.now
        sp.schedule = candidate
        run.changed(k)
        return
    run.status.canary = CanaryComparison(candidate_tokens=k, stable_replicas=spec.replicas)
    sp.candidate_tokens = k
    sp.candidate_schedule = candidate
    sp.canary_started_at = run.now
    run.act(
        ActionKind.START_CANARY,
        "PredictedGain",
        message,
        from_tokens=sp.tokens,
        to_tokens=k,
        acceptance=acceptance,
        goodput=judged.goodput,
    )


def _propose_k(run: _Run, judged: Judged) -> None:
    """The best K at this window's load, tried if predicted minImprovement faster."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    predicted = predictions(spec, judged.window, run.cost)
    current = predicted[sp.tokens]
    capped = _floor_caps_k(spec)
    eligible = [
        p
        for k, p in predicted.items()
        if k != sp.tokens
        and k not in sp.rejected_tokens
        and (not capped or p.metric >= run.floor + run.margin)
    ]
    if not eligible:
        return
    best = max(eligible, key=lambda p: p.goodput)
    gain = best.goodput / current.goodput - 1 if current.goodput > 0 else math.inf
    if gain < spec.tuning.min_improvement:
        return
    message = (
        f"K={best.tokens} predicted {gain:+.1%} goodput over K={sp.tokens} at batch "
        f"{judged.window.batch_per_pod:.1f}, {spec.rollback.metric.value} {best.metric:.3f}"
    )
    _start_trial(run, judged, best.tokens, None, message)


def _feed_trial(run: _Run, stable: Judged, observation: Observation) -> None:
    """Judge the canary's window (an in-place trial has none) and advance the trial."""
    trial = run.status.canary
    assert trial is not None
    canary = (
        None
        if trial.in_place
        else _judge_collected(
            run,
            "canary",
            observation.canary,
            trial.candidate_tokens,
            None,
            run.sp.candidate_schedule,
        )
    )
    _advance_trial(run, stable, canary, observation)


def _advance_trial(
    run: _Run, stable: Judged, canary: Judged | None, observation: Observation
) -> None:
    """Feed a window to the running trial; promote or abort when it has enough."""
    sp, spec, trial = run.sp, run.spec, run.status.canary
    assert trial is not None
    if not spec.tuning.enabled:
        _end_trial(
            run, promote=False, reason="TuningDisabled", message="spec.tuning.enabled is false"
        )
        return
    if trial.in_place:
        after = stable
        if after.conclusive and after.window is not None:
            trial.canary = _totals_add(trial.canary, after.window)
    else:
        pending = observation.canary_pending_since
        limit = run.seconds(spec.tuning.canary_pending_timeout).total_seconds()
        if pending is not None and run.now.timestamp() - pending >= limit:
            message = (
                f"the canary pod has been Pending for {run.now.timestamp() - pending:.0f}s "
                f"(> {spec.tuning.canary_pending_timeout}); trying K={trial.candidate_tokens} "
                "in place instead"
            )
            sp.strategy = TuningStrategy.IN_PLACE
            _end_trial(run, promote=False, reason="CanaryPending", message=message, reject=False)
            run.act(
                ActionKind.IN_PLACE_FALLBACK,
                "CanaryPending",
                message,
                warning=True,
                from_tokens=sp.tokens,
                to_tokens=sp.tokens,
            )
            return
        assert canary is not None
        after = canary
        # Every stable window of the trial is its comparison: the same hours, the same mix.
        # Plain stable pods (a re-probe) have no acceptance to judge: their speed counts.
        plain = sp.disabled and stable.window is not None and stable.window.generation_tokens > 0
        if (stable.conclusive or plain) and stable.window is not None:
            trial.stable = _totals_add(trial.stable, stable.window)
        if canary.conclusive and canary.window is not None:
            if _floor_caps_k(spec) and _stable_failing(run, canary):
                low = canary.metric.low if canary.metric else float("nan")
                _end_trial(
                    run,
                    promote=False,
                    reason="BelowFloor",
                    message=f"canary {spec.rollback.metric.value} lower bound {low:.3f} "
                    f"< floor {run.floor:.3f}",
                )
                return
            trial.canary = _totals_add(trial.canary, canary.window)
    if (
        after.conclusive
        and trial.canary.windows >= spec.tuning.canary_windows
        and trial.stable.windows >= 1
    ):
        _compare(run, stable)
        return
    started = sp.canary_started_at or run.now
    interval = run.seconds(spec.tuning.interval)
    # Each canary window may grow up to maxWindowAge before it is conclusive.
    longest = max(interval, run.seconds(spec.tuning.max_window_age))
    deadline = (
        longest * spec.tuning.canary_windows * TRIAL_EXTENSION
        + interval * spec.tuning.max_inconclusive_windows
        + run.seconds(spec.tuning.canary_pending_timeout)
    )
    if run.now - started > deadline:
        _end_trial(
            run,
            promote=False,
            reason="CanaryInconclusive",
            message=f"{trial.canary.windows} of {spec.tuning.canary_windows} conclusive "
            f"windows after {run.now - started}",
        )


def _trial_baseline(run: _Run) -> int | None:
    """The K a trial is compared with: plain decoding (0) for a re-probe, the K before an
    in-place trial, else the stable K."""
    trial = run.status.canary
    assert trial is not None
    if run.sp.disabled:
        return 0
    return trial.previous_tokens if trial.in_place else run.sp.tokens


def _trial_schedules(run: _Run) -> tuple[list[ScheduledBand] | None, list[ScheduledBand] | None]:
    """The schedule a trial tries and the one it is compared with (None: one K)."""
    trial = run.status.canary
    assert trial is not None
    if trial.in_place:
        return run.sp.schedule, trial.previous_schedule
    return run.sp.candidate_schedule, run.sp.schedule


def _compare(run: _Run, stable: Judged) -> None:
    spec, trial = run.spec, run.status.canary
    assert trial is not None
    before_k = _trial_baseline(run)
    assert before_k is not None
    window = stable.window
    batch = window.batch_per_pod if window is not None else 1.0
    tried, before = _trial_schedules(run)
    if tried is not None or before is not None:
        if not (trial.stable.timed_windows and trial.canary.timed_windows):
            _end_trial(
                run,
                promote=False,
                reason="NoStepTimes",
                message="a schedule is judged on the step times its pods measure; they export none",
                reject=False,
            )
            return
        after = tried or [ScheduledBand(tokens=trial.candidate_tokens)]
        gain, basis = schedule_gain(trial.stable, trial.canary, after, run.cost)
    else:
        gain, basis = goodput_gain(
            trial.stable, before_k, trial.canary, trial.candidate_tokens, batch, run.cost
        )
    metric = _totals_metric(trial.canary, spec.rollback.metric)
    tried_words = schedule.describe(tried) if tried else f"K={trial.candidate_tokens}"
    before_words = schedule.describe(before) if before else f"K={before_k}"
    summary = (
        f"{tried_words} vs {before_words}: goodput {gain.value:+.1%} "
        f"(lower bound {gain.low:+.1%}, needs {spec.tuning.min_improvement:+.1%}; {basis})"
    )
    reason = "GoodputGain"
    if metric is not None:
        summary += (
            f", {spec.rollback.metric.value} {metric.value:.3f} (lower bound {metric.low:.3f}, "
            f"floor {run.floor:.3f} + margin {run.margin:.3f})"
        )
    if metric is not None and _floor_caps_k(spec):
        # The candidate was proposed on a prediction clearing floor + margin; the
        # measurement must confirm it, or noise would promote Ks that sit on the floor.
        if metric.low < run.floor:
            reason = "BelowFloor"
        elif metric.value < run.floor + run.margin:
            reason = "BelowMargin"
    if reason == "GoodputGain" and gain.low < spec.tuning.min_improvement:
        reason = "NoGain"
        if (
            gain.value >= spec.tuning.min_improvement
            and trial.canary.windows < TRIAL_EXTENSION * spec.tuning.canary_windows
        ):
            return  # promising but not proven: measure on
    _end_trial(run, promote=reason == "GoodputGain", reason=reason, message=summary)


def _end_trial(
    run: _Run,
    *,
    promote: bool,
    reason: str,
    message: str,
    reject: bool = True,
    judged: bool = True,
) -> None:
    """Promote or abort the trial. `judged=False`: it ended before its windows could say
    anything (a scale), so a re-probe is retried after the cooldown, not counted failed."""
    sp, trial = run.sp, run.status.canary
    assert trial is not None and sp.tokens is not None
    candidate = trial.candidate_tokens
    previous = _trial_baseline(run)
    tried, before = _trial_schedules(run)
    run.status.canary = None
    sp.candidate_tokens = None
    sp.candidate_schedule = None
    sp.canary_started_at = None
    rate = _totals_rate(trial.canary).value if trial.canary.windows else None
    if promote:
        run.act(
            ActionKind.PROMOTE,
            reason,
            message,
            from_tokens=previous,
            to_tokens=candidate,
            acceptance=rate,
        )
        if sp.disabled:  # a re-probe that measured faster than plain decoding
            _enable(run, candidate)
            sp.failed_reprobes = 0
            run.condition(
                ConditionType.SPECULATION_ACTIVE, "True", "Reprobed", f"drafting K={candidate}"
            )
            return
        sp.last_known_good_tokens = previous
        sp.last_known_good_schedule = before
        sp.schedule = tried
        failing = sp.failing_windows
        run.changed(candidate)
        if trial.in_place:  # the stable pods ran it through the trial: its failures count on
            sp.failing_windows = failing
        return
    if sp.disabled:
        if judged:
            sp.failed_reprobes += 1
            sp.reprobe_at = _next_reprobe(run)
        else:
            sp.reprobe_at = run.now + run.seconds(run.spec.tuning.cooldown)
        reject = False
    if reject:
        if tried is not None:  # the schedule failed, not its largest K
            sp.rejected_schedule = tried
        else:
            sp.rejected_tokens = sorted({*sp.rejected_tokens, candidate})
        sp.rejected_until = run.now + run.seconds(run.spec.rollback.reprobe_after)
    run.act(
        ActionKind.ABORT,
        reason,
        message,
        warning=reason == "BelowFloor",
        from_tokens=candidate,
        to_tokens=previous,
        acceptance=rate,
    )
    if trial.in_place and previous:
        sp.schedule = before
        run.changed(previous)
    else:
        sp.changed_at = run.now
