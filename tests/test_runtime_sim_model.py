"""The sim's model and engine: formulas, convergence to the profile, drift, determinism."""

from __future__ import annotations

import math
import random

import pytest
from pydantic import ValidationError

from specfleet.runtime import decoding, sim_model
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_engine import SimEngine
from specfleet.runtime.sim_model import Load, SimProfile, StepCost


def engine(
    profile: SimProfile, k: int, seed: int = 1, drafting: Drafting = Drafting.PARALLEL
) -> SimEngine:
    return SimEngine(profile, k_max=k, k_for_batch=lambda _: k, drafting=drafting, seed=seed)


def run(sim: SimEngine, seconds: float) -> None:
    tick = sim.profile.tick
    for _ in range(round(seconds / tick)):
        sim.advance(tick)


def test_expected_values_follow_prefix_acceptance() -> None:
    conditional = [0.9, 0.8]  # positions past the list reuse 0.8
    assert decoding.cumulative_acceptance(conditional, 3) == pytest.approx([0.9, 0.72, 0.576])
    assert decoding.expected_accepted(conditional, 3) == pytest.approx(2.196)
    assert decoding.mean_acceptance_length(conditional, 3) == pytest.approx(3.196)
    assert decoding.expected_draft_acceptance_rate(conditional, 3) == pytest.approx(2.196 / 3)


def test_step_time_shapes() -> None:
    cost = StepCost()
    parallel = [sim_model.step_seconds(cost, k, 1, drafting=Drafting.PARALLEL) for k in (1, 8)]
    sequential = [sim_model.step_seconds(cost, k, 1, drafting=Drafting.SEQUENTIAL) for k in (1, 8)]
    lookup = [sim_model.step_seconds(cost, k, 1, drafting=Drafting.LOOKUP) for k in (0, 1, 8)]
    assert lookup[0] == lookup[1] == lookup[2]  # below the knee: a lookup costs nothing
    # P-EAGLE drafts all K in one pass: nearly flat; EAGLE-3 pays per token.
    assert parallel[1] - parallel[0] < 0.1 * parallel[0]
    assert sequential[1] - sequential[0] == pytest.approx(7 * cost.draft_ms_per_token / 1000)
    # Below the compute-bound knee (8 x 4 tokens here) the target forward is flat in batch;
    # past it, it grows.
    assert sim_model.step_seconds(cost, 3, 8, Drafting.PARALLEL) == sim_model.step_seconds(
        cost, 3, 1, Drafting.PARALLEL
    )
    assert sim_model.step_seconds(cost, 3, 64, Drafting.PARALLEL) > 1.5 * sim_model.step_seconds(
        cost, 3, 1, Drafting.PARALLEL
    )


def test_speculation_stops_paying_at_high_batch() -> None:
    cost, conditional = StepCost(), SimProfile().acceptance
    assert sim_model.goodput(cost, conditional, 7, 1, Drafting.PARALLEL) > sim_model.goodput(
        cost, conditional, 3, 1, Drafting.PARALLEL
    )
    assert sim_model.goodput(cost, conditional, 7, 256, Drafting.PARALLEL) < sim_model.goodput(
        cost, conditional, 1, 256, Drafting.PARALLEL
    )


def test_sample_accepted_matches_the_expected_value() -> None:
    rng, conditional = random.Random(3), [0.8, 0.6]
    draws = 20000
    mean = sum(sim_model.sample_accepted(rng, conditional, 4) for _ in range(draws)) / draws
    expected = decoding.expected_accepted(conditional, 4)
    assert abs(mean - expected) < 4 * math.sqrt(4 / draws)  # the variance is below k


def test_profile_yaml_durations_and_errors() -> None:
    profile = sim_model.load_profile(
        "acceptance: [0.9, 0.7]\nload: {requests_per_second: 3}\n"
        "drift:\n- {after: 90s, acceptance: [0.5]}\n"
        "- {after: 2m30s, load: {requests_per_second: 0}}\n"
    )
    assert profile.at(89.9) == ([0.9, 0.7], Load(requests_per_second=3))
    assert profile.at(90)[0] == [0.5]
    assert profile.at(150) == ([0.5], Load(requests_per_second=0))
    assert sim_model.load_profile("") == SimProfile()
    with pytest.raises(ValidationError, match="increasing order"):
        sim_model.load_profile("drift: [{after: 2m, acceptance: [0.5]}, {after: 1m}]")
    with pytest.raises(ValidationError, match="acceptanc"):
        sim_model.load_profile("acceptanc: [0.5]")  # a typo is refused, not ignored
    with pytest.raises(ValidationError):
        sim_model.load_profile("acceptance: [1.2]")
    with pytest.raises(ValidationError, match="duration"):
        sim_model.load_profile("drift: [{after: soon}]")


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_per_position_rates_converge_to_the_profile(noise: float) -> None:
    """Measured rate i = per_pos[i] / drafts is within 4 standard errors of prod(p_0..p_i).

    Sampling: each position's count is Binomial(drafts, c_i), so se^2 = c(1-c)/drafts.
    Noise: each step jitters p_j by N(0, noise); by the delta method the step's c_i moves
    by c_i * sqrt(sum_j (noise/p_j)^2), averaged over the run's steps.
    """
    profile = SimProfile(acceptance=[0.92, 0.85, 0.78, 0.7], noise=noise)
    k = 6
    sim = engine(profile, k, seed=11)
    run(sim, 120.0)
    counters = sim.counters
    drafts = counters.num_drafts
    expected = decoding.cumulative_acceptance(profile.acceptance, k)
    assert drafts > 50_000
    for position, c in enumerate(expected):
        measured = counters.accepted_per_position[position] / drafts
        jitter_terms = sum(
            (noise / decoding.conditional_at(profile.acceptance, j)) ** 2
            for j in range(position + 1)
        )
        se = math.sqrt(c * (1 - c) / drafts + c * c * jitter_terms / counters.num_steps)
        assert abs(measured - c) < 4 * se, (position, measured, c, se)
    assert counters.num_accepted_tokens == sum(counters.accepted_per_position)
    assert counters.num_draft_tokens == k * drafts


