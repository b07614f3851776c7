from __future__ import annotations

import pytest

from specfleet.operator.api import RollbackMetric
from specfleet.operator.observations import TrackWindow
from specfleet.operator.rollback_metrics import ROLLBACK_METRICS
from specfleet.operator.stats import (
    conditional_acceptance,
    draft_acceptance_rate,
    mean_acceptance_length,
    per_position,
    wilson,
)


def window(drafts: float, per_pos: tuple[float, ...]) -> TrackWindow:
    return TrackWindow(
        drafts=drafts,
        draft_tokens=drafts * len(per_pos),
        accepted_tokens=sum(per_pos),
        accepted_per_position=per_pos,
        generation_tokens=drafts + sum(per_pos),
        seconds=60,
        pod_seconds=120,
        pods=2,
        running_requests=8,
    )


def test_wilson_brackets_the_rate_and_narrows_with_samples() -> None:
    small, large = wilson(0.8, 100), wilson(0.8, 100_000)
    assert small.low < large.low < 0.8 < large.high < small.high
    assert wilson(0.0, 50).low == 0.0 and wilson(1.0, 50).high == pytest.approx(1.0)
    assert wilson(0.5, 0).low == 0.0


def test_vllm_definitions() -> None:
    w = window(1000, (800, 600, 300))
    assert draft_acceptance_rate(w).value == pytest.approx(1700 / 3000)
    assert mean_acceptance_length(w).value == pytest.approx(2.7)
    assert [e.value for e in per_position(w)] == pytest.approx([0.8, 0.6, 0.3])
    assert conditional_acceptance([0.8, 0.6, 0.3]) == pytest.approx([0.8, 0.75, 0.5])


def test_rate_bound_uses_drafts_as_sample_size() -> None:
    # tokens of one draft are not independent: the bound must not shrink with K
    w = window(200, (160, 120, 60))
    assert draft_acceptance_rate(w).low == pytest.approx(wilson(1700 / 3000 / 1, 200).low, rel=0.2)
    assert draft_acceptance_rate(w).low < wilson(340 / 600, 600).low


def test_rollback_metrics() -> None:
    w = window(10_000, (8_000, 6_000))
    rate = ROLLBACK_METRICS[RollbackMetric.DRAFT_ACCEPTANCE_RATE].of_window(w, None)
    first = ROLLBACK_METRICS[RollbackMetric.FIRST_POSITION_ACCEPTANCE].of_window(w, None)
    relative = ROLLBACK_METRICS[RollbackMetric.RELATIVE_TO_BASELINE].of_window(w, 0.8)
    assert rate is not None and rate.value == pytest.approx(0.7) and rate.low < 0.7
    assert first is not None and first.value == pytest.approx(0.8)
    assert relative is not None and relative.value == pytest.approx(0.875)
    assert ROLLBACK_METRICS[RollbackMetric.RELATIVE_TO_BASELINE].of_window(w, None) is None
    assert (
        ROLLBACK_METRICS[RollbackMetric.FIRST_POSITION_ACCEPTANCE].of_window(window(100, ()), None)
        is None
    )
