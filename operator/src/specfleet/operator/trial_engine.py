"""The one lifecycle every trial runs, whatever its kind (a K, plain decoding, a schedule:
trials.py; a config: config_trials.py) and wherever it runs (its `Placement`; in place on
pods that take K hot, interleaved: both sides turn by turn): its start where it runs
(`start`), its windows before an in-place switch, its stable windows counted as its
comparison, the candidate's windows counted or ending it below the floor, the goodput
gain measured between the tracks (or over matched pairs) when there are enough, and the
verdict on it with the words that say it. `advance` judges the canary's window and
returns the record with this evaluation's windows counted, what status collects on, the
next step (`Next`, `Ended`, `WaitForCanary` or `InPlaceInstead`) and an interleaved
trial's next `Turn` as values, changing no state; `feed`, the one way every running trial
is fed, keeps them in status and hands the step to the kind (`RunningKind`: switching,
promotion and rejection differ by kind)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

from specfleet.operator import speed
from specfleet.operator.api import (
    FittedStepCost,
    InPlace,
    OpenWindows,
    Placement,
    ScheduledBand,
    TrackTotals,
    TrialRecord,
)
from specfleet.operator.observations import CanaryPending, Observation, TrackWindow
from specfleet.operator.outcomes import TrialOutcome
from specfleet.operator.run import Run
from specfleet.operator.stats import Estimate
from specfleet.operator.trial_stats import (
    Confidence,
    goodput_gain,
    matched_pair,
    schedule_gain,
    step_batch,
    totals_add,
    totals_merge,
    totals_rate,
)
from specfleet.operator.windows import Judged, judge_canary, timed_k0_band


@dataclass(frozen=True)
class Sides:
    """What a trial's candidate runs, and what it is compared with."""

    tokens: int  # the K the candidate runs (a schedule's largest)
    tried: list[ScheduledBand] | None  # the candidate's schedule (None: one K)
    before_tokens: int  # the K it is compared with (0: plain decoding)
    before: list[ScheduledBand] | None  # the schedule it is compared with


@dataclass(frozen=True)
class TrialSubject:
    """What a trial tries against what, and how its evidence is held up."""

    sides: Sides
    tried_words: str
    before_words: str
    required: float  # the goodput gain its lower bound must clear
    windows: int  # the candidate's windows measured at most (extended trials included)
    # The rollback metric over the candidate's windows (None: nothing drafts to measure),
    # and whether its lower bound must clear the floor; `margin`: its value must clear
    # floor + margin too (None: the floor alone).
    metric: Estimate | None
    floor_caps: bool
    margin: float | None
    confidence: Confidence  # the one-sided level of the gain's bounds


def count_stable(run: Run, totals: TrackTotals, stable: Judged, *, k0_band: bool) -> TrackTotals:
    """A canary trial's stable window added to its comparison: every one of the trial, the
    same hours and the same mix. Plain stable pods (a re-probe, speculation off) have no
    acceptance to judge: their speed counts. `k0_band`: so do a schedule's K=0-band
    windows with their step times (K trials count them; config trials never have)."""
    window = stable.window
    if window is None:
        return totals
    plain = run.sp.off is not None and window.generation_tokens > 0
    if stable.conclusive or plain or (k0_band and timed_k0_band(stable)):
        return totals_add(totals, window)
    return totals


def pending_seconds(run: Run, pending: CanaryPending | None) -> float | None:
    """How long the canary pod has been `pending`, once past canaryPendingTimeout (no node
    for it: the trial goes on in place); None before."""
    limit = run.spec.tuning.canary_pending_timeout.length.total_seconds()
    if pending is None or run.now.timestamp() - pending.since < limit:
        return None
    return run.now.timestamp() - pending.since


def ready(stable: TrackTotals, canary: TrackTotals, windows: int) -> bool:
    """The candidate has its `windows`, and the stable pods one at least to compare with."""
    return canary.windows >= windows and stable.windows >= 1


def candidate_rate(canary: TrackTotals) -> float | None:
    """The acceptance rate the candidate's windows measured, for the history; None where
    they drafted nothing (plain decoding, or no window in yet)."""
    return totals_rate(canary).value if canary.counts.drafts else None


