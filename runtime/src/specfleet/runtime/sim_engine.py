"""The simulated engine's state: a continuous-batching scheduler driven by `sim_model`.

It has no clock and no I/O: `advance(seconds)` simulates the engine steps that fit in
that much time, in whole steps, and updates vLLM-style counters. The server calls it
on a timer; tests call it directly. Given a seed, the same calls give the same counts.
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import (
    Load,
    SimProfile,
    jitter,
    sample_positions,
    step_jitter,
    step_seconds,
)

# vLLM 0.33's buckets (vllm/v1/metrics/buckets.py) for vllm:inter_token_latency_seconds
# (one observation per request per decode step) ...
INTER_TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
# ... and for vllm:iteration_tokens_total (one observation per engine step: the prompt
# tokens it prefilled plus the tokens it generated).
ITERATION_TOKENS_BUCKETS = (
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
)  # fmt: skip


@dataclass
class Histogram:
    """A Prometheus histogram's state: counts per `le` bound (the last one +Inf), sum, count."""

    bounds: tuple[float, ...]
    bucket_counts: list[int] = field(init=False)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.bucket_counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.bucket_counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times


@dataclass
class SimRequest:
    """One request in the engine; `on_done` fires when its last token is generated."""

    prompt_tokens: int
    output_tokens: int
    on_done: Callable[[SimRequest], None] | None = None
    generated: int = 0
    arrived_at: float = 0.0
    finished_at: float | None = None


@dataclass
class Counters:
    """Cumulative totals, exported under vLLM's metric names. They never decrease."""

    num_steps: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    generation_tokens: int = 0
    prompt_tokens: int = 0
    inter_token_latency: Histogram = field(
        default_factory=lambda: Histogram(INTER_TOKEN_LATENCY_BUCKETS)
    )
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITERATION_TOKENS_BUCKETS))


class SimEngine:
    """Continuous batching with speculative decoding, simulated in whole steps."""

    def __init__(
        self,
        profile: SimProfile,
        k_max: int,
        k_for_batch: Callable[[int], int],
        drafting: Drafting,
        seed: int | None,
    ) -> None:
        self.k_max = k_max
        self.k_for_batch = k_for_batch
        self.drafting = drafting
        self.rng = random.Random(seed)
        self.elapsed = 0.0  # simulated seconds since start
        self.counters = Counters(accepted_per_position=[0] * k_max)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self._profile = profile
        self._profile_since = 0.0  # drift is timed from when the profile took effect
        self._load_override: Load | None = None
        self._budget = 0.0  # simulated time not yet spent on a whole step
        self._next_arrival: float | None = None
        self._pending_prefill_ms = 0.0
        self._pending_prefill_tokens = 0
        # The next step's jitter, drawn once: a step that does not fit in this tick's time
        # is the same step in the next tick.
        self._step_factor = step_jitter(self.rng, profile.step_noise)
        self._rotation = 0  # which requests get the remainder tokens of a step

    @property
    def profile(self) -> SimProfile:
        return self._profile

    def set_profile(self, profile: SimProfile) -> None:
        """Switch the profile now; its drift counts from now, a load override ends."""
        self._profile = profile
        self._profile_since = self.elapsed
        self._load_override = None
        self._next_arrival = None

    def set_load(self, load: Load) -> None:
        """Switch the offered load now (it wins over the profile's and its drift)."""
        self._load_override = load
        self._next_arrival = None

    def acceptance_now(self) -> list[float]:
        return self._profile.at(self.elapsed - self._profile_since)[0]

    def load_now(self) -> Load:
        return self._load_override or self._profile.at(self.elapsed - self._profile_since)[1]

    def submit(self, request: SimRequest) -> None:
        """Queue a request (a real one from the HTTP API, or a generated one)."""
        request.arrived_at = self.elapsed
        self.waiting.append(request)

    def advance(self, seconds: float) -> None:
        """Simulate `seconds` more of engine time."""
        end = self.elapsed + seconds
        self._generate_arrivals(end)
        self._budget += seconds
        while True:
            self._admit()
            if not self.running:
                self._budget = 0.0  # an idle engine does not bank time for later
                break
            batch = len(self.running)
            k = min(self.k_for_batch(batch), self.k_max)
            configured = self.k_max > 0
            step = step_seconds(self._profile.cost, k, batch, self.drafting, configured=configured)
            step *= self._step_factor
            step += self._pending_prefill_ms / 1000.0
            if step > self._budget:
                break
            self._budget -= step
            prefilled = self._pending_prefill_tokens
            self._pending_prefill_ms = 0.0
            self._pending_prefill_tokens = 0
            self._step_factor = step_jitter(self.rng, self._profile.step_noise)
            self.elapsed = end - self._budget
            self._step(batch, k, step, prefilled)
        self.elapsed = end

    def _generate_arrivals(self, end: float) -> None:
        load = self.load_now()
        if load.requests_per_second <= 0:
            self._next_arrival = None
            return
        if self._next_arrival is None:
            self._next_arrival = self.elapsed + self.rng.expovariate(load.requests_per_second)
        while self._next_arrival <= end:
            # Output lengths vary +-50% around the mean, as real traffic's do.
            output = max(1, round(load.output_tokens * self.rng.uniform(0.5, 1.5)))
            self.submit(SimRequest(prompt_tokens=load.prompt_tokens, output_tokens=output))
            self._next_arrival += self.rng.expovariate(load.requests_per_second)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self._profile.capacity(self.k_max):
            request = self.waiting.popleft()
            self.running.append(request)
            self.counters.prompt_tokens += request.prompt_tokens
            self._pending_prefill_ms += (
                request.prompt_tokens * self._profile.cost.prefill_ms_per_token
            )
            self._pending_prefill_tokens += request.prompt_tokens

    def _step(self, batch: int, k: int, step: float, prefilled: int) -> None:
        counters = self.counters
        counters.num_steps += 1
        accepted = 0
        if k > 0:
            conditional = jitter(self.rng, self.acceptance_now(), self._profile.noise)
            per_position = sample_positions(self.rng, conditional, k, batch)
            accepted = sum(per_position)
            counters.num_drafts += batch
            counters.num_draft_tokens += batch * k
            counters.num_accepted_tokens += accepted
            for position, count in enumerate(per_position):
                counters.accepted_per_position[position] += count
        # Each running request emits one token per step plus its accepted drafts; the
        # batch's accepted total is spread over the requests.
        tokens = batch + accepted
        share, extra = divmod(tokens, batch)
        generated = 0
        still_running: list[SimRequest] = []
        for index, request in enumerate(self.running):
            bonus = 1 if (index - self._rotation) % batch < extra else 0
            emitted = min(share + bonus, request.output_tokens - request.generated)
            request.generated += emitted
            generated += emitted
            if request.generated >= request.output_tokens:
                request.finished_at = self.elapsed
                if request.on_done is not None:
                    request.on_done(request)
            else:
                still_running.append(request)
        self._rotation = (self._rotation + extra) % max(batch, 1)
        self.running = still_running
        counters.generation_tokens += generated
        counters.inter_token_latency.observe(step, times=batch)
        counters.iteration_tokens.observe(prefilled + generated)
