"""Step time by K from the runtime's step statistics: a hot pod's /metrics page (made by
the runtime's own StepMetrics) parsed into step tallies, cut into windows like every
counter, and each K of a schedule learned from one window, in the inter-token latency's
units. Without the statistics (pods that do not take K hot) nothing changes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specfleet.operator import speed
from specfleet.operator.api import (
    ScheduleMode,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.metrics import parse_vllm_metrics
from specfleet.operator.observations import (
    Observation,
    PodSample,
    StepTally,
    TrackWindow,
    WindowTracker,
    tallies_since,
)
from specfleet.operator.tuner import decide
from specfleet.runtime.config import Drafting
from specfleet.runtime.vllm_step_stats import StepMetrics

T0 = datetime(2026, 1, 1, tzinfo=UTC)
VLLM = (
    'vllm:spec_decode_num_drafts_total{model_name="m"} 100\n'
    'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 200\n'
    'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 120\n'
    'vllm:generation_tokens_total{model_name="m"} 300\n'
)


def _step(generating: int, k: int, ms: float, prefilling: int = 0) -> SimpleNamespace:
    details = SimpleNamespace(
        num_ctx_requests=prefilling,
        num_generation_requests=generating,
        num_generation_tokens=generating * (k + 1),
        elapsed_ms=ms,
        is_dummy=False,
    )
    return SimpleNamespace(iteration_details=details, spec_decoding_stats=None)


def runtime_page(steps: list[tuple[int, int, float]]) -> str:
    """The stat-logger plugin's series after (batch, K, ms) decode steps (and a prefill
    and a step of mixed Ks, which are not read), beside vLLM's own."""
    registry = CollectorRegistry()
    metrics = StepMetrics(registry)
    for batch, k, ms in steps:
        metrics.record(_step(batch, k, ms), "m", 0)
    metrics.record(_step(3, 2, 50.0, prefilling=1), "m", 0)
    mixed = _step(2, 1, 40.0)
    mixed.iteration_details.num_generation_tokens = 5
    metrics.record(mixed, "m", 0)
    return VLLM + generate_latest(registry).decode()


def test_a_hot_pods_page_gives_its_decode_steps_by_bucket_and_k() -> None:
    steps = [(1, 4, 8.0)] * 3 + [(3, 1, 10.0)] * 2 + [(4, 1, 12.0)]
    tallies = parse_vllm_metrics(runtime_page(steps)).step_tallies
    assert [(t.batch, t.k, t.steps) for t in tallies] == [(1, 4, 3), (4, 1, 3)]
    assert tallies[0].seconds == pytest.approx(0.024)
    assert tallies[1].seconds == pytest.approx(0.032)


def test_a_page_without_step_statistics_has_no_tallies_and_the_same_counters() -> None:
    with_steps = parse_vllm_metrics(runtime_page([(1, 4, 8.0)]))
    without = parse_vllm_metrics(VLLM)
    assert without.step_tallies == ()
    # Besides the tallies, the plugin's page says which schedule generation is in force.
    assert (
        replace(with_steps, step_tallies=(), schedule_generation=None, schedule_applied_at=None)
        == without
    )


@pytest.mark.parametrize(
    "labels",
    [
        'batch="3",k="2",phase="decode"',  # not a bucket the runtime has
        'batch="+Inf",k="2",phase="decode"',  # no batch to learn at
        'batch="4",k="99",phase="decode"',  # no engine drafts 99
        'batch="4",k="2",phase="prefill"',
    ],
)
def test_a_tally_no_runtime_exports_is_not_read(labels: str) -> None:
    line = f"specfleet:step_duration_seconds_count{{{labels}}} 50\n"
    assert parse_vllm_metrics(VLLM + line).step_tallies == ()


def test_windows_take_the_steps_since_the_last_reading_summed_over_pods() -> None:
    tracker = WindowTracker()
    first = {
        "a": runtime_page([(1, 4, 8.0)] * 2),
        "b": runtime_page([(4, 1, 12.0)]),
    }
    then = {
        "a": runtime_page([(1, 4, 8.0)] * 5),
        "b": runtime_page([(4, 1, 12.0)] * 4),
    }

    def samples(pages: dict[str, str], at: float) -> list[PodSample]:
        return [
            PodSample(pod, "stable", at, parse_vllm_metrics(page)) for pod, page in pages.items()
        ]

    tracker.observe(samples(first, 0.0), {"stable": 4})
    window = tracker.observe(samples(then, 60.0), {"stable": 4}).stable
    assert window is not None
    assert [(t.batch, t.k, t.steps) for t in window.step_tallies] == [(1, 4, 3), (4, 1, 3)]