def measured_gain(
    subject: TrialSubject,
    stable: TrackTotals,
    canary: TrackTotals,
    batch: float,
    cost: FittedStepCost,
) -> tuple[Estimate, str]:
    """The goodput gain of the candidate's windows over the stable ones, and what it rests
    on: per-request speed where either side runs a schedule and both timed their steps
    (a schedule has no single K), else goodput at `batch`."""
    sides = subject.sides
    schedules = sides.tried is not None or sides.before is not None
    if schedules and stable.timed_windows and canary.timed_windows:
        after = sides.tried or [ScheduledBand(tokens=sides.tokens)]
        return schedule_gain(stable, canary, after, cost, subject.confidence)
    return goodput_gain(
        stable, sides.before_tokens, canary, sides.tokens, batch, cost, subject.confidence
    )


def verdict(
    run: Run, subject: TrialSubject, gain: Estimate, basis: str, windows: int
) -> tuple[TrialOutcome | None, str]:
    """What `windows` candidate windows measuring `gain` prove, and the summary that says
    why: GOODPUT_GAIN to promote; BELOW_FLOOR, BELOW_MARGIN or NO_GAIN to reject; None
    to measure on while the gain is promising but not proven."""
    metric, margin = subject.metric, subject.margin
    summary = (
        f"{subject.tried_words} vs {subject.before_words}: goodput {gain.value:+.1%} "
        f"(lower bound {gain.low:+.1%}, needs {subject.required:+.1%}; {basis})"
    )
    if metric is not None:
        name = run.spec.rollback.metric.value
        summary += (
            f", {name} {metric.value:.3f} (lower bound {metric.low:.3f}, floor {run.floor:.3f}"
            + (f" + margin {margin:.3f})" if margin is not None else ")")
        )
    if metric is not None and subject.floor_caps:
        # The candidate's measurement must confirm the floor (and margin) it was proposed
        # on, or noise would promote candidates that sit on the floor.
        if metric.low < run.floor:
            return TrialOutcome.BELOW_FLOOR, summary
        if margin is not None and metric.value < run.floor + margin:
            return TrialOutcome.BELOW_MARGIN, summary
    if gain.low >= subject.required:
        return TrialOutcome.GOODPUT_GAIN, summary
    if gain.value >= subject.required and windows < subject.windows:
        return None, summary
    return TrialOutcome.NO_GAIN, summary


class Next(Enum):
    """A step of a trial that goes on."""

    MEASURE = "measure"  # nothing decided: more windows
    EXTEND = "extend"  # compared: the gain is promising but not proven, measured on
    SWITCH = "switch"  # in place: the windows before are in, the stable pods switch


@dataclass(frozen=True)
class Ended:
    """A trial's end: its outcome, and the summary that says why."""

    outcome: TrialOutcome
    message: str


@dataclass(frozen=True)
class WaitForCanary:
    """The canary has not run yet; `why`: what keeps it (the scheduler's words), if known."""

    why: str | None


@dataclass(frozen=True)
class InPlaceInstead:
    """No node for the canary pod: Pending this many seconds, past canaryPendingTimeout;
    the trial goes on in place. `why`: what the scheduler says of it, if known."""

    pending: float
    why: str | None


Step = Next | Ended | WaitForCanary | InPlaceInstead  # what `advance` leads to

Record = TypeVar("Record", bound=TrialRecord)
# A kind reads the record it is handed (the one with this evaluation's windows counted).
KindRecord = TypeVar("KindRecord", bound=TrialRecord, contravariant=True)


@dataclass(frozen=True)
class Turn:
    """A K and its schedule the stable pods run: the side an interleaved trial's run
    next, or what a trial on them is compared with (what they ran before it)."""

    tokens: int
    schedule: list[ScheduledBand] | None


@dataclass(frozen=True)
class Advanced(Generic[Record]):
    """One evaluation's windows counted: the trial's record with them, status.openWindows
    with the canary's window collected, the trial's next step, and, interleaved, the side
    the stable pods run next (None: the same side runs on)."""

    record: Record
    open_windows: OpenWindows | None
    step: Step
    turn: Turn | None = None


