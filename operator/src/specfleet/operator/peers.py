"""What users run instead of specfleet, as policies in the simulator (`benchmarks/peers.py`).

Each peer is a K the pods are started with, held for the whole run (the operator never
restarts them: `hold`), and, for the engines that adapt K themselves, the engine's own
rule as a `simulate.EngineRule`. The simulator runs a window of a pod as parts, one per K
the engine used, each with its share of the window's time (counters and goodput both),
so an in-engine rule changes K within a window and never restarts a pod. The rules see
what the engine sees (its batch size and the accepted counts of its own steps), on the
same simulated engines and seeds as specfleet's tuner.

How each rule is run:
- a table by batch size (vLLM's `num_speculative_tokens_per_batch_size`, TensorRT-LLM's
  `draft_len_schedule`) is a function of the batch, which is constant within a phase:
  one part per window;
- SGLang's EMA controller is simulated step by step (each step's accepted counts drawn
  per position as the engine draws them, `sim_model.sample_positions`) for
  `SGLangAdaptive.steps` steps at the start of each phase, carrying its state across
  phases; the share of time it spent at each K is the phase's mix. Its time constant is
  tens of steps (EMA weight 0.2, a decision every 5 steps), a window tens of thousands,
  so the mix is its steady state;
- TensorRT-LLM's acceptance gate is a rolling mean over N iterations of each iteration's
  acceptance rate: per window, the chance it falls below the threshold at least once is
  taken from the normal approximation of that mean (one independent test per N
  iterations), drawn per pod; once it trips the pod decodes plainly for the rest of the
  run (until a restart, which never comes);
- vLLM's adaptive verification (dspark) drafts the cap K in one pass and verifies the
  budget that pays best: the K below the cap with the highest expected goodput given
  acceptance, as a calibrated confidence head would see it (one part per window).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from specfleet.operator import schedule
from specfleet.operator.api import ScheduledBand, SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.observations import Observation
from specfleet.operator.simulate import (
    Decider,
    EnginePart,
    EngineRule,
    Phase,
    Scenario,
    scenario_spec,
)
from specfleet.operator.tuner import Decided
from specfleet.runtime.decoding import cumulative_acceptance
from specfleet.runtime.sim_model import goodput, sample_positions, step_seconds


def started_at_their_k(scenario: Scenario) -> Scenario:
    """The scenario as a peer's pods run it: started at the peer's K (switching Restart),
    not at specfleet's hot ceiling, whatever the variant asks of specfleet's pods."""
    return scenario.with_policy({"speculation": {"switching": "Restart"}})


def hold(tokens: int) -> Decider:
    """A static K: the pods start at `tokens` and are never restarted. What KServe, llm-d
    and LLMKube ship (one `num_speculative_tokens` in the serving arguments)."""

    def decide(
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        observation: Observation,
        now: datetime,
    ) -> Decided:
        if status.speculation.tokens == tokens:
            return Decided(status)
        speculation = status.speculation.model_copy(update={"tokens": tokens})
        return Decided(status.model_copy(update={"speculation": speculation}))

    return decide


def _only(k: int, configured: int) -> list[EnginePart]:
    k = min(k, configured)
    return [EnginePart(k, 1.0, k)]


def by_batch_bands(bands: Sequence[ScheduledBand]) -> EngineRule:
    """vLLM 0.33's `num_speculative_tokens_per_batch_size`: K by the running batch size,
    chosen per engine step, at most the configured K (vLLM's docs: docs/features/
    speculative_decoding; the list of [first, last, K] rows is what `render` writes
    for a schedule, `schedule.k_at` reads it the same way)."""

    def rule(name: str, configured: int, phase: Phase, rng: random.Random) -> list[EnginePart]:
        return _only(schedule.k_at(bands, phase.concurrency), configured)

    return rule


def draft_len_schedule(table: Mapping[int, int]) -> Callable[[int], int]:
    """TensorRT-LLM's `draft_len_schedule`: {batch size: draft length}, each entry from its
    batch size up (`DecodingBaseConfig.draft_len_schedule`: "{1: 4, 4: 2, 8: 0} means
    batch_size >= 1 uses draft_len=4, >= 4 uses 2, >= 8 uses 0"; it must hold 1)."""
    if 1 not in table:
        raise ValueError("a draft_len_schedule must have batch size 1")
    thresholds = sorted(table)

    def k_for(batch: int) -> int:
        return table[max(t for t in thresholds if t <= max(batch, 1))]

    return k_for


# ------------------------------------------------------------------ SGLang, EMA tiers

# sglang python/sglang/srt/speculative/adaptive_spec_params.py, DEFAULT_ADAPTIVE_CONFIG
# (what `--speculative-adaptive` runs without `--speculative-adaptive-config`): candidate
# steps per batch-size slot, a slot serving batch sizes from its key to the next key.
SGLANG_DEFAULT_TIERS: dict[int, tuple[int, ...]] = {
    1: (1, 3, 7),
    8: (0, 1, 3),
    32: (0, 1),
    64: (0,),
}
SGLANG_DOWN_HYSTERESIS = {1: -0.25, 8: 0.0, 32: 0.0, 64: 0.0}


@dataclass
class SGLangSlot:
    """sglang `AdaptiveStepSlot` (adaptive_spec_params.py), its defaults: an EMA (weight
    0.2) of the accepted draft tokens per request of each verify, updated while drafting;
    after 10 warm-up batches, every 5th batch the steps move down a tier while the EMA is
    at most (lower tier - 0.5 + down hysteresis; 0.5 for a tier of 0), else up a tier while
    it is above (tier - 0.5 + up hysteresis, 0.0); from 0 it probes the next tier."""

    candidates: tuple[int, ...]
    down_hysteresis: float
    current: int
    ema: float
    up_hysteresis: float = 0.0
    alpha: float = 0.2
    update_interval: int = 5
    warmup: int = 10
    batches: int = 0

    @classmethod
    def start(cls, initial: int, candidates: tuple[int, ...], down: float) -> SGLangSlot:
        # An initial step count outside the candidates starts at the middle one.
        current = initial if initial in candidates else candidates[len(candidates) // 2]
        return cls(candidates, down, current, float(current - 1))

    def update(self, accepted_per_request: float) -> None:
        if self.current > 0:
            self.ema = (1 - self.alpha) * self.ema + self.alpha * accepted_per_request
        self.batches += 1
        if self.batches <= self.warmup or (self.batches - self.warmup) % self.update_interval:
            return
        index = self.candidates.index(self.current)
        if self.current == 0:
            index = min(index + 1, len(self.candidates) - 1)
            if self.candidates[index] > 0 and self.ema < 0:
                self.ema = float(self.candidates[index] - 1)
            self.current = self.candidates[index]
            return
        start = index
        while index > 0:
            lower = self.candidates[index - 1]
            if self.ema <= (0.5 if lower == 0 else lower - 0.5) + self.down_hysteresis:
                index -= 1
            else:
                break
        if index == start:
            while index < len(self.candidates) - 1:
                if self.ema > self.candidates[index] - 0.5 + self.up_hysteresis:
                    index += 1
                else:
                    break
        self.current = self.candidates[index]


@dataclass
class SGLangAdaptive:
    """SGLang's `--speculative-adaptive` (EAGLE/EAGLE3, topk 1): per batch-size slot, the
    steps chosen among the slot's tiers from a smoothed accept length with hysteresis,
    in the engine, no restart. Source: sgl-project/sglang python/sglang/srt/speculative/
    adaptive_spec_params.py (`AdaptiveStepSlot`, `AdaptiveSpeculativeParams`) and
    adaptive_step_router.py (a batch goes to the largest slot key not above it, after
    CUDA-graph padding; the scenarios' batch sizes 1, 8 and 32 are capture sizes)."""

    scenario: Scenario
    steps: int = 4000  # simulated per phase: about 10-30 s of engine time
    tiers: Mapping[int, tuple[int, ...]] = field(default_factory=lambda: SGLANG_DEFAULT_TIERS)
    _slots: dict[int, SGLangSlot] = field(default_factory=dict)
    _mix: dict[tuple[float, int], list[EnginePart]] = field(default_factory=dict)

    def slot(self, batch: int, initial: int) -> SGLangSlot:
        key = max(k for k in self.tiers if k <= max(batch, 1))
        if key not in self._slots:
            self._slots[key] = SGLangSlot.start(
                initial, self.tiers[key], SGLANG_DOWN_HYSTERESIS.get(key, 0.0)
            )
        return self._slots[key]

    def __call__(
        self, name: str, configured: int, phase: Phase, rng: random.Random
    ) -> list[EnginePart]:
        key = (phase.start, configured)
        if key not in self._mix:
            self._mix[key] = self._run(configured, phase, rng)
        return self._mix[key]

    def _run(self, configured: int, phase: Phase, rng: random.Random) -> list[EnginePart]:
        spec = scenario_spec(self.scenario)
        drafting = spec.draft.method.runtime.drafting
        cost = self.scenario.engine_cost
        batch = phase.concurrency
        if batch == 0:  # an idle engine runs no step: nothing to adapt to
            return [EnginePart(configured, 1.0, configured)]
        slot = self.slot(batch, configured)
        seconds: dict[int, float] = {}
        for _ in range(self.steps):
            k = min(slot.current, configured)
            seconds[k] = seconds.get(k, 0.0) + step_seconds(
                cost, k, batch, drafting, configured=configured > 0
            )
            if k:
                accepted = sum(sample_positions(rng, phase.acceptance, k, batch))
                slot.update(accepted / batch)
            else:
                slot.update(0.0)
        total = sum(seconds.values())
        return [EnginePart(k, s / total, k) for k, s in sorted(seconds.items())]


# ------------------------------------------------------- TensorRT-LLM, acceptance gate


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def acceptance_rate_moments(
    conditional: Sequence[float], k: int, batch: int
) -> tuple[float, float]:
    """Mean and standard deviation of one iteration's acceptance rate (accepted / drafted
    tokens over the batch's requests) at K=k: A accepted per draft has P(A >= j) =
    cumulative acceptance of position j, so E[A^2] = sum (2j - 1) P(A >= j)."""
    reach = cumulative_acceptance(conditional, k)
    mean = sum(reach)
    second = sum((2 * j + 1) * p for j, p in enumerate(reach))
    variance = max(0.0, second - mean * mean)
    return mean / k, math.sqrt(variance / batch) / k


@dataclass
class TrtLlmGate:
    """TensorRT-LLM's acceptance gate (`acceptance_rate_window_size` N,
    `acceptance_rate_threshold`): the mean of the last N speculating iterations'
    acceptance rates (accepted_draft_tokens / drafted_tokens); below the threshold,
    speculation is off for good (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/
    speculation_gate.py `SpeculationGate`, fed by py_executor's
    `_update_batch_acceptance_rate`). Draft length by batch from `draft_len_schedule`
    (None: the configured K at every batch)."""

    scenario: Scenario
    window: int
    threshold: float
    schedule: Callable[[int], int] | None = None
    _tripped: set[str] = field(default_factory=set)

    def __call__(
        self, name: str, configured: int, phase: Phase, rng: random.Random
    ) -> list[EnginePart]:
        batch = phase.concurrency
        k = min(self.schedule(batch), configured) if self.schedule else configured
        if name in self._tripped or k == 0:
            return [EnginePart(0, 1.0, 0)]
        if batch == 0:  # an idle engine runs no iteration: none to trip the gate
            return [EnginePart(k, 1.0, k)]
        spec = scenario_spec(self.scenario)
        drafting = spec.draft.method.runtime.drafting
        interval = self._interval(spec)
        iterations = interval / step_seconds(self.scenario.engine_cost, k, batch, drafting)
        mean, std = acceptance_rate_moments(phase.acceptance, k, batch)
        below = _normal_cdf((self.threshold - mean) / (std / math.sqrt(self.window)))
        tests = iterations / self.window
        trips = 1.0 - (1.0 - below) ** tests
        if rng.random() >= trips:
            return [EnginePart(k, 1.0, k)]
        self._tripped.add(name)
        # The trip lands somewhere in the window; plain decoding after it.
        at = rng.random()
        return [EnginePart(0, 1.0 - at, 0), EnginePart(k, at, k)]

    @staticmethod
    def _interval(spec: SpeculativeModelSpec) -> float:
        return spec.tuning.interval.length.total_seconds()


# ------------------------------------------------------ vLLM adaptive verification


def adaptive_verification(scenario: Scenario) -> EngineRule:
    """vLLM 0.33's adaptive verification (`enable_adaptive_verification`, documented for
    method dspark only in vllm/config/speculative.py; the budget in
    vllm/v1/worker/gpu/spec_decode/adaptive_verification.py: every (request, step) draft
    slot scored by its survival probability, the globally best admitted while they pay):
    the draft runs at the configured K (the cap), and each step verifies the draft tokens
    whose confidence pays for their verification, up to the cap. With every request
    alike (the simulator's traffic), that is the K at most the cap with the best expected
    goodput when drafting costs the cap's; the confidence is taken as calibrated."""
    spec = scenario_spec(scenario)
    drafting = spec.draft.method.runtime.drafting
    cost = scenario.engine_cost

    def rule(name: str, configured: int, phase: Phase, rng: random.Random) -> list[EnginePart]:
        if configured == 0:
            return [EnginePart(0, 1.0, 0)]
        best = max(
            range(configured + 1),
            key=lambda k: goodput(
                cost, phase.acceptance, k, phase.concurrency, drafting, configured
            ),
        )
        return [EnginePart(best, 1.0, configured)]

    return rule


# ------------------------------------------------------------------------- the peers

# The published best K for P-EAGLE at batch 1 (7) and 8 (3) (vLLM PR 32887; the step
# cost the engines run is calibrated on the same figures) and SGLang's default tiers'
# verdict from 32 on (no drafting): the table a user copying published advice writes.
PUBLISHED_BANDS = (
    ScheduledBand(up_to_batch=7, tokens=7),
    ScheduledBand(up_to_batch=31, tokens=3),
    ScheduledBand(up_to_batch=None, tokens=0),
)
PUBLISHED_DRAFT_LEN_SCHEDULE = {1: 7, 8: 3, 32: 0}
# The gate's settings: TensorRT-LLM documents no default. At K=7 the published workloads'
# acceptance rates are 0.25 (chat) to 0.41 (math) and a stale draft's 0.05: a threshold of
# 0.15 over 100 iterations never trips on the former and trips at once on the latter.
TRT_WINDOW = 100
TRT_THRESHOLD = 0.15


@dataclass(frozen=True)
class Peer:
    """A policy of the comparison: the K the pods start with and the engine's rule."""

    name: str
    tokens: int
    rule: Callable[[Scenario], EngineRule | None]
    methods: frozenset[str] | None = None  # None: every method

    def applies(self, scenario: Scenario) -> bool:
        return self.methods is None or scenario.method in self.methods


PEERS: tuple[Peer, ...] = (
    Peer("static K=3", 3, lambda s: None),
    Peer("static K=7", 7, lambda s: None),
    # SGLang refuses --speculative-adaptive for any algorithm but EAGLE/EAGLE3
    # (adaptive_unsupported_reason); P-EAGLE is EAGLE-3 drafting in one pass.
    Peer(
        "SGLang adaptive",
        7,
        lambda s: SGLangAdaptive(s),
        methods=frozenset({"peagle", "eagle3", "eagle"}),
    ),
    Peer("TRT-LLM gate", 7, lambda s: TrtLlmGate(s, TRT_WINDOW, TRT_THRESHOLD)),
    Peer(
        "TRT-LLM gate+schedule",
        7,
        lambda s: TrtLlmGate(
            s, TRT_WINDOW, TRT_THRESHOLD, draft_len_schedule(PUBLISHED_DRAFT_LEN_SCHEDULE)
        ),
    ),
    Peer("vLLM per-batch K", 7, lambda s: by_batch_bands(PUBLISHED_BANDS)),
    Peer(
        "vLLM adaptive verification",
        7,
        adaptive_verification,
        methods=frozenset({"dspark"}),
    ),
)