def test_same_seed_same_counts_other_seed_other_counts() -> None:
    runs = []
    for seed in (5, 5, 6):
        sim = engine(SimProfile(), 3, seed=seed)
        run(sim, 20.0)
        runs.append(sim.counters)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_default_load_is_a_demo_worth_watching() -> None:
    """The default profile gives a tuner >= 20000 draft tokens per 10 s window at K=3."""
    sim = engine(SimProfile(), 3)
    run(sim, 20.0)  # warm up: the batch fills as requests arrive
    before = sim.counters.num_draft_tokens
    run(sim, 10.0)
    assert sim.counters.num_draft_tokens - before >= 20_000


def test_drift_shows_in_the_next_window() -> None:
    profile = SimProfile(
        acceptance=[0.9], noise=0.0, drift=[sim_model.DriftStep(after=30, acceptance=[0.4])]
    )
    sim = engine(profile, 4)
    rates = []
    for _ in range(4):
        drafts, first = sim.counters.num_drafts, sim.counters.accepted_per_position[0]
        run(sim, 15.0)
        rates.append(
            (sim.counters.accepted_per_position[0] - first) / (sim.counters.num_drafts - drafts)
        )
    assert rates[0] == pytest.approx(0.9, abs=0.02) and rates[1] == pytest.approx(0.9, abs=0.02)
    assert rates[2] == pytest.approx(0.4, abs=0.02) and rates[3] == pytest.approx(0.4, abs=0.02)


def test_admin_switches_take_effect_now() -> None:
    sim = engine(SimProfile(noise=0.0), 2)
    run(sim, 10.0)
    sim.set_profile(SimProfile(acceptance=[0.3], noise=0.0))
    drafts, first = sim.counters.num_drafts, sim.counters.accepted_per_position[0]
    run(sim, 5.0)
    assert (sim.counters.accepted_per_position[0] - first) / (
        sim.counters.num_drafts - drafts
    ) == pytest.approx(0.3, abs=0.03)
    sim.set_load(Load(requests_per_second=0))
    run(sim, 10.0)  # the requests in flight finish, none arrive
    assert not sim.running and not sim.waiting
    drafts = sim.counters.num_drafts
    run(sim, 5.0)
    assert sim.counters.num_drafts == drafts


def test_batch_schedule_lowers_k_at_large_batches() -> None:
    profile = SimProfile(load=Load(requests_per_second=40))
    sim = SimEngine(
        profile,
        k_max=4,
        k_for_batch=lambda b: 4 if b <= 4 else 1,
        drafting=Drafting.PARALLEL,
        seed=2,
    )
    run(sim, 10.0)
    counters = sim.counters
    assert counters.num_draft_tokens < 2 * counters.num_drafts  # mostly K=1 steps
    assert counters.accepted_per_position[3] < counters.accepted_per_position[0] / 10


def test_no_speculation_still_generates() -> None:
    sim = SimEngine(
        SimProfile(), k_max=0, k_for_batch=lambda _: 0, drafting=Drafting.SEQUENTIAL, seed=1
    )
    run(sim, 10.0)
    assert sim.counters.num_drafts == 0 and sim.counters.generation_tokens > 0


def test_requests_finish_with_exactly_their_tokens() -> None:
    from specfleet.runtime.sim_engine import SimRequest

    done: list[SimRequest] = []
    sim = engine(SimProfile(load=Load(requests_per_second=0)), 3)
    for tokens in (1, 7, 100):
        sim.submit(SimRequest(prompt_tokens=10, output_tokens=tokens, on_done=done.append))
    run(sim, 5.0)
    assert sorted(r.generated for r in done) == [1, 7, 100]
    assert sim.counters.generation_tokens == 108
    # vllm:iteration_tokens_total observes every step's prefilled and generated tokens.
    assert sim.counters.iteration_tokens.count == sim.counters.num_steps
    assert sim.counters.iteration_tokens.sum == 3 * 10 + 108
    # 100 tokens at ~3.4 tokens per ~5 ms step: well under a second of simulated time.
    assert max(r.finished_at or 0 for r in done) < 1.0
