"""The pure model behind the simulated engine: acceptance, step time and offered load.

No I/O and no clock: the sim server (`sim_server`) and the operator's tuner simulator
both drive it. The arithmetic of acceptance is `decoding`'s, which the tuner uses too:
the simulator consumes it, it is not its source.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import PUBLISHED_STEP_COST as PUBLISHED
from specfleet.runtime.decoding import conditional_at, mean_acceptance_length

Probability = Annotated[float, Field(ge=0.0, le=1.0)]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_seconds(value: Any) -> Any:
    """Seconds from a number or a duration such as "90s", "1m30s", "250ms"."""
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return float(text)
        if not text or _DURATION.sub("", text):
            raise ValueError(f"{value!r} is not a duration such as '90s', '2m' or '250ms'")
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text))
    return value


Seconds = Annotated[float, BeforeValidator(parse_seconds), Field(ge=0.0)]


class _Strict(BaseModel):
    # A typo in a profile must fail loudly, not fall back to a default silently.
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepCost(_Strict):
    """Time of one engine step (draft + verify), in milliseconds, in the simulated engine.

    The target forward is memory-bound (flat) until batch x (K+1) tokens reach
    `compute_bound_tokens`; past that, every extra verified token costs
    `verify_ms_per_token`, which is why speculation stops paying at high batch sizes.
    The defaults are the published P-EAGLE figures (`decoding.PUBLISHED_STEP_COST`),
    the same the tuner starts from.
    """

    target_forward_ms: float = Field(PUBLISHED.target_forward_ms, gt=0)
    draft_ms_per_token: float = Field(
        PUBLISHED.draft_ms_per_token, ge=0, description="sequential drafting (EAGLE)"
    )
    parallel_draft_ms: float = Field(
        PUBLISHED.parallel_draft_ms, ge=0, description="P-EAGLE: all K in one pass"
    )
    parallel_draft_ms_per_token: float = Field(
        PUBLISHED.parallel_draft_ms_per_token, ge=0, description="P-EAGLE's slope in K"
    )
    compute_bound_tokens: int = Field(PUBLISHED.compute_bound_tokens, ge=1)
    verify_ms_per_token: float = Field(PUBLISHED.verify_ms_per_token, ge=0)
    prefill_ms_per_token: float = Field(0.01, ge=0, description="charged when a request joins")
    # A step at K=0 of an engine configured to speculate (a schedule's K=0 band) is not a
    # plain step: the draft still runs over the step's new tokens to keep its cache. vLLM
    # measured +6.6% time per token at 2 requests and +21.6% at 189 against no speculative
    # config (vllm-project/vllm issue 49548): a line through both.
    k0_tax: float = Field(0.064, ge=0, description="K=0 step's extra time over plain, at batch 0")
    k0_tax_per_request: float = Field(
        0.0008, ge=0, description="K=0 step's extra time over plain, per request in the batch"
    )


class Load(_Strict):
    """The built-in load generator: Poisson arrivals of fixed-shape requests."""

    requests_per_second: float = Field(10.0, ge=0)
    prompt_tokens: int = Field(256, ge=1)
    output_tokens: int = Field(384, ge=1)


class DriftStep(_Strict):
    """From `after` seconds of simulated time on, the profile's values are replaced."""

    after: Seconds
    acceptance: list[Probability] | None = Field(None, min_length=1)
    load: Load | None = None


