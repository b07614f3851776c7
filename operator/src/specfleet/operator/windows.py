"""Judging windows: whether a track's window is conclusive, growing one that has too few
draft tokens over the next intervals (status.openWindows), and what the last window says
in status (acceptance, load profile, SpeculationActive, MetricsAvailable).

`take_in` takes one observation in before anything is decided on it: the step times it
adds to the fitted cost (or the stable window held as perturbed), the stable window
judged and what status says of it, as one value (`Intake`) that changes nothing;
tuner.decide writes it into status and decides on the stable window judged."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from specfleet.operator import schedule, speed
from specfleet.operator.api import (
    LEFT_OUT_LIMIT,
    AcceptanceWindow,
    Condition,
    ConditionType,
    OffReason,
    OpenWindow,
    OpenWindows,
    PodLeftOut,
    ScheduledBand,
    SpeculationState,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    StepCostStatus,
    TrialRecord,
)
from specfleet.operator.children import Track
from specfleet.operator.conditions import ConditionChange, condition_status
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.outcomes import EMPTY_WINDOWS, Action, ActionKind, WindowVerdict
from specfleet.operator.rollback_metrics import rollback_metric_of
from specfleet.operator.stats import (
    Estimate,
    draft_acceptance_rate,
    mean_acceptance_length,
    per_position,
)
from specfleet.runtime.config import Drafting

# The load profile a learned schedule is fitted to: the latest intervals' batch per pod.
LOAD_SAMPLES = 24


@dataclass(frozen=True)
class Judged:
    """A stable or canary window, judged."""

    window: TrackWindow | None
    conclusive: bool
    reason: WindowVerdict
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
        return Judged(None, False, WindowVerdict.NO_DATA)
    values = (window.seconds, *(value for _, value in window.named()))
    if not all(math.isfinite(v) for v in values):
        return Judged(window, False, WindowVerdict.NOT_A_NUMBER)
    if window.generation_tokens <= 0 and window.draft_tokens <= 0:
        return Judged(window, False, WindowVerdict.NO_TRAFFIC)
    if window.draft_tokens <= 0:
        return Judged(window, False, WindowVerdict.NO_DRAFTS)
    if window.draft_tokens < spec.tuning.min_draft_tokens:
        return Judged(window, False, WindowVerdict.TOO_FEW_DRAFT_TOKENS)
    rate = draft_acceptance_rate(window)
    kind = rollback_metric_of(spec)
    metric = kind.of_window(window, baseline)
    if metric is None and kind.needs_per_position:
        return Judged(window, False, WindowVerdict.NO_PER_POSITION_DATA, rate)
    return Judged(window, True, WindowVerdict.CONCLUSIVE, rate, metric)


def judge_plain(spec: SpeculativeModelSpec, window: TrackWindow | None) -> Judged:
    """A window of plain decoding on trial: it has no acceptance to judge, its speed is
    what the trial measures, so a window with traffic counts."""
    judged = judge(spec, window, None)
    if judged.reason is WindowVerdict.NO_DRAFTS:
        return Judged(window, True, WindowVerdict.CONCLUSIVE)
    return judged


def _window_of(collected: OpenWindow) -> TrackWindow:
    return TrackWindow(
        seconds=collected.seconds,
        pod_seconds=collected.pod_seconds,
        pods=collected.pods,
        running_requests=collected.running_requests,
        waiting_requests=collected.waiting_requests,
    ).with_counts(collected.counts)


def _collect(
    collected: OpenWindow | None, window: TrackWindow, tokens: int, now: datetime
) -> OpenWindow:
    """`window` added to the counts collected so far (pods and gauges: the latest)."""
    base = collected or OpenWindow(since=now - timedelta(seconds=window.seconds), tokens=tokens)
    return OpenWindow(
        since=base.since,
        tokens=tokens,
        counts=base.counts + window,
        seconds=base.seconds + window.seconds,
        pod_seconds=base.pod_seconds + window.pod_seconds,
        pods=window.pods,
        running_requests=window.running_requests,
        waiting_requests=window.waiting_requests,
    )


def collected_on(windows: OpenWindows | None, track: Track) -> OpenWindow | None:
    """What `track` has collected so far (status.openWindows; None: nothing)."""
    return None if windows is None else getattr(windows, track)


def with_collected(
    windows: OpenWindows | None, track: Track, collected: OpenWindow | None
) -> OpenWindows | None:
    """status.openWindows with what `track` collects on replaced (None: nothing)."""
    kept = (windows or OpenWindows()).model_copy(update={track: collected})
    return None if kept.stable is None and kept.canary is None else kept


def timed_k0_band(judged: Judged) -> bool:
    """A window of a schedule's K=0 band with its step time: no acceptance to judge, but
    what the schedule serves at that load, which a trial of it must count (load moves: a
    schedule canary judged only where it drafts waited out a 90-minute surge at K=0)."""
    return judged.reason is WindowVerdict.NOT_DRAFTING and speed.measured(judged.window) is not None


def judge_collected(
    spec: SpeculativeModelSpec,
    now: datetime,
    collected: OpenWindow | None,
    window: TrackWindow | None,
    tokens: int,
    baseline: float | None,
    running: Sequence[ScheduledBand] | None = None,
) -> tuple[Judged, OpenWindow | None]:
    """Judge the track's window added to what it `collected` before, so that a window with
    too few draft tokens grows over the next intervals instead of being thrown away: at
    one request in flight a decision takes a few intervals, not forever. A window that
    reaches tuning.maxWindowAge unjudged is dropped as inconclusive. Returns the window
    judged and what the track collects on (status.openWindows; None: nothing)."""
    max_age = spec.tuning.max_window_age.length
    if collected is not None and (
        # Left over from another K, or from before a gap with no data at all.
        collected.tokens != tokens or now - collected.since > max_age + spec.tuning.interval.length
    ):
        collected = None
    alone = judge(spec, window, baseline)
    if window is None or alone.reason in EMPTY_WINDOWS:
        return alone, collected
    if (
        alone.reason is WindowVerdict.NO_DRAFTS
        and running
        and 0 in (band.tokens for band in running)
    ):
        detail = "the schedule drafts nothing at this load (K=0)"
        return Judged(window, False, WindowVerdict.NOT_DRAFTING, detail=detail), collected
    grown = _collect(collected, window, tokens, now)
    # Its acceptance per position depends on the Ks the schedule drafted with.
    ks = schedule.drafting_ks(running) if running else ()
    # One interval's window keeps its step tallies (a grown one's older intervals have
    # none kept: it goes without).
    tallies = window.step_tallies if collected is None else ()
    judged = judge(
        spec, dataclasses.replace(_window_of(grown), ks=ks, step_tallies=tallies), baseline
    )
    age = now - grown.since
    if judged.reason is WindowVerdict.TOO_FEW_DRAFT_TOKENS and age < max_age:
        detail = (
            f"{grown.counts.draft_tokens:.0f} of {spec.tuning.min_draft_tokens} draft tokens "
            f"in {age.total_seconds():.0f}s"
        )
        collecting = Judged(
            judged.window, False, WindowVerdict.COLLECTING, judged.rate, detail=detail
        )
        return collecting, grown
    return judged, None


def judge_stable(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
) -> tuple[Judged, OpenWindow | None, bool]:
    """The stable window judged, what the track collects on after it, and whether it
    was judged on what it collected (else what it collects on is left as it was)."""
    sp = status.speculation
    if observation.prometheus_error is not None:
        unavailable = WindowVerdict.PROMETHEUS_UNAVAILABLE
        return Judged(None, False, unavailable, detail=observation.prometheus_error), None, False
    if sp.measuring_plain:
        return judge_plain(spec, observation.stable), None, False
    running = None if sp.off is not None else sp.schedule
    open_windows = status.open_windows
    judged, collecting = judge_collected(
        spec,
        now,
        collected_on(open_windows, "stable"),
        observation.stable,
        sp.stable_k,
        sp.since_change.baseline_acceptance,
        running,
    )
    return judged, collecting, True


def judge_canary(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    record: TrialRecord,
    window: TrackWindow | None,
    now: datetime,
) -> tuple[Judged, OpenWindows | None]:
    """The canary's `window` on the trial `record` judged, and status.openWindows after
    it. A K's window is added to what the canary collected before (a window with too few
    drafts grows over the next intervals); plain decoding's (K 0) is judged alone: its
    speed is what it measures, and it collects nothing."""
    open_windows = status.open_windows
    if record.plain:
        return judge_plain(spec, window), open_windows
    judged, collecting = judge_collected(
        spec,
        now,
        collected_on(open_windows, "canary"),
        window,
        record.tokens,
        None,
        record.schedule,
    )
    return judged, with_collected(open_windows, "canary", collecting)


def acceptance_window(
    spec: SpeculativeModelSpec,
    sp: SpeculationState,
    judged: Judged,
    observation: Observation,
    now: datetime,
) -> AcceptanceWindow:
    """What status.acceptance says of the stable window judged."""
    window = judged.window
    positions = [round(e.value, 4) for e in per_position(window)] if window else []
    rate = judged.rate or (
        draft_acceptance_rate(window) if window and window.draft_tokens else None
    )
    mean_length = mean_acceptance_length(window).value if window and window.drafts else None
    figure = _judged_figure(spec, sp.since_change.baseline_acceptance, judged)
    return AcceptanceWindow(
        rate=round(rate.value, 4) if rate else None,
        judged=figure,
        lower_bound=round(judged.metric.low, 4) if judged.metric else None,
        mean_length=round(mean_length, 4) if mean_length is not None else None,
        per_position=positions,
        draft_tokens=int(window.draft_tokens) if window else 0,
        goodput=round(judged.goodput, 2) if judged.goodput is not None else None,
        window_seconds=window.seconds if window else None,
        conclusive=judged.conclusive,
        reason=None
        if judged.conclusive
        else (WindowVerdict.SPECULATION_DISABLED if sp.off is not None else judged.reason),
        measured_at=now,
        pods_left_out=[
            PodLeftOut(pod=pod, reason=error.reason, message=error.message)
            for pod, error in sorted(observation.errors.items())[:LEFT_OUT_LIMIT]
        ]
        or None,
        more_pods_left_out=len(observation.errors) - LEFT_OUT_LIMIT
        if len(observation.errors) > LEFT_OUT_LIMIT
        else None,
    )


def _judged_figure(
    spec: SpeculativeModelSpec, baseline: float | None, judged: Judged
) -> float | None:
    """The rollback metric's value in the stable window, inconclusive ones included (as
    `rate` is), so ACCEPT shows what the floor judges."""
    window = judged.window
    metric = judged.metric or (
        rollback_metric_of(spec).of_window(window, baseline)
        if window and window.draft_tokens > 0
        else None
    )
    return round(metric.value, 4) if metric else None


def with_load(load: list[float], observation: Observation) -> list[float]:
    """The load profile a schedule is fitted to, with the stable pods' batch this
    interval (unchanged by an interval that served nothing)."""
    window = observation.stable
    if window is None or window.generation_tokens <= 0 or window.batch_per_pod <= 0:
        return load
    return [*load, round(window.batch_per_pod, 2)][-LOAD_SAMPLES:]


@dataclass(frozen=True)
class Intake:
    """What one observation teaches, to be written into status before deciding."""

    # The stable window judged; None when it is held as perturbed (a slow stretch says
    # nothing about K: recorded, neither learnt from nor judged).
    stable: Judged | None
    recorded: Judged  # the window status.acceptance shows: the stable one, or the held one
    step_cost: StepCostStatus | None
    # What the stable track collects on after this window (status.openWindows.stable;
    # None: nothing), where the window was judged on it (`open_window_changed`); else
    # (held, plain decoding measured, no answer) what it collected stays as it was.
    open_window: OpenWindow | None
    open_window_changed: bool
    acceptance: AcceptanceWindow
    load: list[float]
    speculation_active: ConditionChange | None
    actions: tuple[Action, ...]


def take_in(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
    drafting: Drafting,
) -> Intake:
    """The observation taken in: the stable window judged (None: held as perturbed) and
    what status says of it after."""
    sp = status.speculation
    speculation_active, actions = _speculation_active(status, observation)
    learnt = speed.learn(spec, status, observation, now, drafting)
    stable: Judged | None = None
    open_window, open_window_changed = None, False
    if learnt.perturbed is None:
        stable, open_window, open_window_changed = judge_stable(spec, status, observation, now)
        recorded = stable
    else:  # a slow stretch says nothing about K: recorded, neither learnt from nor judged
        recorded = Judged(
            observation.stable, False, WindowVerdict.PERTURBED, detail=learnt.perturbed
        )
    return Intake(
        stable=stable,
        recorded=recorded,
        step_cost=learnt.cost,
        open_window=open_window,
        open_window_changed=open_window_changed,
        acceptance=acceptance_window(spec, sp, recorded, observation, now),
        load=sp.load if stable is None else with_load(sp.load, observation),
        speculation_active=speculation_active,
        actions=actions,
    )


def _speculation_active(
    status: SpeculativeModelStatus, observation: Observation
) -> tuple[ConditionChange | None, tuple[Action, ...]]:
    """SpeculationActive as this observation shows it (None: left as it is), and the
    warning when the pods stop exporting their drafts' counters."""
    sp = status.speculation
    if sp.off is not None:
        reason = OffReason.NO_K_PAYS if sp.plain_decoding_chosen else "Disabled"
        return ConditionChange(
            ConditionType.SPECULATION_ACTIVE, "False", reason, sp.off.message
        ), ()
    if sp.measuring_plain:
        assert sp.trial is not None and sp.trial.in_place is not None
        before = sp.trial.in_place.previous_tokens
        message = f"an in-place trial measures plain decoding against K={before}"
        return ConditionChange(
            ConditionType.SPECULATION_ACTIVE, "False", "PlainDecodingTrial", message
        ), ()
    if observation.speculation_missing:
        message = (
            "pods serve requests but export no vllm:spec_decode_* counters: "
            "the draft is not running"
        )
        missing = ConditionChange(ConditionType.SPECULATION_ACTIVE, "False", "NotExported", message)
        if condition_status(status.conditions, ConditionType.SPECULATION_ACTIVE) == "False":
            return missing, ()
        return missing, (Action(ActionKind.SPECULATION_MISSING, "NotExported", message, True),)
    if observation.stable is not None and observation.stable.drafts > 0:
        return ConditionChange(
            ConditionType.SPECULATION_ACTIVE, "True", "Drafting", f"drafting K={sp.tokens}"
        ), ()
    return None, ()


