"""Acceptance statistics of a window, with confidence bounds.

Definitions are vLLM's: draft acceptance rate = accepted / draft tokens, mean acceptance
length = 1 + accepted / drafts, per-position rate i = accepted at position i / drafts.

Bounds are one-sided 95% Wilson bounds. The tokens of one draft are not independent
(they are accepted as a prefix: a rejection ends the draft), so the effective sample size
of every rate here is the number of drafts, not of tokens: conservative, never optimistic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from specfleet.operator.observations import TrackWindow
from specfleet.runtime import decoding

Z_ONE_SIDED_95 = 1.6449


@dataclass(frozen=True)
class Estimate:
    """A point estimate with lower and upper confidence bounds."""

    value: float
    low: float
    high: float

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.value * factor, self.low * factor, self.high * factor)


def wilson(rate: float, trials: float, z: float = Z_ONE_SIDED_95) -> Estimate:
    """Wilson score bounds of a proportion `rate` observed over `trials` trials."""
    p = min(1.0, max(0.0, rate))
    if trials < 1:  # under one trial (counters read mid-update) bounds nothing
        return Estimate(p, 0.0, 1.0)
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half))


def draft_acceptance_rate(window: TrackWindow) -> Estimate:
    """vLLM's accepted / drafted tokens, bounded with the drafts as sample size."""
    if window.draft_tokens <= 0:
        return Estimate(0.0, 0.0, 1.0)
    return wilson(window.accepted_tokens / window.draft_tokens, window.drafts)


def drafts_reaching(drafts: float, draft_tokens: float, ks: Sequence[int]) -> list[float]:
    """How many drafts reached each position, when the engine drafted with the Ks in `ks`
    (a schedule picks one per step by batch size; steps at K=0 draft nothing).

    vLLM counts drafts D and draft tokens T, not drafts per K. With one K every draft
    reaches positions 0..K-1. With two, k1 < k2, the two counts fix how many drafts had
    k2 tokens, n2 = (T - k1 D) / (k2 - k1): both counts are sums over the same steps, so
    this is exact, not an estimate; positions k1..k2-1 were drafted by those n2 only.
    More Ks would leave it open, which is why a schedule may use at most two.
    """
    distinct = sorted({k for k in ks if k > 0})
    if not distinct or drafts <= 0:
        return []
    if len(distinct) > 2:
        raise ValueError(f"drafts per position are unknown with three Ks or more: {distinct}")
    if len(distinct) == 1:
        return [drafts] * distinct[0]
    low, high = distinct
    deep = min(drafts, max(0.0, (draft_tokens - low * drafts) / (high - low)))
    return [drafts] * low + [deep] * (high - low)


def per_position(window: TrackWindow) -> list[Estimate]:
    """Acceptance of each draft position: the chance a draft that reached it was accepted
    that far. Under a schedule (`window.ks`) deep positions are reached by fewer drafts:
    dividing by all of them would read the schedule's shallow steps as rejections."""
    if window.drafts <= 0:
        return []
    reaching = drafts_reaching(window.drafts, window.draft_tokens, window.ks)
    estimates = []
    for i, accepted in enumerate(window.accepted_per_position):
        trials = reaching[i] if i < len(reaching) else window.drafts
        if trials <= 0:
            # No draft reached it (a two-K schedule ran its small K all window): unknown,
            # not 0% (which would predict every deeper K useless); predictions extrapolate.
            break
        estimates.append(wilson(accepted / trials, trials))
    return estimates


def mean_acceptance_length(window: TrackWindow) -> Estimate:
    """1 + accepted per draft; its bounds follow from the rate's (tokens per draft = K)."""
    if window.drafts <= 0:
        return Estimate(1.0, 1.0, 1.0)
    tokens_per_draft = window.draft_tokens / window.drafts
    rate = draft_acceptance_rate(window)
    return Estimate(
        1 + window.accepted_tokens / window.drafts,
        1 + rate.low * tokens_per_draft,
        1 + rate.high * tokens_per_draft,
    )


def conditional_acceptance(cumulative: list[float]) -> list[float]:
    """Per-position rates (cumulative: P(reached i)) to P(accept i | accepted i-1)."""
    conditional = []
    previous = 1.0
    for rate in cumulative:
        conditional.append(min(1.0, rate / previous) if previous > 0 else 0.0)
        previous = rate
    return conditional


# Positions never drafted are assumed to be accepted less often than the last measured
# one, by this factor per extra position: acceptance falls with depth in every published
# draft, and over-predicting a deep K costs a failed canary while under-predicting only
# slows the climb by one canary.
EXTRAPOLATION_DECAY = 0.9


def extrapolate(conditional: Sequence[float], length: int) -> list[float]:
    """Conditional acceptance for positions 0..length-1: measured ones as they are, later
    ones decaying from the last measured (never above it)."""
    known = list(conditional[:length])
    if not known:
        return [0.0] * length
    last = known[-1]
    extra = [last * EXTRAPOLATION_DECAY ** (i + 1) for i in range(length - len(known))]
    return known + extra


def mean_length(conditional: Sequence[float], k: int) -> float:
    """Tokens one drafting step at K=k yields a request: the bonus token and the expected
    accepted, positions past the measured ones extrapolated."""
    return _mean_length(tuple(conditional), k)


# A schedule's search asks it per K for every load sample of every layout: the same few
# (conditional, K) pairs thousands of times an evaluation.
@lru_cache(maxsize=1024)
def _mean_length(conditional: tuple[float, ...], k: int) -> float:
    return decoding.mean_acceptance_length(extrapolate(conditional, k), k)