class SimProfile(_Strict):
    """What the simulated engine simulates (the YAML file of `--sim-profile`)."""

    acceptance: list[Probability] = Field(
        default_factory=lambda: [0.92, 0.88, 0.84, 0.8, 0.76, 0.72, 0.68, 0.64],
        min_length=1,
        description="P(position i accepted | position i-1 accepted); the last value repeats",
    )
    noise: float = Field(
        0.02, ge=0, le=0.5, description="std-dev of per-tick jitter on each conditional rate"
    )
    step_noise: float = Field(
        0.02, ge=0, le=0.5, description="std-dev of multiplicative jitter on the step time"
    )
    cost: StepCost = Field(default_factory=StepCost)
    load: Load = Field(default_factory=Load)
    max_num_seqs: int = Field(256, ge=1, description="running requests; the rest wait")
    kv_cache_tokens: int | None = Field(
        None,
        ge=1,
        description="KV cache slots of the engine (None: never the limit): a running request "
        "holds its context and, while the engine speculates, its ceiling K of lookahead slots",
    )
    context_tokens: int = Field(
        1024, ge=1, description="KV slots a running request's context holds, on average"
    )
    tick: Seconds = Field(0.2, gt=0, le=1.0, description="simulated time per engine tick")
    drift: list[DriftStep] = Field(default_factory=list)

    @model_validator(mode="after")
    def _drift_in_order(self) -> SimProfile:
        afters = [step.after for step in self.drift]
        if afters != sorted(afters):
            raise ValueError("drift steps must be in increasing order of `after`")
        return self

    def capacity(self, ceiling: int) -> int:
        """How many requests the engine runs at once: max_num_seqs, and as many as the KV
        cache holds, each with its context and a lookahead of `num_speculative_tokens`
        slots, which vLLM reserves every step (the ceiling, not the K of the step: a pod
        that takes K hot pays its ceiling). `ceiling` 0: plain decoding, no lookahead.
        The requests past it wait."""
        if self.kv_cache_tokens is None:
            return self.max_num_seqs
        slots = self.context_tokens + ceiling
        return min(self.max_num_seqs, max(1, self.kv_cache_tokens // slots))

    def at(self, elapsed: float) -> tuple[list[float], Load]:
        """The acceptance and load in effect after `elapsed` seconds of simulated time."""
        acceptance, load = self.acceptance, self.load
        for step in self.drift:
            if step.after > elapsed:
                break
            acceptance = step.acceptance or acceptance
            load = step.load or load
        return acceptance, load


def load_profile(text: str) -> SimProfile:
    """A profile from YAML (or JSON) text; an empty document is the default profile."""
    data = yaml.safe_load(text)
    if data is None:
        return SimProfile()
    if not isinstance(data, dict):
        raise ValueError("a sim profile must be a YAML mapping")
    return SimProfile.model_validate(data)


def step_seconds(
    cost: StepCost,
    k: int,
    batch: int,
    drafting: Drafting,
    drafted: int | None = None,
    *,
    configured: bool = False,
) -> float:
    """Seconds for one step of `batch` running requests verifying k draft tokens each,
    drafted `drafted` (default k) each: an engine that trims verification below what it
    drafted (vLLM's adaptive verification) pays the drafting of all of them. `configured`:
    the engine was started to speculate, so a step at K=0 pays the K=0 tax."""
    if k == 0 and configured:
        tax = 1.0 + cost.k0_tax + cost.k0_tax_per_request * max(batch, 1)
        return step_seconds(cost, 0, batch, drafting) * tax
    drafted = k if drafted is None else drafted
    if drafted <= 0 or drafting is Drafting.LOOKUP:
        draft_ms = 0.0
    elif drafting is Drafting.PARALLEL:
        draft_ms = cost.parallel_draft_ms + cost.parallel_draft_ms_per_token * drafted
    else:
        draft_ms = cost.draft_ms_per_token * drafted
    verified = max(batch, 1) * (k + 1)
    verify_ms = cost.target_forward_ms + cost.verify_ms_per_token * max(
        0, verified - cost.compute_bound_tokens
    )
    return (draft_ms + verify_ms) / 1000.0


def goodput(
    cost: StepCost,
    conditional: Sequence[float],
    k: int,
    batch: int,
    drafting: Drafting,
    drafted: int | None = None,
    *,
    configured: bool = False,
) -> float:
    """Expected generated tokens per second at a batch size (k=0: no drafting, taxed if
    `configured`); `drafted` as in `step_seconds`."""
    tokens_per_step = batch * (mean_acceptance_length(conditional, k) if k else 1.0)
    return tokens_per_step / step_seconds(cost, k, batch, drafting, drafted, configured=configured)


def sample_accepted(rng: random.Random, conditional: Sequence[float], k: int) -> int:
    """Accepted tokens of one draft of k tokens: the length of its accepted prefix."""
    for position in range(k):
        if rng.random() >= conditional_at(conditional, position):
            return position
    return k


def binomial(rng: random.Random, n: int, p: float) -> int:
    """A Binomial(n, p) draw: exact for small n, a normal approximation for large n.

    The sim draws per-position counts for a whole batch at once, so its cost does not
    grow with the number of tokens; n*p*(1-p) >= 25 keeps the approximation tight.
    """
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    variance = n * p * (1.0 - p)
    if n <= 64 or variance < 25.0:
        return sum(1 for _ in range(n) if rng.random() < p)
    draw = round(rng.gauss(n * p, math.sqrt(variance)))
    return min(n, max(0, draw))


def sample_positions(
    rng: random.Random, conditional: Sequence[float], k: int, drafts: int
) -> list[int]:
    """Accepted counts per position over `drafts` drafts of k tokens (vLLM's per_pos).

    Drafts that reach position i are Binomial(drafts reaching i-1, p_i), so the counts
    are non-increasing in i, exactly as prefix acceptance makes them.
    """
    counts: list[int] = []
    reaching = drafts
    for position in range(k):
        reaching = binomial(rng, reaching, conditional_at(conditional, position))
        counts.append(reaching)
    return counts


def step_jitter(rng: random.Random, noise: float) -> float:
    """A factor for a step time: 1 + zero-mean noise (real step times jitter: co-tenants,
    clocks, the prompt mix), never under 0.5, so a step always takes time."""
    if noise <= 0.0:
        return 1.0
    return max(0.5, 1.0 + rng.gauss(0.0, noise))


def jitter(rng: random.Random, conditional: Sequence[float], noise: float) -> list[float]:
    """The conditional rates with zero-mean noise (traffic mix varies), kept in [0, 1]."""
    if noise <= 0.0:
        return list(conditional)
    return [min(1.0, max(0.0, p + rng.gauss(0.0, noise))) for p in conditional]
