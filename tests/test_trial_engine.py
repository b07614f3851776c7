"""The trial lifecycle every kind of trial shares (trial_engine.advance), on a kind that
says only what the engine asks of it: which windows count where, what ends a trial below
the floor, when the in-place switch comes and when a Pending canary is replaced. The
engine returns the record with the windows counted and leaves the one it was handed as
it was (issue 40: transitions return values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from specfleet.operator import track_plan, trial_engine
from specfleet.operator.api import (
    InPlace,
    Placement,
    SpeculativeModelStatus,
    TrackTotals,
    TrialRecord,
)
from specfleet.operator.observations import CanaryPending, Observation, TrackWindow
from specfleet.operator.outcomes import TrialOutcome, WindowVerdict
from specfleet.operator.run import Run
from specfleet.operator.stats import Estimate
from specfleet.operator.trial_engine import (
    Ended,
    InPlaceInstead,
    Next,
    Sides,
    Step,
    TrialSubject,
    Turn,
    advance,
    measured_gain,
)
from specfleet.operator.trial_stats import ONE_SIDED_95
from specfleet.operator.tuner import decide
from specfleet.operator.windows import Judged, judge
from tests.decisions import CHAT, CODE, T0, Fleet, make_spec, window
from tests.test_config_trials import ENGINE, _settled, _with

SPEC = make_spec(tuning={"canaryWindows": 2, "canaryPendingTimeout": "5m"})


def placed(where: Placement, *, candidate_turn: bool = True) -> TrialRecord:
    """A trial of K=4 against K=3 that runs where `where` says (interleaved, in the
    candidate's turn or the other's): its placement is read from its record."""
    in_place = None
    if where is not Placement.CANARY:
        interleaved = where is Placement.INTERLEAVED
        switched = where is Placement.AFTER or (interleaved and candidate_turn)
        in_place = InPlace(previous_tokens=3, switched=switched, interleaved=interleaved)
    return TrialRecord(tokens=4, started_at=T0, in_place=in_place)


@dataclass
class Kind:
    windows: int = 2
    k0_band: bool = False
    may_go_in_place: bool = True
    before: int = 2
    fails_window: bool = False
    fails_totals: bool = False

    def measured_before(self, record: TrialRecord, added: bool) -> bool:
        return record.stable.windows >= self.before

    def waits_for_canary(self, record: TrialRecord, pending: bool) -> bool:
        return False

    def failing_window(self, canary: Judged) -> str | None:
        return "one window under the floor" if self.fails_window else None

    def failing_totals(self, record: TrialRecord) -> str | None:
        return "every window under the floor" if self.fails_totals else None

    def subject(self, record: TrialRecord) -> TrialSubject | Ended:
        return TrialSubject(
            sides=Sides(4, None, 3, None),
            tried_words="K=4",
            before_words="K=3",
            required=0.0,
            windows=2,
            metric=None,
            floor_caps=False,
            margin=None,
            confidence=ONE_SIDED_95,
        )

    def measure(
        self, record: TrialRecord, subject: TrialSubject, batch: float
    ) -> tuple[Estimate, str]:
        return measured_gain(subject, record.stable, record.canary, batch, _run().cost)


def _run() -> Run:
    status = SpeculativeModelStatus()
    return Run(SPEC, status, T0, None, track_plan.plan(SPEC, status))


def advanced(
    kind: Kind,
    record: TrialRecord,
    stable: Judged,
    canary: TrackWindow | None,
    pending_since: float | None = None,
) -> tuple[TrialRecord, Step]:
    """`advance`'s record and step, checking that the record handed to it is unchanged."""
    before = record.model_dump()
    pending = None if pending_since is None else CanaryPending(pending_since, "no GPU")
    result = advance(_run(), kind, record, stable, canary, pending)
    assert record.model_dump() == before, "the engine changed the record it was handed"
    return result.record, result.step


def _judged(k: int) -> Judged:
    judged = judge(SPEC, window(CODE, k), None)
    assert judged.conclusive
    return judged


INCONCLUSIVE = judge(SPEC, None, None)


def test_a_trial_s_placement_is_read_from_its_record() -> None:
    """Each placement is one value of the record's, an interleaved trial's its own (both
    sides on the stable pods, turn by turn) in either side's turn; whether the stable pods
    run the candidate now is the record's too: after the switch, or in the candidate's
    turns of an interleaved trial."""
    for where in Placement:
        assert placed(where).placement is where
    other_turn = placed(Placement.INTERLEAVED, candidate_turn=False)
    assert other_turn.placement is Placement.INTERLEAVED
    runs = {where: placed(where).stable_runs_candidate for where in Placement}
    assert runs == {
        Placement.CANARY: False,
        Placement.BEFORE: False,
        Placement.AFTER: True,
        Placement.INTERLEAVED: True,
    }
    assert not other_turn.stable_runs_candidate