class TrialKind(Protocol[KindRecord]):
    """What a kind of trial does its own way; `advance` runs the steps every kind shares."""

    @property
    def windows(self) -> int:
        """The candidate's windows a comparison needs."""
        ...

    @property
    def k0_band(self) -> bool:
        """A schedule's K=0-band windows with step times count (K trials; config trials
        never run one)."""
        ...

    @property
    def may_go_in_place(self) -> bool:
        """A canary Pending too long may be replaced by a trial in place."""
        ...

    def measured_before(self, record: KindRecord, added: bool) -> bool:
        """In place: the windows before are in (`added`: this window counted)."""
        ...

    def waits_for_canary(self, record: KindRecord, pending: bool) -> bool:
        """The canary has not run (`pending`: its pod waits for a node, or cannot be
        created): no window of the candidate yet."""
        ...

    def failing_window(self, canary: Judged) -> str | None:
        """Why one conclusive canary window ends the trial below the floor, or None."""
        ...

    def failing_totals(self, record: KindRecord) -> str | None:
        """Why the candidate's windows so far end the trial below the floor, or None."""
        ...

    def subject(self, record: KindRecord) -> TrialSubject | Ended:
        """What the comparison holds up against what; Ended where it cannot be made."""
        ...

    def measure(
        self, record: KindRecord, subject: TrialSubject, batch: float
    ) -> tuple[Estimate, str]:
        """The candidate's gain as the kind measures it, and what it rests on (a K trial's
        over matched pairs and the load history; `measured_gain` at least)."""
        ...


class RunningKind(TrialKind[KindRecord], Protocol[KindRecord]):
    """A kind of trial as `feed` runs it: where status keeps its record, and what each
    step does to the pods and status its own way."""

    def ended_unfed(self, record: KindRecord, observation: Observation) -> Ended | None:
        """Why the trial ends before this evaluation's windows are counted, or None."""
        ...

    def keep(self, record: KindRecord) -> None:
        """Status holds `record` as the running trial."""
        ...

    def overdue(self, record: KindRecord) -> Ended | None:
        """Why a trial that measures on has had too long to gather its windows, or None."""
        ...

    def fall_back_in_place(self, record: KindRecord, pending: float, waiting: str | None) -> None:
        """The canary Pending `pending` seconds (`waiting`: what the scheduler says): the
        trial goes on in place."""
        ...

    def wait_for_canary(self, record: KindRecord, why: str | None) -> None:
        """The canary has not run yet (`why`: what keeps it)."""
        ...

    def canary_runs(self, record: KindRecord) -> None:
        """The canary runs (it may have waited for a node)."""
        ...

    def switch(self, record: KindRecord) -> None:
        """In place, the windows before are in: the stable pods switch to the candidate."""
        ...

    def end(self, record: KindRecord, ended: Ended) -> None:
        """Promote, reject or abort, as `ended` says."""
        ...


def placed(record: Record, placement: Placement, before: Turn | None) -> Record:
    """A new trial's `record` where its candidate runs (the record given is left as it
    was). In place the stable pods run `before` first, measured as the baseline, then
    switch; interleaved they run the candidate first and alternate with `before` window
    by window; on a canary the record holds nothing of where (`before` is not needed)."""
    if placement is Placement.CANARY:
        return record
    assert placement is not Placement.AFTER, "a trial starts before its switch"
    assert before is not None, "a trial on the stable pods needs what they run"
    interleaved = placement is Placement.INTERLEAVED
    in_place = InPlace(
        previous_tokens=before.tokens,
        previous_schedule=before.schedule,
        switched=interleaved,
        interleaved=interleaved,
    )
    return record.model_copy(update={"in_place": in_place})


