"""The arithmetic of speculative decoding, shared by the tuner and the simulated engine.

Acceptance follows vLLM's definitions: a draft of K tokens is accepted up to its first
rejected position, so position i counts only when 0..i-1 were accepted; `conditional` is
P(position i accepted | position i-1 accepted). And the published step cost both start
from. The tuner (`specfleet.operator`) predicts with these; the simulator
(`sim_model`, `specfleet.operator.simulate`) samples from them. Nothing here simulates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedStepCost:
    """Time of one engine step (draft + verify) in milliseconds, by drafting style.

    The target forward is memory-bound (flat) until batch x (K+1) tokens reach
    `compute_bound_tokens`; past that, every extra verified token costs
    `verify_ms_per_token`. Sequential drafters (EAGLE-3, MTP, a draft model) pay
    `draft_ms_per_token` per drafted token; parallel ones (P-EAGLE) one pass of
    `parallel_draft_ms` plus a small slope in K; lookup (n-gram) drafts for free.
    """

    target_forward_ms: float
    draft_ms_per_token: float
    parallel_draft_ms: float
    parallel_draft_ms_per_token: float
    compute_bound_tokens: int
    verify_ms_per_token: float


# vLLM PR 32887's P-EAGLE shape on GPT-OSS-120B on one B200 with MT-Bench-like acceptance:
# best K 7 at batch 1 (about 1.5x over plain decoding), best K 3 at batch 8 (about 1.4x),
# ahead of sequential EAGLE-3 by about 1.15x and 1.06x (benchmarks/step_cost_shape.py
# prints the shape; test_step_cost_calibration holds it). It is the tuner's prior (its step
# cost before any pod has measured one, `speed.PRIOR`) and the simulated engine's default:
# change it only with that shape in view.
PUBLISHED_STEP_COST = PublishedStepCost(
    # Plain decoding at batch 1: about 368 tokens/s.
    target_forward_ms=2.7,
    # A drafter pass costs about a third of a target forward (EAGLE-3: one pass a token) ...
    draft_ms_per_token=0.9,
    # ... and P-EAGLE's single pass over K+1 positions most of one, nearly flat in K.
    parallel_draft_ms=1.9,
    parallel_draft_ms_per_token=0.05,
    # Batch 8 turns compute-bound past K=3 (8 x 4 tokens): the published best K there.
    compute_bound_tokens=32,
    # Past the knee: steep enough that K=3 stays the best at batch 8 for the math, code and
    # chat profiles alike (math needs over 0.06; 0.1 leaves a margin). Nothing published
    # pins it further, and steeper only makes speculation at high batch look worse.
    verify_ms_per_token=0.1,
)


def conditional_at(conditional: Sequence[float], position: int) -> float:
    """The conditional acceptance of a position; positions past the list reuse the last."""
    return conditional[min(position, len(conditional) - 1)]


def cumulative_acceptance(conditional: Sequence[float], k: int) -> list[float]:
    """P(position i accepted) for i in 0..k-1: vLLM's expected per-position rate."""
    rates: list[float] = []
    reach = 1.0
    for position in range(k):
        reach *= conditional_at(conditional, position)
        rates.append(reach)
    return rates


def expected_accepted(conditional: Sequence[float], k: int) -> float:
    """Expected accepted draft tokens per draft (step) at K=k."""
    return sum(cumulative_acceptance(conditional, k))


def mean_acceptance_length(conditional: Sequence[float], k: int) -> float:
    """vLLM's mean acceptance length: 1 + accepted / drafts (the bonus token counts)."""
    return 1.0 + expected_accepted(conditional, k)


def expected_draft_acceptance_rate(conditional: Sequence[float], k: int) -> float:
    """vLLM's draft acceptance rate (accepted / draft tokens) expected at K=k."""
    return expected_accepted(conditional, k) / k if k else 0.0