def test_in_place_the_stable_pods_switch_once_their_windows_before_are_in() -> None:
    kind = Kind()
    record, step = advanced(kind, placed(Placement.BEFORE), _judged(3), None)
    assert step is Next.MEASURE
    record, step = advanced(kind, record, INCONCLUSIVE, None)
    assert step is Next.MEASURE and record.stable.windows == 1
    record, step = advanced(kind, record, _judged(3), None)
    assert step is Next.SWITCH
    assert (record.stable.windows, record.canary.windows) == (2, 0)


def test_after_the_switch_the_stable_windows_are_the_candidates() -> None:
    kind = Kind()
    record = placed(Placement.AFTER).model_copy(update={"stable": TrackTotals(windows=2)})
    record, step = advanced(kind, record, _judged(4), None)
    assert step is Next.MEASURE and record.canary.windows == 1
    record, step = advanced(kind, record, _judged(4), None)
    assert step is Next.EXTEND or isinstance(step, Ended)  # compared
    assert record.canary.windows == 2


def test_a_canary_window_under_the_floor_ends_the_trial_uncounted() -> None:
    kind = Kind(fails_window=True)
    record, step = advanced(kind, placed(Placement.CANARY), _judged(3), window(CODE, 4))
    assert step == Ended(TrialOutcome.BELOW_FLOOR, "one window under the floor")
    assert (record.stable.windows, record.canary.windows) == (1, 0)


def test_windows_under_the_floor_end_the_trial_counted() -> None:
    kind = Kind(fails_totals=True)
    record, step = advanced(kind, placed(Placement.AFTER), _judged(4), None)
    assert step == Ended(TrialOutcome.BELOW_FLOOR, "every window under the floor")
    assert record.canary.windows == 1


def test_a_canary_pending_past_its_timeout_is_replaced_in_place_where_the_kind_may() -> None:
    long_ago, canary = T0.timestamp() - 600, placed(Placement.CANARY)
    record, step = advanced(Kind(), canary, _judged(3), window(CODE, 4), long_ago)
    assert step == InPlaceInstead(600.0, "no GPU") and record == canary  # nothing counted
    kept = Kind(may_go_in_place=False)
    assert advanced(kept, canary, _judged(3), window(CODE, 4), long_ago)[1] is Next.MEASURE
    recent = T0.timestamp() - 60
    assert advanced(Kind(), canary, _judged(3), window(CODE, 4), recent)[1] is Next.MEASURE


def test_a_thin_canary_window_is_collected_and_returned_not_written() -> None:
    """A canary window with too few drafts is not judged alone: it is collected, and the
    engine returns status.openWindows with it instead of writing them."""
    run, thin = _run(), window(CODE, 4, drafts=5)
    result = advance(run, Kind(), placed(Placement.CANARY), _judged(3), thin)
    assert result.step is Next.MEASURE and result.record.canary.windows == 0
    assert run.status.open_windows is None, "the engine wrote status"
    assert result.open_windows is not None and result.open_windows.canary is not None
    assert result.open_windows.canary.counts.drafts == 5
    run.status.open_windows = result.open_windows
    again = advance(run, Kind(), result.record, _judged(3), thin)
    assert again.open_windows is not None and again.open_windows.canary is not None
    assert again.open_windows.canary.counts.drafts == 10  # grown over two intervals


def test_plain_decoding_s_canary_window_is_judged_alone_on_its_speed() -> None:
    """Plain decoding drafts nothing: its window counts with traffic, and it collects
    nothing."""
    run = _run()
    plain = placed(Placement.CANARY).model_copy(update={"tokens": 0})
    result = advance(run, Kind(), plain, _judged(3), window(CODE, 0))
    assert result.record.canary.windows == 1 and result.open_windows is None
    # The same window on a K's trial drafted nothing: it says nothing of the K.
    drafting = advance(run, Kind(), placed(Placement.CANARY), _judged(3), window(CODE, 0))
    assert drafting.record.canary.windows == 0


# The trials of K and of configs on the engine: what it counted is what status keeps.


@dataclass
class Seen:
    given: TrialRecord
    returned: TrialRecord
    step: trial_engine.Step
    dump: dict[str, object]  # the record given, as it was handed in


def _watch(monkeypatch: pytest.MonkeyPatch) -> list[Seen]:
    seen: list[Seen] = []
    real = trial_engine.advance

    def watched(
        run: Run, kind: trial_engine.TrialKind[TrialRecord], record: TrialRecord, *args: object
    ) -> trial_engine.Advanced[TrialRecord]:
        before = record.model_dump()
        advanced = real(run, kind, record, *args)  # type: ignore[arg-type]
        assert record.model_dump() == before, "the record handed to the engine changed"
        seen.append(Seen(record, advanced.record, advanced.step, before))
        return advanced

    monkeypatch.setattr(trial_engine, "advance", watched)  # as `feed` calls it
    return seen