@dataclass(frozen=True)
class MetricsAvailable:
    """What a judged window says of the metrics: the inconclusive windows in a row, and
    whether they are a gap long enough to end the row of failing windows; the
    MetricsAvailable condition (None: left as it is) and what is counted of it."""

    inconclusive_windows: int
    gap: bool
    condition: ConditionChange | None
    actions: tuple[Action, ...] = ()


def metrics_available(
    spec: SpeculativeModelSpec, sp: SpeculationState, conditions: list[Condition], judged: Judged
) -> MetricsAvailable:
    available, limit = ConditionType.METRICS_AVAILABLE, spec.tuning.max_inconclusive_windows
    shown = any(c.type is available for c in conditions)
    if judged.conclusive:
        last = ConditionChange(
            ConditionType.METRICS_AVAILABLE,
            "True",
            WindowVerdict.CONCLUSIVE,
            "the last window was conclusive",
        )
        return MetricsAvailable(0, False, last)
    why = f"{judged.reason}: {judged.detail}" if judged.detail else judged.reason
    if judged.reason is WindowVerdict.PERTURBED:
        # Counted (the Inconclusive metric, by reason) but not a gap in the metrics.
        counted = Action(ActionKind.INCONCLUSIVE, judged.reason, why)
        return MetricsAvailable(sp.inconclusive_windows, False, None, (counted,))
    if judged.reason in (WindowVerdict.COLLECTING, WindowVerdict.NOT_DRAFTING):
        # Not a gap in the metrics: the window is still growing towards a decision, or
        # the schedule does not draft at this load.
        unknown = ConditionChange(ConditionType.METRICS_AVAILABLE, "Unknown", judged.reason, why)
        return MetricsAvailable(sp.inconclusive_windows, False, None if shown else unknown)
    in_a_row = sp.inconclusive_windows + 1
    message = f"window inconclusive ({why}); {in_a_row} in a row"
    counted = Action(ActionKind.INCONCLUSIVE, judged.reason, message)
    if in_a_row >= limit:
        # failureLimit counts failing windows in a row. A gap long enough to call the
        # metrics unavailable ends the row: windows before it (another hour, another
        # load, another set of pods) do not add up with the ones after it to a rollback.
        unavailable = ConditionChange(
            ConditionType.METRICS_AVAILABLE, "False", judged.reason, message
        )
        if condition_status(conditions, available) == "False":
            return MetricsAvailable(in_a_row, True, unavailable, (counted,))
        warned = Action(ActionKind.METRICS_UNAVAILABLE, judged.reason, message, True)
        return MetricsAvailable(in_a_row, True, unavailable, (counted, warned))
    unknown = ConditionChange(ConditionType.METRICS_AVAILABLE, "Unknown", judged.reason, message)
    return MetricsAvailable(in_a_row, False, None if shown else unknown, (counted,))


def stable_failing(judged: Judged, floor: float) -> bool:
    """Whether the window's rollback metric is below `floor` (its lower bound)."""
    return judged.metric is not None and judged.metric.low < floor