def start(
    run: Run,
    kind: RunningKind[Record],
    record: Record,
    placement: Placement,
    before: Turn | None = None,
) -> None:
    """A trial begins: `record` placed (`placed`; `before`: what the stable pods run, for
    a trial on them) and kept in status by its kind; interleaved, the stable pods switch
    to the candidate now. What starts it (a proposal, a re-probe, a new config) and how it
    is said are the kind's."""
    record = placed(record, placement, before)
    kind.keep(record)
    if placement is Placement.INTERLEAVED:
        run.stable_runs(record.tokens, record.schedule)


@dataclass(frozen=True)
class Alternation(Generic[Record]):
    """An interleaved trial after one of its windows: the record with the window counted,
    and the side the stable pods run next."""

    record: Record
    turn: Turn


def alternate(record: Record, stable: Judged, cost: FittedStepCost) -> Alternation[Record] | None:
    """An interleaved trial's window, paired with the other side's window before it when
    both ran at a matched batch (load moves; a pair at one load compares the two sides
    there, never a window at 1 in flight with one at 32), else left unpaired; then the
    other side runs. None: the window said nothing, and the same side runs on."""
    place = record.in_place
    assert place is not None
    if not stable.conclusive or stable.window is None:
        return None
    measured = totals_add(TrackTotals(), stable.window)
    load = speed.time_load(stable.window)
    other = place.unpaired
    placed: dict[str, Any] = {"switched": not place.switched}
    totals: dict[str, Any] = {}
    if other is not None and _matched(other, place.unpaired_load, measured, load):
        candidate, previous = (measured, other) if place.switched else (other, measured)
        totals = {
            "canary": totals_merge(record.canary, candidate),
            "stable": totals_merge(record.stable, previous),
        }
        previous_load = place.unpaired_load if place.switched else load
        bands = record.schedule or [ScheduledBand(tokens=record.tokens)]
        pair = matched_pair(previous, candidate, bands, previous_load or step_batch(previous), cost)
        placed |= {"pairs": [*(place.pairs or []), pair], "unpaired": None, "unpaired_load": None}
    else:
        placed |= {"unpaired": measured, "unpaired_load": load}
    after = record.model_copy(update={**totals, "in_place": place.model_copy(update=placed)})
    if place.switched:
        return Alternation(after, Turn(place.previous_tokens, place.previous_schedule))
    return Alternation(after, Turn(record.tokens, record.schedule))


def _matched(one: TrackTotals, one_load: float | None, other: TrackTotals, load: float) -> bool:
    """Two single windows with step times, at loads (requests in flight averaged over
    their time) within a bucket of each other. A window left unpaired by an older
    operator has no load recorded: its per-step mean stands for it."""
    if not (one.timed_windows and other.timed_windows):
        return False
    a = one_load if one_load is not None else step_batch(one)
    return max(a, load) <= min(a, load) * speed.BATCH_BUCKET


def _take_turns(
    run: Run,
    kind: TrialKind[Record],
    record: Record,
    stable: Judged,
    open_windows: OpenWindows | None,
) -> Advanced[Record]:
    """Interleaved (the stable pods take K hot, both sides turn by turn): the window
    counts for the side that ran it (`alternate`), and the sides are compared once the
    one before has its windows."""
    alternation = alternate(record, stable, run.cost)
    turn = None
    if alternation is not None:
        record, turn = alternation.record, alternation.turn
    ready = record.stable.windows >= kind.windows
    step = conclude(run, kind, record, stable, stable) if ready else Next.MEASURE
    return Advanced(record, open_windows, step, turn)


