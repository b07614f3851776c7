"""The step-stats plugin's export: step time by batch bucket, K verified and phase; drafts
per position; the schedule generation. vLLM is not in this venv: the per-step stats are
built here with vLLM's field names (SchedulerIterationDetails, SpecDecodingStats); the
real-engine test reads them from a running vLLM."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from specfleet.runtime.hot_schedule import batch_bucket
from specfleet.runtime.vllm_step_stats import StepMetrics, verified_k

LABELS = {"model_name": "tiny", "engine": "0"}


def _step(
    ctx: int, gen: int, gen_tokens: int, ms: float, drafts_per_pos: list[int] | None = None
) -> SimpleNamespace:
    details = SimpleNamespace(
        num_ctx_requests=ctx,
        num_generation_requests=gen,
        num_generation_tokens=gen_tokens,
        elapsed_ms=ms,
        is_dummy=False,
    )
    spec = (
        None if drafts_per_pos is None else SimpleNamespace(num_draft_tokens_per_pos=drafts_per_pos)
    )
    return SimpleNamespace(iteration_details=details, spec_decoding_stats=spec)


@pytest.mark.parametrize(
    ("batch", "bucket"), [(1, "1"), (2, "2"), (3, "4"), (9, "16"), (512, "512"), (513, "+Inf")]
)
def test_a_batch_falls_in_the_bucket_of_its_upper_bound(batch: int, bucket: str) -> None:
    assert batch_bucket(batch) == bucket


def test_the_k_verified_is_the_tokens_per_decoding_request_less_one() -> None:
    assert verified_k(4, 20) == "4"
    assert verified_k(4, 4) == "0"
    assert verified_k(3, 7) == "mixed"
    assert verified_k(0, 0) == "none"


def test_steps_and_drafts_per_position_are_exported() -> None:
    registry = CollectorRegistry()
    metrics = StepMetrics(registry)
    metrics.record(_step(0, 4, 8, 12.0, [4, 0, 0]), "tiny", 0)  # 4 decoding at K=1
    metrics.record(_step(0, 4, 8, 14.0, [4, 0, 0]), "tiny", 0)
    metrics.record(_step(1, 3, 15, 40.0, [3, 3, 3, 3]), "tiny", 0)  # a prefill joined, K=4
    metrics.record(_step(0, 1, 5, 9.0, [1, 1, 1, 1]), "tiny", 0)  # alone at K=4
    metrics.record(None, "tiny", 0)

    def steps(batch: str, k: str, phase: str, suffix: str = "count") -> float | None:
        return registry.get_sample_value(
            f"specfleet:step_duration_seconds_{suffix}",
            {**LABELS, "batch": batch, "k": k, "phase": phase},
        )

    assert steps("4", "1", "decode") == 2
    assert steps("4", "1", "decode", "sum") == pytest.approx(0.026)
    assert steps("4", "4", "prefill") == 1
    assert steps("1", "4", "decode") == 1
    assert steps("4", "4", "decode") is None

    def drafts(position: int) -> float | None:
        return registry.get_sample_value(
            "specfleet:spec_decode_draft_tokens_per_pos_total",
            {**LABELS, "position": str(position)},
        )

    assert [drafts(p) for p in range(4)] == [12, 4, 4, 4]


def test_a_step_with_no_details_still_counts_its_drafts() -> None:
    registry = CollectorRegistry()
    metrics = StepMetrics(registry)
    metrics.record(SimpleNamespace(iteration_details=None, spec_decoding_stats=SimpleNamespace(
        num_draft_tokens_per_pos=[2, 2])), "tiny", 1)  # fmt: skip
    assert (
        registry.get_sample_value(
            "specfleet:step_duration_seconds_count",
            {"model_name": "tiny", "engine": "1", "batch": "2", "k": "1", "phase": "decode"},
        )
        is None
    )
    assert (
        registry.get_sample_value(
            "specfleet:spec_decode_draft_tokens_per_pos_total",
            {"model_name": "tiny", "engine": "1", "position": "1"},
        )
        == 2
    )


def test_the_generation_in_force_is_a_gauge() -> None:
    registry = CollectorRegistry()
    metrics = StepMetrics(registry)
    assert registry.get_sample_value("specfleet:schedule_generation") == 0
    metrics.schedule_generation.set(5)
    assert registry.get_sample_value("specfleet:schedule_generation") == 5