def _unchanged_since(seen: list[Seen]) -> None:
    """Each record handed to the engine is still as it was, whatever was applied after (a
    switch in place shares no part with it)."""
    for call in seen:
        assert call.given.model_dump() == call.dump


def _kept_in_status(seen: list[Seen], calls: int, trial: TrialRecord | None) -> None:
    """Where this evaluation called the engine (`seen` grew past `calls`) and its trial
    measures on, status keeps the record the engine counted."""
    if len(seen) > calls and trial is not None and seen[-1].step is trial_engine.Next.MEASURE:
        assert (trial.stable, trial.canary) == (seen[-1].returned.stable, seen[-1].returned.canary)


def _counted(seen: list[Seen], placement: Placement) -> list[Seen]:
    """Calls at `placement` whose returned record counted a window the given one lacks."""
    return [
        s
        for s in seen
        if s.given.placement is placement
        and (s.returned.stable.windows, s.returned.canary.windows)
        != (s.given.stable.windows, s.given.canary.windows)
    ]


@pytest.mark.parametrize("strategy", ["Canary", "InPlace"])
def test_a_k_trial_is_counted_on_a_new_record(
    monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    seen = _watch(monkeypatch)
    fleet = Fleet(make_spec(tuning={"strategy": strategy}))
    for _ in range(40):
        calls = len(seen)
        fleet.step(CODE)
        _kept_in_status(seen, calls, fleet.status.speculation.trial)
    placements = [Placement.CANARY] if strategy == "Canary" else [Placement.BEFORE, Placement.AFTER]
    for placement in placements:
        assert _counted(seen, placement), f"no window counted at {placement}"
    _unchanged_since(seen)


@pytest.mark.parametrize("rollout", ["Canary", "InPlace"])
def test_a_config_trial_is_counted_on_a_new_record(
    monkeypatch: pytest.MonkeyPatch, rollout: str
) -> None:
    seen = _watch(monkeypatch)
    fleet = _settled({"d": CHAT, "d2": CODE}, rollout={"strategy": rollout})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    for _ in range(8):
        calls = len(seen)
        fleet.step()
        config = fleet.status.config
        _kept_in_status(seen, calls, config.trial if config is not None else None)
    assert "PromoteConfig" in fleet.kinds
    placement = Placement.CANARY if rollout == "Canary" else Placement.AFTER
    assert _counted(seen, placement)
    _unchanged_since(seen)


def test_a_config_trial_goes_on_in_place_on_a_new_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config trial whose canary is Pending too long goes on in place with a record of
    its own: the one handed to the engine (status' working copy) is left as it was."""
    seen = _watch(monkeypatch)
    fleet = _settled({"d": CHAT, "d2": CODE})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    fleet.sync()
    fleet.now += timedelta(minutes=10)
    pending = Observation(
        stable=window(CHAT, fleet.status.speculation.tokens or 3, engine=ENGINE),
        canary=None,
        canary_pending=CanaryPending((fleet.now - timedelta(minutes=6)).timestamp(), None),
    )
    decided = decide(fleet.spec, fleet.status, pending, fleet.now)
    assert isinstance(seen[-1].step, InPlaceInstead)
    _unchanged_since(seen)
    assert seen[-1].given.placement is Placement.CANARY
    trial = decided.status.config.trial if decided.status.config else None
    assert trial is not None and trial.placement is Placement.BEFORE
    assert trial.started_at == fleet.now


def _interleaved() -> TrialRecord:
    """A trial of K=4 against K=3 on stable pods that take K hot, the candidate first."""
    in_place = InPlace(previous_tokens=3, switched=True, interleaved=True)
    return TrialRecord(tokens=4, started_at=T0, in_place=in_place)


def _timed(k: int) -> Judged:
    return Judged(window(CODE, k, engine=ENGINE), True, WindowVerdict.CONCLUSIVE)


def test_interleaved_each_window_counts_for_its_side_and_the_other_side_runs_next() -> None:
    """Interleaved (the engine's own branch): a window counts for the side that ran it,
    paired with the other side's at a matched load, and the turn names the side that
    runs next; the sides are compared once the one before has its windows."""
    kind, record = Kind(), _interleaved()
    sides = []
    for k in (4, 3, 4, 3):
        result = advance(_run(), kind, record, _timed(k), None)
        assert result.turn == Turn(3 if k == 4 else 4, None)
        record = result.record
        sides.append((record.canary.windows, record.stable.windows, result.step))
    assert [s[:2] for s in sides] == [(0, 0), (1, 1), (1, 1), (2, 2)]
    assert [s[2] for s in sides[:3]] == [Next.MEASURE] * 3
    assert sides[3][2] is Next.EXTEND or isinstance(sides[3][2], Ended)  # compared
    assert record.in_place is not None and len(record.in_place.pairs or []) == 2


def test_an_interleaved_window_that_says_nothing_keeps_the_side_running() -> None:
    record = _interleaved()
    result = advance(_run(), Kind(), record, INCONCLUSIVE, None)
    assert result.turn is None and result.record == record and result.step is Next.MEASURE


# The engine's feed: one evaluation's windows counted, kept, and the step applied by the
# kind, the same order for every kind.


@dataclass
class RunningKind(Kind):
    """A kind that records what `feed` asks of it."""

    ends_unfed: Ended | None = None
    calls: list[tuple[str, object]] = field(default_factory=list)

    def ended_unfed(self, record: TrialRecord, observation: Observation) -> Ended | None:
        return self.ends_unfed

    def keep(self, record: TrialRecord) -> None:
        self.calls.append(("keep", record))

    def overdue(self, record: TrialRecord) -> Ended | None:
        self.calls.append(("overdue", record))
        return None

    def fall_back_in_place(self, record: TrialRecord, pending: float, waiting: str | None) -> None:
        self.calls.append(("fall back in place", (pending, waiting)))

    def wait_for_canary(self, record: TrialRecord, why: str | None) -> None:
        self.calls.append(("wait for the canary", why))

    def canary_runs(self, record: TrialRecord) -> None:
        self.calls.append(("canary runs", record))

    def switch(self, record: TrialRecord) -> None:
        self.calls.append(("switch", record))

    def end(self, record: TrialRecord, ended: Ended) -> None:
        self.calls.append(("end", ended))


def _fed(kind: RunningKind, record: TrialRecord, stable: Judged, observation: Observation) -> Run:
    run = _run()
    trial_engine.feed(run, kind, record, stable, observation)
    return run


def test_a_trial_starts_where_it_runs_and_is_kept_by_its_kind() -> None:
    """A trial's start is the engine's: on a canary the record holds nothing of where; in
    place the stable pods run what ran before first (the baseline), then switch;
    interleaved they switch to the candidate at once, and alternate with what ran before.
    The kind keeps the record; the record handed in is left as it was."""
    before = Turn(3, None)
    for where, switched, stable_k in (
        (Placement.CANARY, None, None),
        (Placement.BEFORE, False, None),
        (Placement.INTERLEAVED, True, 4),
    ):
        kind, run, record = RunningKind(), _run(), TrialRecord(tokens=4, started_at=T0)
        run.sp.tokens = 3
        trial_engine.start(run, kind, record, where, before)
        ((name, kept),) = kind.calls
        assert name == "keep" and isinstance(kept, TrialRecord), where
        assert kept.placement is where and record.in_place is None
        place = kept.in_place
        assert (place.switched if place else None) is switched, where
        if place is not None:
            assert (place.previous_tokens, place.previous_schedule) == (3, None)
        assert run.sp.tokens == (stable_k or 3), where  # only an interleaved one switches
    with pytest.raises(AssertionError):  # a trial starts before its switch
        trial_engine.start(_run(), RunningKind(), record, Placement.AFTER, before)


def test_a_trial_its_kind_ends_before_counts_nothing_and_ends() -> None:
    ended = Ended(TrialOutcome.TIMEOUT, "too long")
    kind = RunningKind(ends_unfed=ended)
    _fed(kind, placed(Placement.CANARY), _judged(3), Observation(None, window(CODE, 4)))
    assert kind.calls == [("end", ended)]


def test_the_record_counted_is_kept_then_switched() -> None:
    kind = RunningKind(before=1)
    _fed(kind, placed(Placement.BEFORE), _judged(3), Observation(None, None))
    assert [name for name, _ in kind.calls] == ["keep", "switch"]
    (_, kept), (_, switched) = kind.calls
    assert switched is kept and isinstance(kept, TrialRecord) and kept.stable.windows == 1


def test_a_canary_pending_too_long_goes_in_place_and_nothing_else() -> None:
    kind = RunningKind()
    pending = Observation(
        None,
        window(CODE, 4),
        canary_pending=CanaryPending(T0.timestamp() - 600, "no GPU"),
    )
    _fed(kind, placed(Placement.CANARY), _judged(3), pending)
    assert [name for name, _ in kind.calls] == ["keep", "fall back in place"]
    assert kind.calls[-1][1] == (600.0, "no GPU")


def test_a_canary_that_measures_on_is_said_to_run_and_checked_for_its_deadline() -> None:
    kind = RunningKind()
    run = _fed(kind, placed(Placement.CANARY), _judged(3), Observation(None, window(CODE, 4)))
    assert [name for name, _ in kind.calls] == ["keep", "overdue", "canary runs"]
    assert run.status.open_windows is None  # a conclusive canary window collects nothing