def advance(
    run: Run,
    kind: TrialKind[Record],
    record: Record,
    stable: Judged,
    canary_window: TrackWindow | None,
    canary_pending: CanaryPending | None = None,
) -> Advanced[Record]:
    """One evaluation's windows counted on the trial's `record`; the record with them and
    the step they lead to (`record` itself is left as it was). `canary_window`: what the
    canary measured (read only where the trial runs on a canary; in place the stable pods
    run both sides), and whether it is kept waiting (`canary_pending`).
    Interleaved, the record counts the window for the side that ran it, and `turn` names
    the side that runs next."""
    where, open_windows = record.placement, run.status.open_windows
    if where is Placement.INTERLEAVED:
        return _take_turns(run, kind, record, stable, open_windows)
    if where is Placement.BEFORE:
        added = stable.conclusive and stable.window is not None
        if added and stable.window is not None:
            record = _counted(record, stable=totals_add(record.stable, stable.window))
        step: Step = Next.SWITCH if kind.measured_before(record, added) else Next.MEASURE
        return Advanced(record, open_windows, step)
    after = stable
    if where is Placement.CANARY:
        pending = pending_seconds(run, canary_pending)
        why = canary_pending.reason if canary_pending is not None else None
        # Asked before the stable window is counted: it reads the canary's side only.
        waiting = kind.waits_for_canary(record, canary_pending is not None)
        canary, open_windows = judge_canary(run.spec, run.status, record, canary_window, run.now)
        if pending is not None and kind.may_go_in_place:
            return Advanced(record, open_windows, InPlaceInstead(pending, why))
        counted = count_stable(run, record.stable, stable, k0_band=kind.k0_band)
        record = _counted(record, stable=counted)
        if waiting:
            return Advanced(record, open_windows, WaitForCanary(why))
        after = canary
    on_canary = where is Placement.CANARY
    window = after.window
    if window is not None and (
        after.conclusive or (on_canary and kind.k0_band and timed_k0_band(after))
    ):
        failing = kind.failing_window(after) if on_canary and after.conclusive else None
        if failing is not None:
            return Advanced(record, open_windows, Ended(TrialOutcome.BELOW_FLOOR, failing))
        record = _counted(record, canary=totals_add(record.canary, window))
        failing = kind.failing_totals(record)
        if failing is not None:
            return Advanced(record, open_windows, Ended(TrialOutcome.BELOW_FLOOR, failing))
    return Advanced(record, open_windows, conclude(run, kind, record, after, stable))


def _counted(record: Record, **totals: TrackTotals) -> Record:
    """The record with a side's totals replaced (a new record: the one given is kept)."""
    return record.model_copy(update=totals)


def conclude(
    run: Run, kind: TrialKind[Record], record: Record, after: Judged, stable: Judged
) -> Step:
    """Compare the tracks once the candidate's window `after` says something and the trial
    has its windows; else measure on."""
    judgeable = after.conclusive or (kind.k0_band and timed_k0_band(after))
    if not (judgeable and ready(record.stable, record.canary, kind.windows)):
        return Next.MEASURE
    subject = kind.subject(record)
    if isinstance(subject, Ended):
        return subject
    batch = stable.window.batch_per_pod if stable.window is not None else 1.0
    gain, basis = kind.measure(record, subject, batch)
    outcome, summary = verdict(run, subject, gain, basis, record.canary.windows)
    return Next.EXTEND if outcome is None else Ended(outcome, summary)


def feed(
    run: Run, kind: RunningKind[Record], record: Record, stable: Judged, observation: Observation
) -> None:
    """One evaluation fed to the running trial `record` of `kind`: its windows counted
    (`advance`), the record kept in status, and the step they lead to applied by the
    kind. A trial the kind ends first (`RunningKind.ended_unfed`) counts nothing."""
    step: Step | None = kind.ended_unfed(record, observation)
    if step is None:
        advanced = advance(
            run, kind, record, stable, observation.canary, observation.canary_pending
        )
        record = advanced.record
        kind.keep(record)
        run.status.open_windows = advanced.open_windows
        step = advanced.step
        # A canary's steps come without a turn: an interleaved trial runs no canary.
        if isinstance(step, InPlaceInstead):
            kind.fall_back_in_place(record, step.pending, step.why)
            return
        if isinstance(step, WaitForCanary):
            kind.wait_for_canary(record, step.why)
            return
        if advanced.turn is not None:  # interleaved: the other side runs next
            run.stable_runs(advanced.turn.tokens, advanced.turn.schedule)
        if step is Next.MEASURE:
            step = kind.overdue(record) or step
        if record.placement is Placement.CANARY:
            kind.canary_runs(record)
    if step is Next.SWITCH:
        kind.switch(record)
    elif isinstance(step, Ended):
        kind.end(record, step)
