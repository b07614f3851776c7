"""Counts: the one type of vLLM's counters, and its addition, difference and sum."""

from __future__ import annotations

import dataclasses

from specfleet.operator.counts import SCALAR_COUNTERS, Counts
from specfleet.operator.observations import COUNTER_FIELDS, SpecDecodeCounters, TrackWindow

A = Counts(1, 3, 2, (2.0, 0.0), 5, 0.5, 4, 2)
B = Counts(2, 6, 3, (2.0, 1.0, 0.0), 9, 1.0, 8, 4)


def test_addition_pads_the_shorter_positions_with_zeros() -> None:
    assert Counts(3, 9, 5, (4.0, 1.0, 0.0), 14, 1.5, 12, 6) == A + B
    assert Counts.sum([A, B, A]) == A + B + A
    assert Counts.sum([]) == Counts()


def test_difference_is_since_an_earlier_reading_with_the_later_ones_positions() -> None:
    assert Counts(1, 3, 1, (0.0, 1.0, 0.0), 4, 0.5, 4, 2) == B - A
    assert (A - B).accepted_per_position == (0.0, -1.0)
    assert (B - A) + A == B


def test_records_that_carry_counts_combine_as_counts_and_keep_their_own_fields() -> None:
    pod = SpecDecodeCounters(requests_running=3, speculation_exported=True).with_counts(A)
    assert pod.counts() == A and pod.requests_running == 3 and pod.speculation_exported
    window = TrackWindow(seconds=60, pod_seconds=120, pods=2, running_requests=4)
    assert (window.with_counts(B) + pod) == A + B


def test_every_scalar_counter_has_a_series_and_every_field_a_name() -> None:
    """A new counter is a field of Counts and a line of COUNTER_FIELDS: nothing else."""
    assert sorted(COUNTER_FIELDS.values()) == sorted(SCALAR_COUNTERS)
    names = [name for name, _ in Counts(accepted_per_position=(1.0,)).named()]
    fields = [f.name for f in dataclasses.fields(Counts)]
    assert len(names) == len(fields)
    assert names[-1] == "accepted tokens at position 0"