def test_a_reading_since_a_restart_counts_from_zero() -> None:
    before = (StepTally(1, 4, 10, 0.1),)
    assert tallies_since(before, (StepTally(1, 4, 4, 0.04),)) == ()
    assert tallies_since((), (StepTally(1, 4, 4, 0.04),)) == (StepTally(1, 4, 4, 0.04),)


def schedule_window(k1_ms: float, k4_ms: float, itl_scale: float = 1.0) -> TrackWindow:
    """A minute of a schedule: K=4 alone (batch 1) for 2,000 steps, K=1 at batch 3-4
    for 1,000; the inter-token latency `itl_scale` times the engine's step time."""
    tallies = (
        StepTally(1, 4, 2000, 2000 * k4_ms / 1000),
        StepTally(4, 1, 1000, 1000 * k1_ms / 1000),
    )
    decode_steps = 2000 * 1 + 1000 * 3.5
    decode_seconds = (2000 * 1 * k4_ms + 1000 * 3.5 * k1_ms) / 1000 * itl_scale
    return TrackWindow(
        drafts=decode_steps,
        draft_tokens=2000 * 4 + 3500,
        accepted_tokens=2000,
        generation_tokens=decode_steps + 2000,
        decode_seconds=decode_seconds,
        decode_steps=decode_steps,
        engine_steps=3000,
        seconds=60,
        pod_seconds=60,
        pods=1,
        running_requests=3,
        step_tallies=tallies,
    )


def test_each_k_of_a_schedule_is_measured_in_the_windows_units() -> None:
    # The inter-token latency holds 20% besides the engine's step: each K is scaled so.
    found = {m.tokens: m for m in speed.by_k(schedule_window(10.0, 8.0, itl_scale=1.2))}
    assert set(found) == {1, 4}
    assert found[4].ms == pytest.approx(9.6) and found[4].batch == 1.0
    assert found[1].ms == pytest.approx(12.0) and found[1].batch == 3.5
    assert found[1].steps == pytest.approx(3500)


def test_a_k_with_few_steps_teaches_nothing() -> None:
    window = schedule_window(10.0, 8.0)
    few = replace(window, step_tallies=(*window.step_tallies[:1], StepTally(4, 1, 10, 0.1)))
    assert [m.tokens for m in speed.by_k(few)] == [4]
    assert speed.by_k(replace(window, step_tallies=())) == []


def test_a_schedule_on_hot_pods_teaches_the_fit_each_k_it_ran() -> None:
    """Under a schedule the stable window runs two Ks: with the pods' step statistics each
    is a sample of the fit, without them (pods that do not take K hot) neither is."""
    spec = SpeculativeModelSpec.model_validate(
        {
            "model": {"name": "m"},
            "draft": {"method": "peagle", "model": "d"},
            "speculation": {
                "tokens": 4,
                "maxTokens": 4,
                "switching": "Hot",
                "schedule": {
                    "mode": ScheduleMode.FIXED.value,
                    "bands": [{"upToBatch": 2, "tokens": 4}, {"tokens": 1}],
                },
            },
            "tuning": {"interval": "60s", "minDraftTokens": 100},
        }
    )
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    window = schedule_window(10.0, 8.0)
    taught = untaught = status
    for minute in range(1, 4):
        now = T0 + timedelta(minutes=minute)
        taught = decide(spec, taught, Observation(window, None), now).status
        plain = replace(window, step_tallies=())
        untaught = decide(spec, untaught, Observation(plain, None), now).status
    assert taught.step_cost is not None
    assert {s.tokens for s in taught.step_cost.samples} == {1, 4}
    assert untaught.step_cost is None or not untaught.step_cost.samples
    assert taught.step_cost.fitted != speed.prior(Drafting.PARALLEL)
