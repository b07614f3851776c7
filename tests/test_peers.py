"""The peers' rules (`specfleet.operator.peers`) against their sources' semantics, and the
simulator running a window as parts at different K with no restart."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from specfleet.operator.api import ScheduledBand
from specfleet.operator.peers import (
    PEERS,
    SGLangAdaptive,
    SGLangSlot,
    TrtLlmGate,
    acceptance_rate_moments,
    adaptive_verification,
    by_batch_bands,
    draft_len_schedule,
    hold,
)
from specfleet.operator.simulate import (
    EnginePart,
    Phase,
    Scenario,
    load_scenario,
    phases,
    simulate,
)
from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import expected_draft_acceptance_rate
from specfleet.runtime.sim_model import StepCost, goodput, sample_positions

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
CODE = [0.831, 0.664]
STALE = [0.3, 0.2]


def scenario(variant: str, file: str = "steady.yaml") -> Scenario:
    return load_scenario(SCENARIOS / file, variant)


def phase(acceptance: list[float], batch: int, start: float = 0.0) -> Phase:
    return Phase(start, acceptance, batch, 2)


# --------------------------------------------------------------------------- SGLang


def test_sglang_slot_starts_at_the_middle_tier_when_k_is_not_one() -> None:
    # sglang test_adaptive_spec_params: initial steps 2 with tiers [1, 3, 7] -> 3, EMA 2.0.
    slot = SGLangSlot.start(2, (1, 3, 7), -0.25)
    assert (slot.current, slot.ema) == (3, 2.0)


def test_sglang_slot_waits_for_warmup_and_interval() -> None:
    # The upstream case: EMA weight 1, one warm-up batch, a decision every 2nd batch.
    slot = SGLangSlot((1, 3, 7), 0.0, 3, 2.0, alpha=1.0, warmup=1, update_interval=2)
    slot.update(0.0)
    assert slot.current == 3
    slot.update(0.0)
    assert slot.current == 3
    slot.update(0.0)
    assert slot.current == 1


def test_sglang_slot_climbs_past_each_threshold_and_probes_up_from_zero() -> None:
    slot = SGLangSlot((1, 3, 7), 0.0, 1, 0.0, alpha=1.0, warmup=0, update_interval=1)
    slot.update(2.6)  # above 1 - 0.5 and above 3 - 0.5: two tiers at once
    assert slot.current == 7
    off = SGLangSlot((0, 1, 3), 0.0, 0, -1.0, alpha=1.0, warmup=0, update_interval=1)
    off.update(0.0)
    assert (off.current, off.ema) == (1, 0.0)  # the probe starts from its neutral EMA


def test_sglang_hysteresis_holds_between_tiers() -> None:
    # Down from 7 needs the EMA at most 3 - 0.5 - 0.25; up from 3 above 3 - 0.5.
    slot = SGLangSlot((1, 3, 7), -0.25, 7, 6.0, alpha=1.0, warmup=0, update_interval=1)
    slot.update(2.3)
    assert slot.current == 7
    slot.update(2.2)
    assert slot.current == 3
    slot.update(2.4)
    assert slot.current == 3


def test_sglang_rule_mixes_tiers_by_time_and_keeps_each_slot() -> None:
    s = scenario("code/c1/published")
    rule = SGLangAdaptive(s)
    rng = random.Random(0)
    mix = rule("stable-0", 7, phases(s)[0], rng)
    assert sum(p.share for p in mix) == pytest.approx(1.0)
    assert {p.k for p in mix} <= {1, 3, 7}
    assert all(p.k == p.drafted for p in mix)
    # The same phase is one mix for every pod and window; batch 8 uses its own slot.
    assert rule("stable-1", 7, phases(s)[0], rng) is mix
    at_eight = rule("stable-0", 7, phase(CODE, 8, start=60.0), rng)
    assert {p.k for p in at_eight} <= {0, 1, 3}
    assert set(rule._slots) == {1, 8}


# ---------------------------------------------------------------------- TensorRT-LLM


def test_draft_len_schedule_holds_from_each_batch_size_up() -> None:
    # DecodingBaseConfig's own example: {1: 4, 4: 2, 8: 0}.
    k_for = draft_len_schedule({1: 4, 4: 2, 8: 0})
    assert [k_for(b) for b in (1, 3, 4, 7, 8, 300)] == [4, 4, 2, 2, 0, 0]
    with pytest.raises(ValueError, match="batch size 1"):
        draft_len_schedule({2: 4})


@pytest.mark.parametrize(("k", "batch"), [(7, 1), (3, 8)])
def test_acceptance_rate_moments_match_sampled_iterations(k: int, batch: int) -> None:
    mean, std = acceptance_rate_moments(CODE, k, batch)
    assert mean == pytest.approx(expected_draft_acceptance_rate(CODE, k))
    rng = random.Random(1)
    rates = [sum(sample_positions(rng, CODE, k, batch)) / (batch * k) for _ in range(20000)]
    assert statistics.fmean(rates) == pytest.approx(mean, abs=0.01)
    assert statistics.stdev(rates) == pytest.approx(std, rel=0.05)


def test_trt_gate_trips_on_a_stale_draft_for_good() -> None:
    s = scenario("c1/published", "stale-draft.yaml")
    gate = TrtLlmGate(s, 100, 0.15)
    rng = random.Random(0)
    first = gate("stable-0", 7, phase(STALE, 1), rng)
    assert first[0].k == 0 and sum(p.share for p in first) == pytest.approx(1.0)
    # Off for good: even good acceptance later does not bring it back.
    assert gate("stable-0", 7, phase(CODE, 1, start=60.0), rng) == [EnginePart(0, 1.0, 0)]
    # Another pod has its own gate.
    assert gate("stable-1", 7, phase(CODE, 1, start=60.0), rng) == [EnginePart(7, 1.0, 7)]


def test_trt_gate_with_a_schedule_drafts_nothing_at_high_batch() -> None:
    s = scenario("code/c32/published")
    gate = TrtLlmGate(s, 100, 0.15, draft_len_schedule({1: 7, 8: 3, 32: 0}))
    rng = random.Random(0)
    assert gate("stable-0", 7, phase(CODE, 32), rng) == [EnginePart(0, 1.0, 0)]
    assert gate("stable-0", 7, phase(CODE, 8), rng) == [EnginePart(3, 1.0, 3)]


# ------------------------------------------------------------------------------ vLLM


def test_vllm_batch_bands_cap_at_the_configured_k() -> None:
    rule = by_batch_bands(
        (ScheduledBand(up_to_batch=7, tokens=7), ScheduledBand(up_to_batch=None, tokens=3))
    )
    rng = random.Random(0)
    assert rule("p", 7, phase(CODE, 1), rng) == [EnginePart(7, 1.0, 7)]
    assert rule("p", 7, phase(CODE, 8), rng) == [EnginePart(3, 1.0, 3)]
    assert rule("p", 5, phase(CODE, 1), rng) == [EnginePart(5, 1.0, 5)]


def test_adaptive_verification_drafts_the_cap_and_verifies_what_pays() -> None:
    s = scenario("dspark/c1", "methods.yaml")
    rule = adaptive_verification(s)
    rng = random.Random(0)
    cost, drafting = s.engine_cost, Drafting.PARALLEL
    for batch in (1, 8, 32):
        [part] = rule("p", 7, phase(CODE, batch), rng)
        assert part.drafted == 7 and 0 <= part.k <= 7
        chosen = goodput(cost, CODE, part.k, batch, drafting, 7)
        assert all(chosen >= goodput(cost, CODE, k, batch, drafting, 7) for k in range(8))
    assert rule("p", 0, phase(CODE, 1), rng) == [EnginePart(0, 1.0, 0)]


def test_drafting_more_than_verified_costs_the_draft_of_all() -> None:
    cost = StepCost()
    trimmed = goodput(cost, CODE, 2, 1, Drafting.PARALLEL, 7)
    assert trimmed < goodput(cost, CODE, 2, 1, Drafting.PARALLEL)
    assert goodput(cost, CODE, 2, 1, Drafting.PARALLEL, 2) == goodput(
        cost, CODE, 2, 1, Drafting.PARALLEL
    )


# ------------------------------------------------------------------------ simulator


def test_hold_keeps_one_k_and_never_restarts() -> None:
    result = simulate(scenario("code/c8/published"), 0, hold(7))
    assert {r.tokens for r in result.records} == {7}
    assert result.decisions == []


def test_a_window_in_parts_counts_each_parts_share() -> None:
    """On a sequential drafter, which drafts each step's K. A parallel one (P-EAGLE)
    started at 7 drafts all 7 slots in the K=3 half too: less than the two halves."""
    parallel = scenario("code/c1/published")
    s = parallel.model_copy(update={"method": "eagle3"})

    def half_and_half(name: str, k: int, p: Phase, rng: random.Random) -> list[EnginePart]:
        return [EnginePart(3, 0.5, 3), EnginePart(7, 0.5, 7)]

    mixed = simulate(s, 0, hold(7), half_and_half)
    three = simulate(s, 0, hold(3)).goodput["achieved"]
    seven = simulate(s, 0, hold(7)).goodput["achieved"]
    assert mixed.goodput["achieved"] == pytest.approx((three + seven) / 2)
    # The pods were never restarted: one configured K throughout.
    assert {r.tokens for r in mixed.records} == {7}
    halves = [simulate(parallel, 0, hold(k)).goodput["achieved"] for k in (3, 7)]
    at_ceiling = simulate(parallel, 0, hold(7), half_and_half).goodput["achieved"]
    assert at_ceiling < 0.999 * sum(halves) / 2


def test_every_peer_runs_where_it_applies() -> None:
    s = scenario("code/c1/published")
    for peer in PEERS:
        if not peer.applies(s):
            assert peer.methods is not None and s.method not in peer.methods
            continue
        result = simulate(s, 0, hold(peer.tokens), peer.rule(s))
        assert 0.5 < result.steady_ratio <= 1.0 + 1e-9, peer.name


def test_every_peer_runs_through_an_idle_hour() -> None:
    """No request in flight: an engine runs no step, so no peer's rule adapts to one (the
    SGLang slot and the TensorRT-LLM gate divided by the batch and crashed the
    benchmark)."""
    s = load_scenario(SCENARIOS / "idle-hour.yaml")
    for peer in PEERS:
        if peer.applies(s):
            result = simulate(s, 0, hold(peer.tokens), peer.rule(s))
            assert 0.0 < result.steady_ratio <= 1.0 + 1e-9, peer.name


def test_the_tuner_tunes_the_cap_of_adaptive_verification() -> None:
    # At 32 in flight the engine verifies few of K's drafts but still drafts K: only no
    # drafting pays, and the tuner, fitting step times by the count verified, measures
    # plain decoding on a canary and stops.
    s = scenario("dspark/c32", "methods.yaml")
    draft = {"method": "dspark", "adaptiveVerification": True}
    capped = s.model_copy(update={"policy": {**s.policy, "draft": draft}})
    result = simulate(capped, 0, engine_rule=adaptive_verification(capped))
    assert [d["kind"] for d in result.decisions] == ["StartCanary", "StopSpeculation"]
    assert result.decisions[0]["reason"] == "PlainPredicted"
    assert result.steady_ratio == pytest.approx(1.0)
