"""The trial lifecycle every kind of trial shares (trial_engine.advance), on a kind that
says only what the engine asks of it: which windows count where, what ends a trial below
the floor, when the in-place switch comes and when a Pending canary is replaced."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.operator.api import (
    InPlace,
    Placement,
    SpeculativeModelStatus,
    TrackTotals,
    TrialRecord,
)
from specfleet.operator.outcomes import TrialOutcome
from specfleet.operator.run import Run
from specfleet.operator.stats import Estimate
from specfleet.operator.trial_engine import (
    Ended,
    InPlaceInstead,
    Next,
    Sides,
    TrialSubject,
    advance,
    measured_gain,
)
from specfleet.operator.trial_stats import ONE_SIDED_95
from specfleet.operator.windows import Judged, judge
from tests.decisions import CODE, T0, make_spec, window

SPEC = make_spec(tuning={"canaryWindows": 2, "canaryPendingTimeout": "5m"})


def placed(where: Placement) -> TrialRecord:
    """A trial of K=4 against K=3 that runs where `where` says: its placement is read
    from its record."""
    in_place = None
    if where is not Placement.CANARY:
        in_place = InPlace(previous_tokens=3, switched=where is Placement.AFTER)
    return TrialRecord(tokens=4, started_at=T0, in_place=in_place)


@dataclass
class Kind:
    record: TrialRecord
    windows: int = 2
    k0_band: bool = False
    may_go_in_place: bool = True
    before: int = 2
    fails_window: bool = False
    fails_totals: bool = False

    def measured_before(self, added: bool) -> bool:
        return self.record.stable.windows >= self.before

    def waits_for_canary(self) -> bool:
        return False

    def failing_window(self, canary: Judged) -> str | None:
        return "one window under the floor" if self.fails_window else None

    def failing_totals(self) -> str | None:
        return "every window under the floor" if self.fails_totals else None

    def subject(self) -> TrialSubject | Ended:
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

    def measure(self, subject: TrialSubject, batch: float) -> tuple[Estimate, str]:
        record = self.record
        return measured_gain(subject, record.stable, record.canary, batch, _run().cost)


def _run() -> Run:
    return Run(SPEC, SpeculativeModelStatus(), T0, None)


def _judged(k: int) -> Judged:
    judged = judge(SPEC, window(CODE, k), None)
    assert judged.conclusive
    return judged


INCONCLUSIVE = judge(SPEC, None, None)


def test_a_trial_s_placement_is_read_from_its_record() -> None:
    for where in Placement:
        assert placed(where).placement is where


def test_in_place_the_stable_pods_switch_once_their_windows_before_are_in() -> None:
    kind = Kind(placed(Placement.BEFORE))
    assert advance(_run(), kind, _judged(3), None) is Next.MEASURE
    assert advance(_run(), kind, INCONCLUSIVE, None) is Next.MEASURE
    assert kind.record.stable.windows == 1
    assert advance(_run(), kind, _judged(3), None) is Next.SWITCH
    assert (kind.record.stable.windows, kind.record.canary.windows) == (2, 0)


def test_after_the_switch_the_stable_windows_are_the_candidates() -> None:
    kind = Kind(placed(Placement.AFTER))
    kind.record.stable = TrackTotals(windows=2)
    assert advance(_run(), kind, _judged(4), None) is Next.MEASURE
    assert kind.record.canary.windows == 1
    step = advance(_run(), kind, _judged(4), None)
    assert step is Next.EXTEND or isinstance(step, Ended)  # compared
    assert kind.record.canary.windows == 2


def test_a_canary_window_under_the_floor_ends_the_trial_uncounted() -> None:
    kind = Kind(placed(Placement.CANARY), fails_window=True)
    step = advance(_run(), kind, _judged(3), _judged(4))
    assert step == Ended(TrialOutcome.BELOW_FLOOR, "one window under the floor")
    assert (kind.record.stable.windows, kind.record.canary.windows) == (1, 0)


def test_windows_under_the_floor_end_the_trial_counted() -> None:
    kind = Kind(placed(Placement.AFTER), fails_totals=True)
    step = advance(_run(), kind, _judged(4), None)
    assert step == Ended(TrialOutcome.BELOW_FLOOR, "every window under the floor")
    assert kind.record.canary.windows == 1


def test_a_canary_pending_past_its_timeout_is_replaced_in_place_where_the_kind_may() -> None:
    long_ago = T0.timestamp() - 600
    step = advance(_run(), Kind(placed(Placement.CANARY)), _judged(3), _judged(4), long_ago)
    assert step == InPlaceInstead(600.0)
    kept = Kind(placed(Placement.CANARY), may_go_in_place=False)
    assert advance(_run(), kept, _judged(3), _judged(4), long_ago) is Next.MEASURE
    recent = T0.timestamp() - 60
    assert (
        advance(_run(), Kind(placed(Placement.CANARY)), _judged(3), _judged(4), recent)
        is Next.MEASURE
    )
